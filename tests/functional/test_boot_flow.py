"""The whole boot flow with the fake driver: placement, rescheduling, failures, deletes."""

from __future__ import annotations

import json
import threading
import time

from novakit.context import RequestContext
from novakit.placement import api as placement
from tests.functional.cloud import HOSTS, Cloud


def _usage(cloud: Cloud) -> dict[str, dict[str, int]]:
    return {h: placement.get_usages(cloud.db, h) for h in HOSTS}


def _guests(cloud: Cloud) -> dict[str, set[str]]:
    return {h: set(cloud.fake(h).list_instances()) for h in HOSTS}


def test_servers_spread_and_usage_matches_their_flavors(cloud: Cloud, ctx: RequestContext) -> None:
    # 8 GB each: the roomiest host (64 GB) is best for four of them, then the next one is.
    created = cloud.api.create(ctx, {"name": "web", "flavor": "m1.large", "image": "tiny", "max_count": 6})
    assert [s["name"] for s in created] == [f"web-{i}" for i in range(1, 7)]
    assert all(s["status"] == "ACTIVE" and s["power_state_name"] == "Running" for s in created)
    # The member sees no host names, only Nova's opaque host_id; the operator sees the hosts.
    assert all(s["host"] is None and s["host_id"] for s in created)
    servers = cloud.api.list(cloud.admin)
    assert len({s["host_id"] for s in created}) == len({s["host"] for s in servers})
    assert len({s["host"] for s in servers}) > 1  # the RAM weigher spreads by default
    usage = _usage(cloud)
    guests = _guests(cloud)
    for host in HOSTS:
        on_host = [s for s in servers if s["host"] == host]
        assert usage[host].get("VCPU", 0) == 4 * len(on_host)
        assert usage[host].get("MEMORY_MB", 0) == 8192 * len(on_host)
        assert guests[host] == {s["id"] for s in on_host}
    assert all(s["addresses"] and s["launched_at"] for s in servers)


def test_a_failing_host_sends_its_build_to_an_alternate(cloud: Cloud, ctx: RequestContext) -> None:
    cloud.add_host("compute-3", failure_mode="fail_every_spawn")  # the roomiest host: chosen first
    created = cloud.api.create(ctx, {"name": "resilient", "flavor": "m1.small", "image": "tiny"})[0]
    assert created["status"] == "ACTIVE"
    server = cloud.api.get(cloud.admin, created["id"])
    assert server["host"] != "compute-3"
    assert placement.get_usages(cloud.db, "compute-3").get("VCPU", 0) == 0
    events = cloud.api.list_actions(cloud.admin, server["id"])[0]["events"]
    builds = [e for e in events if e["event"] == "compute__do_build_and_run_instance"]
    assert [(e["host"], e["result"]) for e in builds] == [("compute-3", "Error"), (server["host"], "Success")]
    assert cloud.api.list_actions(ctx, server["id"])[0]["message"] == "Error"  # Nova: a failed event marks it
    assert "compute-3" not in {h for h, g in _guests(cloud).items() if server["id"] in g}


def test_when_every_host_fails_the_server_ends_in_error_with_no_claim(
    cloud: Cloud, ctx: RequestContext
) -> None:
    for host in HOSTS:
        cloud.add_host(host, failure_mode="fail_every_spawn")
    server = cloud.api.create(ctx, {"name": "doomed", "flavor": "m1.small", "image": "tiny"})[0]
    assert server["status"] == "ERROR"
    assert server["fault"]["code"] == 500
    assert "re-scheduled" in server["fault"]["message"]
    builds = [
        e
        for e in cloud.api.list_actions(cloud.admin, server["id"])[0]["events"]
        if e["event"] == "compute__do_build_and_run_instance"
    ]
    assert len(builds) == cloud.conf.scheduler.max_attempts == 3
    assert len({e["host"] for e in builds}) == 3
    assert all(not any(u.values()) for u in _usage(cloud).values())
    assert all(not g for g in _guests(cloud).values())


def test_an_aborted_build_is_not_rescheduled(cloud: Cloud, ctx: RequestContext) -> None:
    for host in HOSTS:
        cloud.add_host(host, failure_mode="abort_spawn")
    server = cloud.api.create(ctx, {"name": "aborted", "flavor": "m1.small", "image": "tiny"})[0]
    assert server["status"] == "ERROR"
    builds = [
        e
        for e in cloud.api.list_actions(ctx, server["id"])[0]["events"]
        if e["event"] == "compute__do_build_and_run_instance"
    ]
    assert len(builds) == 1
    assert all(not any(u.values()) for u in _usage(cloud).values())


def test_no_valid_host_explains_itself_and_claims_nothing(cloud: Cloud, ctx: RequestContext) -> None:
    from novakit.catalog import flavors

    flavors.create(cloud.db, cloud.admin, {"name": "giant", "vcpus": 1024, "memory_mb": 10**7, "root_gb": 1})
    server = cloud.api.create(ctx, {"name": "too-big", "flavor": "giant", "image": "tiny"})[0]
    assert server["status"] == "ERROR"
    # The member is told what Nova tells it; the hosts and their limits are the operator's.
    assert server["fault"]["message"] == "No valid host was found."
    assert "details" not in server["fault"] and "host" not in server["fault"]
    fault = cloud.api.get(cloud.admin, server["id"])["fault"]
    assert fault["message"].startswith("No valid host was found. ") and len(fault["message"]) > 25
    explanation = json.loads(fault["details"])
    assert explanation  # the scheduler's account of what each step removed
    assert all(not any(u.values()) for u in _usage(cloud).values())


def test_disabled_hosts_get_no_builds(cloud: Cloud, ctx: RequestContext) -> None:
    from novakit.fleet import hosts

    for host in ("compute-2", "compute-3"):
        hosts.set_disabled(cloud.db, cloud.admin, host, True, "maintenance")
    cloud.api.create(ctx, {"name": "only-one", "flavor": "m1.small", "image": "tiny", "max_count": 3})
    assert {s["host"] for s in cloud.api.list(cloud.admin)} == {"compute-1"}


def test_delete_during_a_build_leaves_nothing(cloud: Cloud, ctx: RequestContext) -> None:
    for host in HOSTS:
        cloud.add_host(host, failure_mode="slow_spawn", spawn_delay=2)
    uuids = cloud.api.create_records(
        ctx,
        __import__("novakit.compute.schemas", fromlist=["x"]).parse(
            __import__("novakit.compute.schemas", fromlist=["x"]).ServerCreate,
            {"name": "short-lived", "flavor": "m1.small", "image": "tiny"},
        ),
    )
    builder = threading.Thread(target=cloud.api.conductor.build_instances, args=(ctx, uuids))
    builder.start()
    time.sleep(0.8)  # the guest is spawning on its host now
    assert cloud.api.get(ctx, uuids[0])["status"] == "BUILD"
    deleted = cloud.api.delete(ctx, uuids[0])
    builder.join(timeout=30)
    assert deleted["status"] == "DELETED"
    assert all(not any(u.values()) for u in _usage(cloud).values())
    assert all(uuids[0] not in g for g in _guests(cloud).values())
    assert cloud.api.list(ctx) == []
