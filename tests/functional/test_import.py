"""Brownfield import: guests novakit did not create become servers with claims, on both back ends."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from novakit import exceptions
from novakit.catalog import flavors
from novakit.compute.rpc import ComputeRPC
from novakit.compute.states import PowerState
from novakit.context import RequestContext
from novakit.fleet import hosts
from novakit.fleet.importer import import_guests
from novakit.heal.manager import heal
from novakit.host.messages import ComputeRequest, ComputeResult
from novakit.placement import api as placement
from tests.functional.cloud import HOSTS, Cloud

# compute-1: 8 vCPU (ratio 4: 32), 16384 MB (512 reserved, ratio 1: 15872 free), 400 GB disk


def _usage(cloud: Cloud, host: str) -> dict[str, int]:
    row = next(r for r in hosts.list_hosts(cloud.db, cloud.conf, ctx=cloud.admin) if r["host"] == host)
    return {"instances": row["instances"], **row["used"]}


def _actions(cloud: Cloud, uuid: str) -> dict[str, list[tuple[str, str | None]]]:
    return {
        a["action"]: [(e["event"], e["result"]) for e in a["events"]]
        for a in cloud.api.list_actions(cloud.admin, uuid)
    }


def test_a_foreign_guest_of_a_flavor_s_size_becomes_an_active_server_with_its_claim(
    cloud: Cloud, ctx: RequestContext
) -> None:
    fake = cloud.fake("compute-1")
    uuid = fake.define_foreign("web01", vcpus=1, memory_mb=1024, root_gb=10)
    assert uuid not in fake.list_instances()  # novakit's view of the host leaves it out

    report = import_guests(cloud.db, cloud.conf, "compute-1", ctx=cloud.admin, project=ctx.project_id)

    [g] = report.guests
    assert (g.uuid, g.name, g.outcome, g.flavor, g.flavor_created, g.vm_state, g.fits) == (
        uuid,
        "web01",
        "imported",
        "m1.small",
        False,
        "active",
        True,
    )
    server = cloud.api.get(cloud.admin, uuid)
    assert (server["name"], server["status"], server["power_state_name"]) == ("web01", "ACTIVE", "Running")
    assert (server["host"], server["project_id"], server["image"]) == ("compute-1", ctx.project_id, None)
    assert server["flavor"]["name"] == "m1.small"
    assert cloud.api.get(ctx, uuid)["id"] == uuid  # the project's own server now
    provider = placement.get_provider(cloud.db, "compute-1").uuid
    assert placement.get_allocations_for_consumer(cloud.db, uuid) == {
        provider: {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}
    }
    assert _usage(cloud, "compute-1") == {"instances": 1, "VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}
    assert _actions(cloud, uuid) == {
        "import": [("compute_import_instance", "Success"), ("conductor_import_instance", "Success")]
    }
    assert fake.list_instances() == {uuid: PowerState.RUNNING}
    assert fake.list_unmanaged() == []


def test_a_stopped_guest_of_no_flavor_s_size_gets_a_private_flavor_recorded_once_and_is_shutoff(
    cloud: Cloud, ctx: RequestContext
) -> None:
    fake = cloud.fake("compute-2")
    db01 = fake.define_foreign(
        "db01", vcpus=3, memory_mb=3000, root_gb=20, ephemeral_gb=5, power_state=PowerState.SHUTDOWN
    )
    db02 = fake.define_foreign("db02", vcpus=3, memory_mb=3000, root_gb=20, ephemeral_gb=5)

    report = import_guests(cloud.db, cloud.conf, "compute-2", ctx=cloud.admin)

    assert [(g.name, g.flavor, g.flavor_created, g.vm_state) for g in report.guests] == [
        ("db01", "imported-3c-3000m-20g-5e", True, "stopped"),
        ("db02", "imported-3c-3000m-20g-5e", False, "active"),
    ]
    assert report.project_id == cloud.admin.project_id
    stopped = cloud.api.get(cloud.admin, db01)
    assert (stopped["status"], stopped["power_state_name"]) == ("SHUTOFF", "Shutdown")
    assert cloud.api.get(cloud.admin, db02)["status"] == "ACTIVE"
    [flavor] = [f for f in flavors.list_flavors(cloud.db) if f["name"].startswith("imported-")]
    assert (flavor["vcpus"], flavor["ram"], flavor["disk"], flavor["ephemeral"], flavor["is_public"]) == (
        3,
        3000,
        20,
        5,
        False,
    )
    assert _usage(cloud, "compute-2") == {"instances": 2, "VCPU": 6, "MEMORY_MB": 6000, "DISK_GB": 50}


def test_imported_claims_count_in_scheduling(cloud: Cloud, ctx: RequestContext) -> None:
    for host in ("compute-2", "compute-3"):
        hosts.set_disabled(cloud.db, cloud.admin, host, True, "only compute-1 for this test")
    cloud.fake("compute-1").define_foreign("big", vcpus=4, memory_mb=15000, root_gb=10)
    # Before the import the boot would fit: compute-1 has 15872 MB free for claims.
    plan = cloud.api.create(ctx, {"name": "before", "flavor": "m1.small", "image": "tiny"}, dry_run=True)
    assert plan  # a host was found

    import_guests(cloud.db, cloud.conf, "compute-1", ctx=cloud.admin)

    assert _usage(cloud, "compute-1")["MEMORY_MB"] == 15000
    server = cloud.api.create(ctx, {"name": "after", "flavor": "m1.small", "image": "tiny"})[0]
    assert server["status"] == "ERROR"
    assert server["fault"]["message"].startswith("No valid host was found.")


def test_a_guest_beyond_the_host_s_capacity_is_refused_with_placement_s_reason_and_nothing_changes(
    cloud: Cloud,
) -> None:
    fake = cloud.fake("compute-1")
    huge = fake.define_foreign("huge", vcpus=2, memory_mb=16000, root_gb=10)
    before = cloud.snapshot()

    for dry_run in (True, False):
        [g] = import_guests(cloud.db, cloud.conf, "compute-1", ctx=cloud.admin, dry_run=dry_run).guests
        assert (g.uuid, g.outcome, g.fits, g.vm_state) == (huge, "refused", False, None)
        assert (
            g.reason
            == "its claim does not fit host compute-1: MEMORY_MB needs 16000, free 15872 of capacity 15872"
        )
    assert cloud.snapshot() == before
    assert [u.uuid for u in fake.list_unmanaged()] == [huge]


def test_a_dry_run_lists_what_it_would_import_and_changes_nothing(cloud: Cloud) -> None:
    fake = cloud.fake("compute-1")
    uuid = fake.define_foreign("app", vcpus=2, memory_mb=2048, root_gb=15, power_state=PowerState.PAUSED)
    before = cloud.snapshot()

    report = import_guests(cloud.db, cloud.conf, "compute-1", ctx=cloud.admin, dry_run=True)

    [g] = report.guests
    assert (g.uuid, g.outcome, g.flavor, g.flavor_created, g.fits, g.vm_state) == (
        uuid,
        "would_import",
        "imported-2c-2048m-15g",
        True,
        True,
        "paused",
    )
    assert report.dry_run
    assert cloud.snapshot() == before
    assert [u.uuid for u in fake.list_unmanaged()] == [uuid]


def test_a_second_import_finds_nothing_more_to_import(cloud: Cloud) -> None:
    cloud.fake("compute-1").define_foreign("once", vcpus=1, memory_mb=1024, root_gb=10)
    assert [g.outcome for g in import_guests(cloud.db, cloud.conf, "compute-1").guests] == ["imported"]
    before = cloud.snapshot()

    assert import_guests(cloud.db, cloud.conf, "compute-1").guests == []
    assert cloud.snapshot() == before


def test_a_member_may_not_import_and_a_bad_project_is_refused(cloud: Cloud, ctx: RequestContext) -> None:
    cloud.fake("compute-1").define_foreign("guest", vcpus=1, memory_mb=1024, root_gb=10)
    before = cloud.snapshot()
    with pytest.raises(exceptions.PolicyNotAuthorized):
        import_guests(cloud.db, cloud.conf, "compute-1", ctx=ctx)
    with pytest.raises(exceptions.ValidationError) as err:
        import_guests(cloud.db, cloud.conf, "compute-1", ctx=cloud.admin, project="  ")
    assert err.value.field == "project" and "1 to 255 printable characters" in err.value.format_message()
    with pytest.raises(exceptions.ComputeHostNotFound):
        import_guests(cloud.db, cloud.conf, "no-such-host", ctx=cloud.admin)
    assert cloud.snapshot() == before


def test_a_name_taken_in_the_project_refuses_that_guest(cloud: Cloud, ctx: RequestContext) -> None:
    cloud.api.create(ctx, {"name": "web", "flavor": "m1.small", "image": "tiny"})
    cloud.fake("compute-1").define_foreign("web", vcpus=1, memory_mb=1024, root_gb=10)
    [g] = import_guests(cloud.db, cloud.conf, "compute-1", ctx=cloud.admin, project=ctx.project_id).guests
    assert g.outcome == "refused" and g.reason.startswith("name: project project-a has a server named 'web'")
    assert [g.outcome for g in import_guests(cloud.db, cloud.conf, "compute-1").guests] == ["imported"]


def test_a_guest_the_host_will_not_adopt_leaves_no_record_or_claim(cloud: Cloud) -> None:
    fake = cloud.fake("compute-1")
    uuid = fake.define_foreign("fleeting", vcpus=1, memory_mb=1024, root_gb=10)
    before = cloud.snapshot()

    class Vanishing(ComputeRPC):
        def send(self, request: ComputeRequest, infos: Any = None) -> ComputeResult:
            if request.operation == "adopt":  # someone ran `virsh undefine` a moment before
                with fake._locked_state() as state:
                    del state["instances"][uuid]
            return super().send(request, infos)

    rpc = Vanishing(cloud.db, cloud.conf)
    [g] = import_guests(cloud.db, cloud.conf, "compute-1", ctx=cloud.admin, rpc=rpc).guests
    assert g.outcome == "refused" and g.reason.startswith("host compute-1 did not adopt it: ")
    assert f"Instance {uuid} could not be found" in g.reason
    # Only the provider's generation moved (the claim and its release, each a compare-and-swap).
    after = cloud.snapshot()
    assert {t: rows for t, rows in after.items() if t != "resource_providers"} == {
        t: rows for t, rows in before.items() if t != "resource_providers"
    }
    assert placement.get_allocations_for_consumer(cloud.db, uuid) == {}


def test_two_imports_of_one_host_at_once_make_one_server_per_guest(cloud: Cloud) -> None:
    fake = cloud.fake("compute-1")
    # Both of a size no flavor has: the two imports also race to record that flavor.
    uuids = {fake.define_foreign(f"g{i}", vcpus=1, memory_mb=700, root_gb=7) for i in range(4)}
    start = threading.Barrier(2)
    reports: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        start.wait()
        try:
            reports.append(import_guests(cloud.db, cloud.conf, "compute-1"))
        except BaseException as exc:  # a failure shows in the assert below, not as a lost thread
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    imported = [g.uuid for r in reports for g in r.guests if g.outcome == "imported"]
    assert sorted(imported) == sorted(uuids)  # each exactly once
    others = [(g.name, g.outcome, g.reason) for r in reports for g in r.guests if g.outcome != "imported"]
    assert all(outcome == "skipped" for _, outcome, _ in others), others
    servers = [s for s in cloud.api.list(cloud.admin) if s["id"] in uuids]
    assert len(servers) == 4 and {s["status"] for s in servers} == {"ACTIVE"}
    assert _usage(cloud, "compute-1") == {"instances": 4, "VCPU": 4, "MEMORY_MB": 2800, "DISK_GB": 28}
    assert sum(f["name"] == "imported-1c-700m-7g" for f in flavors.list_flavors(cloud.db)) == 1


def test_an_imported_server_stops_starts_reboots_and_deletes_and_heal_calls_it_no_orphan(
    cloud: Cloud, ctx: RequestContext
) -> None:
    fake = cloud.fake("compute-3")
    uuid = fake.define_foreign("legacy", vcpus=2, memory_mb=4096, root_gb=40)
    import_guests(cloud.db, cloud.conf, "compute-3", ctx=cloud.admin, project=ctx.project_id)

    assert heal(cloud.db, cloud.conf).corrections == []
    assert cloud.api.stop(ctx, uuid)["status"] == "SHUTOFF"
    assert fake.list_instances()[uuid] == PowerState.SHUTDOWN
    assert cloud.api.start(ctx, uuid)["status"] == "ACTIVE"
    assert cloud.api.reboot(ctx, uuid)["status"] == "ACTIVE"
    assert fake.list_instances()[uuid] == PowerState.RUNNING
    assert heal(cloud.db, cloud.conf).corrections == []

    cloud.api.delete(ctx, uuid)
    assert uuid not in fake.list_instances() and fake.list_unmanaged() == []
    assert placement.get_allocations_for_consumer(cloud.db, uuid) == {}
    assert _usage(cloud, "compute-3") == {"instances": 0, "VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}


def test_heal_imports_unmanaged_guests_when_asked_and_its_dry_run_only_lists_them(
    cloud: Cloud, ctx: RequestContext
) -> None:
    uuid = cloud.fake("compute-2").define_foreign("old", vcpus=4, memory_mb=8192, root_gb=40)
    assert heal(cloud.db, cloud.conf).corrections == []  # without the option, left alone
    before = cloud.snapshot()

    dry = heal(cloud.db, cloud.conf, dry_run=True, import_unmanaged=True)
    assert [(c.kind, c.instance, c.host, c.after, c.applied) for c in dry.corrections] == [
        ("imported_guest", uuid, "compute-2", "active", False)
    ]
    assert "flavor m1.large" in dry.corrections[0].detail
    assert cloud.snapshot() == before

    with pytest.raises(exceptions.PolicyNotAuthorized):
        heal(cloud.db, cloud.conf, import_unmanaged=True, ctx=ctx)
    report = heal(cloud.db, cloud.conf, import_unmanaged=True, import_project=ctx.project_id, ctx=cloud.admin)
    assert [(c.kind, c.instance, c.applied, c.error) for c in report.corrections] == [
        ("imported_guest", uuid, True, None)
    ]
    assert cloud.api.get(ctx, uuid)["status"] == "ACTIVE"
    assert heal(cloud.db, cloud.conf, import_unmanaged=True).corrections == []
    assert sorted(report.hosts) == sorted(HOSTS)


def test_an_import_of_named_guests_takes_only_those_and_an_unknown_name_changes_nothing(cloud: Cloud) -> None:
    fake = cloud.fake("compute-1")
    a = fake.define_foreign("a", vcpus=1, memory_mb=1024, root_gb=10)
    b = fake.define_foreign("b", vcpus=1, memory_mb=1024, root_gb=10)
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        import_guests(cloud.db, cloud.conf, "compute-1", guests=["a", "nope"])
    assert err.value.field == "guests" and "host compute-1 has no unmanaged guest named nope" in str(
        err.value
    )
    assert cloud.snapshot() == before

    assert [g.uuid for g in import_guests(cloud.db, cloud.conf, "compute-1", guests=[b]).guests] == [b]
    assert [u.uuid for u in fake.list_unmanaged()] == [a]
