"""Heal: the database is made to agree with the hypervisors, and the audit trail says so."""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib
from types import SimpleNamespace

import pytest
from sqlalchemy import update

from novakit import exceptions
from novakit.cells.registry import UNSCHEDULED
from novakit.compute.states import PowerState
from novakit.context import RequestContext
from novakit.db.models import ComputeNode, Instance, utcnow
from novakit.heal.manager import heal
from novakit.placement import api as placement
from tests.functional.cloud import HOSTS, Cloud, boot


def _actions(cloud: Cloud, ctx: RequestContext, server: dict) -> dict[str, list[tuple[str, str | None]]]:
    return {
        a["action"]: [(e["event"], e["result"]) for e in a["events"]]
        for a in cloud.api.list_actions(ctx, server["id"])
    }


def _kinds(report) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return sorted((c.kind, c.instance) for c in report.corrections)


def test_a_guest_destroyed_behind_our_back_puts_its_server_in_error(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "gone")
    other = boot(cloud, ctx, "fine")
    cloud.fake(server["host"]).vanish(server["id"])

    report = heal(cloud.db, cloud.conf)
    assert _kinds(report) == [("vanished", server["id"])]
    assert report.corrections[0].applied and report.hosts == sorted(HOSTS)

    shown = cloud.api.get(ctx, server["id"])
    assert (shown["status"], shown["power_state_name"]) == ("ERROR", "NOSTATE")
    assert "vanished from host " + server["host"] in shown["fault"]["message"]
    assert _actions(cloud, ctx, server)["heal"] == [("compute_sync_power_state", "Error")]
    assert cloud.api.get(ctx, other["id"])["status"] == "ACTIVE"
    assert heal(cloud.db, cloud.conf).corrections == []  # nothing left to correct

    # The state table decides what an error server allows: not start or pause; rebuild brings it back.
    for refused in ("start", "pause"):
        with pytest.raises(exceptions.InstanceInvalidState):
            getattr(cloud.api, refused)(ctx, server["id"])
    rebuilt = cloud.api.rebuild(ctx, server["id"], {"image": "tiny"})
    assert (rebuilt["status"], rebuilt["power_state_name"]) == ("ACTIVE", "Running")
    assert server["id"] in cloud.fake(server["host"]).list_instances()


def test_a_guest_stopped_behind_our_back_is_recorded_stopped_and_starts_again(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "quiet")
    crashed = boot(cloud, ctx, "crashy")
    cloud.fake(server["host"]).power_off(SimpleNamespace(uuid=server["id"]))
    cloud.fake(crashed["host"]).crash(crashed["id"])

    report = heal(cloud.db, cloud.conf)
    assert _kinds(report) == sorted([("stopped", server["id"]), ("stopped", crashed["id"])])
    shown = cloud.api.get(ctx, server["id"])
    assert (shown["status"], shown["vm_state"], shown["power_state_name"]) == (
        "SHUTOFF",
        "stopped",
        "Shutdown",
    )
    assert cloud.api.get(ctx, crashed["id"])["power_state_name"] == "Crashed"
    assert _actions(cloud, ctx, server)["stop"] == [("compute_sync_power_state", "Success")]

    for s in (server, crashed):
        started = cloud.api.start(ctx, s["id"])
        assert (started["status"], started["power_state_name"]) == ("ACTIVE", "Running")
        assert cloud.fake(s["host"]).list_instances()[s["id"]] == PowerState.RUNNING


def test_a_stopped_server_whose_guest_runs_is_powered_off_on_its_host(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "zombie")
    cloud.api.stop(ctx, server["id"])
    cloud.fake(server["host"]).power_on(SimpleNamespace(uuid=server["id"]))

    dry = heal(cloud.db, cloud.conf, dry_run=True)
    assert _kinds(dry) == [("stopped", server["id"])] and not dry.corrections[0].applied
    assert cloud.fake(server["host"]).list_instances()[server["id"]] == PowerState.RUNNING

    report = heal(cloud.db, cloud.conf)
    assert report.corrections[0].applied
    assert cloud.fake(server["host"]).list_instances()[server["id"]] == PowerState.SHUTDOWN
    assert cloud.api.get(ctx, server["id"])["status"] == "SHUTOFF"
    events = [a for a in cloud.api.list_actions(ctx, server["id"]) if a["request_id"] == report.request_id]
    assert [e["event"] for e in events[0]["events"]] == ["compute_sync_power_state", "compute_stop_instance"]


def _past(cloud: Cloud) -> dt.timedelta:
    return dt.timedelta(seconds=cloud.conf.compute.build_timeout + 5)


