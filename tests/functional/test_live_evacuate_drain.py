"""Live migration, evacuation (and heal's clean-up after it), host drain, heal's due moves."""

from __future__ import annotations

from typing import Any

import pytest

from novakit import exceptions
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.fleet import hosts
from novakit.heal.manager import heal
from novakit.moves import migrations
from novakit.moves.drain import drain_host
from novakit.placement import api as placement
from novakit.virt.fake import failure_env_var
from tests.functional.cloud import Cloud, boot

SMALL = {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}
HOSTS = ("compute-1", "compute-2", "compute-3")


@pytest.fixture
def ctx() -> RequestContext:
    return RequestContext("p1", "u1")


def _held(cloud: Cloud, consumer: str) -> dict[str, dict[str, int]]:
    from sqlalchemy import text

    with cloud.db.engine.connect() as conn:
        names = dict(conn.execute(text("SELECT uuid, name FROM resource_providers")).all())
    return {names[rp]: r for rp, r in placement.get_allocations_for_consumer(cloud.db, consumer).items()}


def _migration(cloud: Cloud, server: str) -> dict[str, Any]:
    return migrations.list_migrations(cloud.db, cloud.admin, server=server)[0]


def test_live_migration_keeps_the_guest_running_and_moves_the_claim(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "web")
    source = server["host"]
    console = cloud.api.console_output(ctx, "web")
    cloud.api.act(cloud.admin, server["id"], "live_migrate")
    shown = cloud.api.get(cloud.admin, server["id"])
    dest = shown["host"]
    assert dest != source and (shown["status"], shown["power_state"]) == ("ACTIVE", 1)
    mig = _migration(cloud, server["id"])
    assert (mig["type"], mig["status"], mig["dest_compute"]) == ("live-migration", "completed", dest)
    assert _held(cloud, server["id"]) == {dest: SMALL} and _held(cloud, mig["id"]) == {}
    assert server["id"] not in cloud.fake(source).list_instances()
    # The same guest, never rebooted: its console goes on, with no second boot.
    after = cloud.api.console_output(ctx, "web")
    assert after.startswith(console.rstrip("\n")) and "no reboot" in after
    assert after.count("Linux version") == console.count("Linux version")
    events = [e["event"] for e in cloud.api.list_actions(cloud.admin, server["id"])[-1]["events"]]
    assert events == [
        "conductor_live_migrate_instance",
        "compute_pre_live_migration",
        "compute_live_migration",
        "compute_post_live_migration_at_destination",
    ]


def test_a_failed_live_migration_leaves_it_running_on_its_host(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "web")
    monkeypatch.setenv(failure_env_var(server["host"]), "fail_migrate_source")
    cloud.api.act(cloud.admin, server["id"], "live_migrate")
    shown = cloud.api.get(cloud.admin, server["id"])
    assert (shown["status"], shown["host"], shown["task_state"]) == ("ACTIVE", server["host"], None)
    assert _held(cloud, server["id"]) == {server["host"]: SMALL}
    assert _migration(cloud, server["id"])["status"] == "error"
    assert cloud.fake(server["host"]).list_instances() == {server["id"]: 1}
    assert cloud.api.list_actions(cloud.admin, server["id"])[-1]["message"] == "Error"


def test_live_migration_is_refused_to_its_own_host_for_members_and_when_stopped(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "web")
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError, match="options.host"):
        cloud.api.act(cloud.admin, server["id"], "live_migrate", {"host": server["host"]})
    with pytest.raises(exceptions.PolicyNotAuthorized):
        cloud.api.act(ctx, "web", "live_migrate")
    cloud.api.act(ctx, "web", "stop")
    with pytest.raises(exceptions.InstanceInvalidState):
        cloud.api.act(cloud.admin, server["id"], "live_migrate")
    after = cloud.snapshot()
    assert after["allocations"] == before["allocations"] and after["migrations"] == before["migrations"]


def test_evacuate_only_from_a_down_host_then_heal_removes_the_old_guest(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "web")
    source = server["host"]
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError, match="is up"):
        cloud.api.act(cloud.admin, server["id"], "evacuate")
    assert cloud.snapshot() == before

    hosts.set_forced_down(cloud.db, cloud.admin, source, True)
    cloud.api.act(cloud.admin, server["id"], "evacuate")
    shown = cloud.api.get(cloud.admin, server["id"])
    dest = shown["host"]
    assert dest != source and shown["status"] == "ACTIVE"
    assert shown["addresses"] == server["addresses"]  # its ports came along
    mig = _migration(cloud, server["id"])
    assert (mig["type"], mig["status"]) == ("evacuation", "done")
    # The down host still holds the old guest; the migration holds its claim there till heal.
    assert _held(cloud, mig["id"]) == {source: SMALL} and _held(cloud, server["id"]) == {dest: SMALL}
    assert server["id"] in cloud.fake(source).list_instances()

    hosts.set_forced_down(cloud.db, cloud.admin, source, False)
    report = heal(cloud.db, cloud.conf, ctx=cloud.admin)
    kinds = [(c.kind, c.instance, c.host, c.applied) for c in report.corrections]
    assert ("evacuated_guest", server["id"], source, True) in kinds
    assert server["id"] not in cloud.fake(source).list_instances()
    assert _held(cloud, mig["id"]) == {} and _migration(cloud, server["id"])["status"] == "completed"
    assert heal(cloud.db, cloud.conf, ctx=cloud.admin).corrections == []


def test_drain_empties_a_host_live_where_possible_and_cold_otherwise(
    cloud: Cloud, ctx: RequestContext
) -> None:
    hosts.set_disabled(cloud.db, cloud.admin, "compute-1", True, "keep out")
    hosts.set_disabled(cloud.db, cloud.admin, "compute-2", True, "keep out")
    web = boot(cloud, ctx, "web")
    db = boot(cloud, ctx, "db")
    assert web["host"] == db["host"] == "compute-3"
    cloud.api.act(ctx, "db", "stop")
    hosts.set_disabled(cloud.db, cloud.admin, "compute-1", False)
    hosts.set_disabled(cloud.db, cloud.admin, "compute-2", False)

    planned = drain_host(cloud.api, cloud.admin, "compute-3", dry_run=True)
    assert [(r["name"], r["result"], r["how"]) for r in planned["servers"]] == [
        ("db", "would move", "cold"),
        ("web", "would move", "live"),
    ]
    out = drain_host(cloud.api, cloud.admin, "compute-3")
    rows = {r["name"]: r for r in out["servers"]}
    assert (rows["web"]["result"], rows["web"]["how"]) == ("moved", "live")
    assert (rows["db"]["result"], rows["db"]["how"], rows["db"]["status"]) == ("moved", "cold", "SHUTOFF")
    assert cloud.api.list(cloud.admin, host="compute-3", all_projects=True) == []
    assert placement.get_usages(cloud.db, "compute-3")["VCPU"] == 0
    assert [
        (h["status"], h["disabled_reason"])
        for h in hosts.list_hosts(cloud.db, cloud.conf, ctx=cloud.admin)
        if h["host"] == "compute-3"
    ] == [("disabled", "draining for maintenance (novakit host drain)")]
    assert heal(cloud.db, cloud.conf, ctx=cloud.admin).corrections == []


def test_drain_reports_a_server_that_fits_nowhere(cloud: Cloud, ctx: RequestContext) -> None:
    from novakit.catalog import flavors

    flavors.create(cloud.db, cloud.admin, {"name": "big", "vcpus": 32, "memory_mb": 1024, "root_gb": 10})
    server = boot(cloud, ctx, "big", flavor="big")
    assert server["host"] == "compute-3"
    # An operator took the host out first: the drain keeps the reason given then.
    hosts.set_disabled(cloud.db, cloud.admin, "compute-3", True, "DIMM errors, ticket 4711")
    out = drain_host(cloud.api, cloud.admin, "compute-3")
    (row,) = out["servers"]
    assert row["result"] == "failed" and "live" in row["reason"] and "cold" in row["reason"]
    listed = hosts.list_hosts(cloud.db, cloud.conf, ctx=cloud.admin)
    (shown,) = [h for h in listed if h["host"] == "compute-3"]
    assert (shown["status"], shown["disabled_reason"]) == ("disabled", "DIMM errors, ticket 4711")
    assert cloud.api.get(cloud.admin, server["id"])["host"] == "compute-3"
    assert _held(cloud, server["id"]) == {"compute-3": {"VCPU": 32, "MEMORY_MB": 1024, "DISK_GB": 10}}