def test_a_build_killed_half_way_is_reaped_and_its_claim_freed(cloud: Cloud, ctx: RequestContext) -> None:
    # The process died after the claim, while the host was spawning: the record stays in building,
    # and its lease, last renewed when it was scheduled (build_timeout + 5 s ago), ran out.
    cloud.api.conductor.clock = lambda: utcnow() - _past(cloud)
    [uuid] = [
        s["id"]
        for s in cloud.api.create(ctx, {"name": "killed", "flavor": "m1.small", "image": "tiny"}, build=False)
    ]
    cloud.api.conductor.schedule_instances(ctx, [uuid])
    cloud.api.conductor.clock = utcnow
    [young] = [
        s["id"]
        for s in cloud.api.create(ctx, {"name": "young", "flavor": "m1.small", "image": "tiny"}, build=False)
    ]
    cloud.api.conductor.schedule_instances(ctx, [young])
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.writer() as session:
        session.execute(update(Instance).where(Instance.uuid == uuid).values(task_state="spawning"))
    host = cloud.api.get(cloud.admin, uuid)["host"]
    assert placement.get_usages(cloud.db, host)["VCPU"] >= 1

    report = heal(cloud.db, cloud.conf)
    assert _kinds(report) == [("build_timeout", uuid)]
    shown = cloud.api.get(ctx, uuid)
    assert (shown["status"], shown["task_state"]) == ("ERROR", None)
    assert "timed out" in shown["fault"]["message"] and "details" not in shown["fault"]
    # Let go of, as a failed build's (Nova's _nil_out_instance_obj_host_and_node).
    assert cloud.api.get(cloud.admin, uuid)["host"] is None
    assert placement.get_allocations_for_consumer(cloud.db, uuid) == {}
    assert placement.get_allocations_for_consumer(cloud.db, young) != {}
    assert ("conductor_check_instance_build_time", "Error") in _actions(cloud, ctx, shown)["create"]
    assert cloud.api.get(ctx, young)["status"] == "BUILD"
    assert cloud.api.delete(ctx, uuid)["status"] == "DELETED"


def test_a_build_whose_result_was_lost_is_adopted_with_its_claim(cloud: Cloud, ctx: RequestContext) -> None:
    # The host built the guest, but the playbook was killed before the controller recorded it.
    [uuid] = [
        s["id"]
        for s in cloud.api.create(ctx, {"name": "lost", "flavor": "m1.small", "image": "tiny"}, build=False)
    ]
    [request] = cloud.api.conductor.schedule_instances(ctx, [uuid])
    result = cloud.api.conductor.rpc.send(request)  # the host builds; nobody records the answer
    assert result.results[0].ok
    # While the build's lease lasts, its owner may still record it: heal leaves it alone.
    assert heal(cloud.db, cloud.conf).corrections == []
    later = utcnow() + _past(cloud)

    report = heal(cloud.db, cloud.conf, clock=lambda: later)
    assert _kinds(report) == [("build_adopted", uuid)]
    shown = cloud.api.get(cloud.admin, uuid)
    assert (shown["status"], shown["power_state_name"], shown["host"]) == ("ACTIVE", "Running", request.host)
    assert placement.get_allocations_for_consumer(cloud.db, uuid) != {}
    assert ("conductor_heal_adopt_build", "Success") in _actions(cloud, ctx, shown)["create"]
    # A second heal finds nothing left to do.
    assert heal(cloud.db, cloud.conf, clock=lambda: later).corrections == []
    assert cloud.api.stop(ctx, uuid)["status"] == "SHUTOFF"


def test_orphan_allocations_are_freed_and_orphan_guests_reported_until_asked(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "half-deleted")
    host = server["host"]
    stray = str(uuidlib.uuid4())
    assert placement.claim_resources(
        cloud.db,
        stray,
        placement.get_provider(cloud.db, "compute-1").uuid,
        {"VCPU": 2, "MEMORY_MB": 512},
        "p",
        "u",
    )
    # A delete that died after the record was marked deleted: its claim and guest stay behind.
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.writer() as session:
        session.execute(
            update(Instance)
            .where(Instance.uuid == server["id"])
            .values(deleted=Instance.id, vm_state="deleted", deleted_at=utcnow())
        )

    report = heal(cloud.db, cloud.conf)
    assert _kinds(report) == sorted(
        [("orphan_allocation", server["id"]), ("orphan_allocation", stray), ("orphan_guest", server["id"])]
    )
    guest = next(c for c in report.corrections if c.kind == "orphan_guest")
    assert (guest.host, guest.applied) == (host, False)
    assert placement.get_allocations_for_consumer(cloud.db, stray) == {}
    assert all(not any(placement.get_usages(cloud.db, h).values()) for h in HOSTS)
    assert server["id"] in cloud.fake(host).list_instances()

    report = heal(cloud.db, cloud.conf, destroy_orphans=True)
    assert [(c.kind, c.applied) for c in report.corrections] == [("orphan_guest", True)]
    assert server["id"] not in cloud.fake(host).list_instances()


def test_an_unreachable_host_is_reported_and_its_servers_left_alone(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "far")
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.writer() as session:
        session.execute(
            update(ComputeNode)
            .where(ComputeNode.host == server["host"])
            .values(driver={"driver": "fake", "transport": "carrier-pigeon"})
        )
    cloud.fake(server["host"]).vanish(server["id"])
    report = heal(cloud.db, cloud.conf)
    assert list(report.unreachable) == [server["host"]]
    assert "carrier-pigeon" in report.unreachable[server["host"]]
    assert report.corrections == []
    assert cloud.api.get(ctx, server["id"])["status"] == "ACTIVE"


def test_reports_from_a_playbook_are_used_as_given(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "listed")
    asked = utcnow()
    host = server["host"]
    report = heal(
        cloud.db, cloud.conf, reports={host: {server["id"]: int(PowerState.SHUTDOWN)}}, reported_at=asked
    )
    assert report.hosts == [host]
    assert _kinds(report) == [("stopped", server["id"])]
    # A report older than the record it would correct is not trusted with it.
    cloud.api.start(ctx, server["id"])
    stale = heal(cloud.db, cloud.conf, reports={host: {}}, reported_at=asked)
    assert stale.corrections == []
    with pytest.raises(exceptions.ComputeHostNotFound):
        heal(cloud.db, cloud.conf, hosts=["no-such-host"])