def test_heal_confirms_resizes_past_their_window_and_offloads_shelved_servers(
    cloud: Cloud, ctx: RequestContext
) -> None:
    import datetime as dt

    conf = load_config(
        db_url=cloud.db.url,
        state_dir=cloud.conf.state_dir,
        quota={"instances": -1, "cores": -1, "ram": -1},
        compute={"resize_confirm_window": 60, "shelved_offload_time": 60},
    )
    cloud.api.conf = conf
    cloud.api.conductor.conf = conf
    web = boot(cloud, ctx, "web")
    boot(cloud, ctx, "old")
    cloud.api.act(ctx, "web", "resize", {"flavor": "m1.large"})
    cloud.api.act(ctx, "old", "shelve")
    assert cloud.api.get(ctx, "old")["status"] == "SHELVED"
    assert heal(cloud.db, conf, ctx=cloud.admin).corrections == []  # not due yet

    later = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(seconds=120)
    report = heal(cloud.db, conf, ctx=cloud.admin, clock=lambda: later)
    assert sorted(c.kind for c in report.corrections) == ["resize_confirmed", "shelved_offloaded"]
    assert all(c.applied for c in report.corrections)
    assert cloud.api.get(ctx, "web")["status"] == "ACTIVE"
    assert _migration(cloud, web["id"])["status"] == "confirmed"
    assert cloud.api.get(ctx, "old")["status"] == "SHELVED_OFFLOADED"


class _Killed(BaseException):
    """The owner's process dies here (not an error it could handle)."""


def _kill_before(cloud: Cloud, monkeypatch: pytest.MonkeyPatch, operation: str) -> None:
    """The conductor's process dies just before it sends ``operation`` to a host."""
    rpc = cloud.api.conductor.rpc
    real_send = rpc.send

    def send(request: Any, *args: Any, **kwargs: Any) -> Any:
        if request.operation == operation:
            raise _Killed(operation)
        return real_send(request, *args, **kwargs)

    monkeypatch.setattr(rpc, "send", send)


def _later(cloud: Cloud) -> Any:
    import datetime as dt

    return lambda: (
        dt.datetime.now(dt.UTC).replace(tzinfo=None)
        + dt.timedelta(seconds=cloud.conf.compute.build_timeout + 60)
    )


@pytest.mark.parametrize("killed_before", ["finish_migration", "confirm_migration"])
def test_heal_rolls_back_a_resize_whose_owner_died(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch, killed_before: str
) -> None:
    server = boot(cloud, ctx, "web")
    source = server["host"]
    if killed_before == "confirm_migration":
        # The destination has finished: only the records are missing. Killed before the write.
        from novakit.db import api as db_api

        real_update = db_api.instance_update

        def update(session: Any, uuid: str, values: dict[str, Any], **kw: Any) -> Any:
            if values.get("vm_state") == "resized":
                raise _Killed("before the last write")
            return real_update(session, uuid, values, **kw)

        monkeypatch.setattr("novakit.conductor.flows.resize.db_api.instance_update", update)
    else:
        _kill_before(cloud, monkeypatch, killed_before)
    with pytest.raises(_Killed):
        cloud.api.act(ctx, "web", "resize", {"flavor": "m1.large"})
    monkeypatch.undo()
    stuck = cloud.api.get(cloud.admin, "web")
    assert stuck["status"] == "RESIZE"
    assert heal(cloud.db, cloud.conf, ctx=cloud.admin).corrections == []  # its lease still runs

    report = heal(cloud.db, cloud.conf, ctx=cloud.admin, clock=_later(cloud))
    assert [(c.kind, c.applied) for c in report.corrections] == [("task_recovered", True)]
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown["host"], shown["flavor"]["name"]) == ("ACTIVE", source, "m1.small")
    assert _held(cloud, server["id"]) == {source: SMALL}
    mig = _migration(cloud, server["id"])
    assert mig["status"] == "error" and _held(cloud, mig["id"]) == {}
    assert cloud.fake(source).list_instances() == {server["id"]: 1}
    for host in HOSTS:
        if host != source:
            assert server["id"] not in cloud.fake(host).list_instances()
            assert placement.get_usages(cloud.db, host)["VCPU"] == 0
    assert heal(cloud.db, cloud.conf, ctx=cloud.admin, clock=_later(cloud)).corrections == []
