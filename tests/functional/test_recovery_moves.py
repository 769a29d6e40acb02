"""Heal after moves killed half way: the records tell the truth (issue 25).

Each test kills the conductor's process at a chosen point of a move (a ``BaseException`` raised
around a host call, which nothing in the library handles, as ``kill -9`` would leave it), then
runs heal with a clock past every lease and checks what a user sees: the server's status, host
and claim, the guests on the hosts, and that the next action works.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select, text

from novakit.context import RequestContext
from novakit.db.models import InstanceMapping, utcnow
from novakit.heal.manager import HealReport, heal
from novakit.moves import migrations
from novakit.placement import api as placement
from tests.functional.cloud import HOSTS, Cloud, boot


class _Killed(BaseException):
    """The owner's process dies here (nothing it could handle)."""


def _later(cloud: Cloud) -> Callable[[], dt.datetime]:
    at = utcnow() + dt.timedelta(
        seconds=cloud.conf.compute.build_timeout + cloud.conf.compute.shutdown_timeout + 60
    )
    return lambda: at


def _kill_at(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch, operation: str, *, after: bool, action: str | None = None
) -> None:
    """The conductor's process dies just before it sends ``operation`` to a host, or just after
    the host did it (its answer lost)."""
    rpc = cloud.api.conductor.rpc
    real_send = rpc.send

    def send(request: Any, *args: Any, **kwargs: Any) -> Any:
        due = request.operation == operation and (action is None or request.action == action)
        if due and not after:
            raise _Killed(operation)
        result = real_send(request, *args, **kwargs)
        if due:
            raise _Killed(operation)
        return result

    monkeypatch.setattr(rpc, "send", send)


def _held(cloud: Cloud, consumer: str) -> dict[str, dict[str, int]]:
    with cloud.db.engine.connect() as conn:
        names = dict(conn.execute(text("SELECT uuid, name FROM resource_providers")).all())
    return {names[rp]: r for rp, r in placement.get_allocations_for_consumer(cloud.db, consumer).items()}


def _guests(cloud: Cloud, uuid: str) -> dict[str, int]:
    """Where a guest of ``uuid`` is, host -> power state."""
    return {h: g[uuid] for h in HOSTS if uuid in (g := cloud.fake(h).list_instances())}


def _shelved_images(cloud: Cloud) -> list[dict[str, Any]]:
    from novakit.catalog import images

    return [
        i for i in images.list_images(cloud.db) if (i.get("properties") or {}).get("image_type") == "shelved"
    ]


def _kinds(report: HealReport) -> list[tuple[str, bool]]:
    return [(c.kind, c.applied) for c in report.corrections]


SMALL = {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 10}


# --- item 1: an unshelve killed after the host spawned the guest -----------------------------------


def test_an_unshelve_killed_after_the_host_spawned_is_finished_by_heal(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "web")
    cloud.api.act(ctx, "web", "shelve")
    _kill_at(cloud, monkeypatch, "build", after=True, action="unshelve")
    with pytest.raises(_Killed):
        cloud.api.act(ctx, "web", "unshelve")
    monkeypatch.undo()
    [(host, power)] = _guests(cloud, server["id"]).items()
    assert power == 1
    assert heal(cloud.db, cloud.conf, ctx=cloud.admin).corrections == []  # its lease still runs

    report = heal(cloud.db, cloud.conf, ctx=cloud.admin, clock=_later(cloud))

    assert _kinds(report) == [("task_recovered", True)]
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown["host"], shown["task_state"]) == ("ACTIVE", host, None)
    assert _held(cloud, server["id"]) == {host: SMALL}
    assert _guests(cloud, server["id"]) == {host: 1}
    assert _shelved_images(cloud) == []  # as an unshelve that ended: the shelved image went
    unshelve = [a for a in cloud.api.list_actions(ctx, "web") if a["action"] == "unshelve"][-1]
    assert unshelve["finish_time"] is not None
    assert ("conductor_heal_interrupted_task", "Success") in [
        (e["event"], e["result"]) for e in unshelve["events"]
    ]
    assert heal(cloud.db, cloud.conf, ctx=cloud.admin, clock=_later(cloud)).corrections == []
    # It is an ordinary server again.
    cloud.api.act(ctx, "web", "stop")
    assert cloud.api.get(ctx, "web")["status"] == "SHUTOFF"


def test_an_unshelve_killed_before_the_host_spawned_is_offloaded_again(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "web")
    cloud.api.act(ctx, "web", "shelve")
    _kill_at(cloud, monkeypatch, "build", after=False, action="unshelve")
    with pytest.raises(_Killed):
        cloud.api.act(ctx, "web", "unshelve")
    monkeypatch.undo()
    assert _guests(cloud, server["id"]) == {}

    report = heal(cloud.db, cloud.conf, ctx=cloud.admin, clock=_later(cloud))

    assert _kinds(report) == [("task_recovered", True)]
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown.get("host"), shown["task_state"]) == ("SHELVED_OFFLOADED", None, None)
    assert _held(cloud, server["id"]) == {}
    assert len(_shelved_images(cloud)) == 1
    assert heal(cloud.db, cloud.conf, ctx=cloud.admin, clock=_later(cloud)).corrections == []
    cloud.api.act(ctx, "web", "unshelve")
    shown = cloud.api.get(cloud.admin, "web")
    assert shown["status"] == "ACTIVE" and _guests(cloud, server["id"]) == {shown["host"]: 1}


def test_an_unshelve_killed_before_a_host_was_chosen_is_offloaded_again(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "web")
    cloud.api.act(ctx, "web", "shelve")

    def killed(*args: Any, **kwargs: Any) -> None:
        raise _Killed("while scheduling")

    monkeypatch.setattr(cloud.api.conductor.scheduler, "select_destinations", killed)
    with pytest.raises(_Killed):
        cloud.api.act(ctx, "web", "unshelve")
    monkeypatch.undo()
    assert cloud.api.get(cloud.admin, "web")["task_state"] == "unshelving"

    report = heal(cloud.db, cloud.conf, ctx=cloud.admin, clock=_later(cloud))

    assert _kinds(report) == [("task_recovered", True)]
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown.get("host"), shown["task_state"]) == ("SHELVED_OFFLOADED", None, None)
    assert _held(cloud, server["id"]) == {}
    cloud.api.act(ctx, "web", "unshelve")
    assert cloud.api.get(ctx, "web")["status"] == "ACTIVE"


# --- item 2: a resize, then a delete, each killed half way ---------------------------------------


def test_the_claim_of_a_move_whose_server_was_deleted_is_freed_by_heal(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "web")
    source = server["host"]
    _kill_at(cloud, monkeypatch, "migrate_disk_and_power_off", after=False)
    with pytest.raises(_Killed):
        cloud.api.act(ctx, "web", "resize", {"flavor": "m1.large"})
    monkeypatch.undo()
    [mig] = migrations.list_migrations(cloud.db, cloud.admin, server=server["id"])
    assert _held(cloud, mig["id"]) == {source: SMALL}
    # The delete dies after the server's record went, before its claims and moves were released.
    cloud.api.conductor.clock = _later(cloud)

    def killed(*args: Any, **kwargs: Any) -> None:
        raise _Killed("after the record went")

    monkeypatch.setattr(placement, "remove_allocations", killed)
    with pytest.raises(_Killed):
        cloud.api.act(ctx, "web", "delete")
    monkeypatch.undo()
    assert [s["name"] for s in cloud.api.list_servers(ctx)] == []
    assert _held(cloud, mig["id"]) == {source: SMALL}

    report = heal(cloud.db, cloud.conf, ctx=cloud.admin, clock=_later(cloud))

    assert ("orphan_allocation", True) in _kinds(report)
    assert _held(cloud, mig["id"]) == {} and _held(cloud, server["id"]) == {}
    [mig] = migrations.list_migrations(cloud.db, cloud.admin, server=server["id"])
    assert mig["status"] == "error"
    for host in HOSTS:
        assert placement.get_usages(cloud.db, host)["VCPU"] == 0
    assert _guests(cloud, server["id"]) == {}
    assert heal(cloud.db, cloud.conf, ctx=cloud.admin, clock=_later(cloud)).corrections == []


# --- a confirm killed half way (it has no task state: its migration is ``confirming``) ---------


def test_a_confirm_killed_half_way_is_finished_by_heal(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "web")
    source = server["host"]
    cloud.api.act(ctx, "web", "resize", {"flavor": "m1.large"})
    dest = cloud.api.get(cloud.admin, "web")["host"]
    _kill_at(cloud, monkeypatch, "confirm_migration", after=False)
    with pytest.raises(_Killed):
        cloud.api.act(ctx, "web", "confirm_resize")
    monkeypatch.undo()
    [mig] = migrations.list_migrations(cloud.db, cloud.admin, server=server["id"])
    assert mig["status"] == "confirming"
    assert heal(cloud.db, cloud.conf, ctx=cloud.admin).corrections == []  # it may still be running

    report = heal(cloud.db, cloud.conf, ctx=cloud.admin, clock=_later(cloud))

    assert _kinds(report) == [("task_recovered", True)]
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown["host"], shown["flavor"]["name"]) == ("ACTIVE", dest, "m1.large")
    [confirm] = [a for a in cloud.api.list_actions(ctx, "web") if a["action"] == "confirmResize"]
    assert confirm["finish_time"] is not None
    [mig] = migrations.list_migrations(cloud.db, cloud.admin, server=server["id"])
    assert mig["status"] == "confirmed" and _held(cloud, mig["id"]) == {}
    assert _guests(cloud, server["id"]) == {dest: 1} and source != dest
    assert heal(cloud.db, cloud.conf, ctx=cloud.admin, clock=_later(cloud)).corrections == []
    cloud.api.act(ctx, "web", "stop")
    assert cloud.api.get(ctx, "web")["status"] == "SHUTOFF"


# --- item 4: a shelve killed after the host offloaded the guest ----------------------------------


def test_a_shelve_killed_after_the_host_offloaded_ends_offloaded(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = boot(cloud, ctx, "web")
    _kill_at(cloud, monkeypatch, "shelve_offload", after=True)
    with pytest.raises(_Killed):
        cloud.api.act(ctx, "web", "shelve")
    monkeypatch.undo()
    assert _guests(cloud, server["id"]) == {}

    report = heal(cloud.db, cloud.conf, ctx=cloud.admin, clock=_later(cloud))

    assert _kinds(report) == [("task_recovered", True)]
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown.get("host"), shown["task_state"]) == ("SHELVED_OFFLOADED", None, None)
    assert _held(cloud, server["id"]) == {}
    shelve = [a for a in cloud.api.list_actions(ctx, "web") if a["action"] == "shelve"][-1]
    assert shelve["finish_time"] is not None
    # A second heal finds nothing to call vanished.
    assert heal(cloud.db, cloud.conf, ctx=cloud.admin, clock=_later(cloud)).corrections == []
    cloud.api.act(ctx, "web", "unshelve")
    shown = cloud.api.get(cloud.admin, "web")
    assert shown["status"] == "ACTIVE" and _guests(cloud, server["id"]) == {shown["host"]: 1}


def test_a_shelved_server_whose_guest_went_is_offloaded_not_in_error(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same end by another road: a shelve that kept its guest (no offload yet), whose guest
    # then went from its host. Its shelved image is all it needs: it is offloaded, not broken.
    from novakit.config import load_config

    cloud.api.conf = load_config(
        db_url=cloud.db.url,
        state_dir=cloud.conf.state_dir,
        quota={"instances": -1, "cores": -1, "ram": -1},
        compute={"shelved_offload_time": -1},
    )
    cloud.api.conductor.conf = cloud.api.conf
    server = boot(cloud, ctx, "web")
    cloud.api.act(ctx, "web", "shelve")
    assert cloud.api.get(cloud.admin, "web")["status"] == "SHELVED"
    cloud.fake(server["host"]).vanish(server["id"])

    report = heal(cloud.db, cloud.api.conf, ctx=cloud.admin)

    assert _kinds(report) == [("shelved_offloaded", True)]
    shown = cloud.api.get(cloud.admin, "web")
    assert (shown["status"], shown.get("host")) == ("SHELVED_OFFLOADED", None)
    assert _held(cloud, server["id"]) == {}
    cloud.api.act(ctx, "web", "unshelve")
    assert cloud.api.get(ctx, "web")["status"] == "ACTIVE"


# --- item 5: two heals at once -------------------------------------------------------------------


def test_two_heals_racing_for_an_orphan_attachment_both_finish(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    if cloud.db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite runs one writer at a time: the two heals cannot be inside their writes at once")
    from novakit.compute import volume_attach
    from novakit.volume import attachments, volumes

    server = boot(cloud, ctx, "web")
    svc = cloud.api.conductor
    vol = volumes.create(svc, ctx, "v", 1, host=server["host"])
    volume_attach.attach(cloud.api, ctx, server["id"], vol["id"])
    # The server's record went and nothing released its volume (a delete killed in between).
    with cloud.db.writer() as session:
        session.execute(
            text("UPDATE instances SET deleted = id, deleted_at = :now WHERE uuid = :u"),
            {"u": server["id"], "now": utcnow()},
        )
    # Both heals have read the attachment before either writes.
    both_read = threading.Barrier(2, timeout=30)
    real = attachments._soft_delete_attachments

    def soft_delete(session: Any, volume_id: int) -> None:
        if threading.current_thread().name.startswith("heal-"):
            both_read.wait()
        real(session, volume_id)

    monkeypatch.setattr(attachments, "_soft_delete_attachments", soft_delete)
    reports: dict[str, HealReport] = {}
    errors: dict[str, BaseException] = {}

    def run(name: str) -> None:
        try:
            reports[name] = heal(cloud.db, cloud.conf, ctx=cloud.admin.with_request_id(f"req-{name}"))
        except BaseException as exc:  # noqa: BLE001 - what the loser raised is the finding
            errors[name] = exc

    threads = [threading.Thread(target=run, args=(n,), name=f"heal-{n}") for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert errors == {}
    found = [c for r in reports.values() for c in r.corrections if c.kind == "orphan_attachment"]
    assert len(found) == 2 and sum(c.applied for c in found) == 1
    loser = next(c for c in found if not c.applied)
    assert loser.error and "meanwhile" in loser.error
    # The loser went on with the rest of its run: each report has the orphan guest of the server.
    assert all(any(c.kind == "orphan_guest" for c in r.corrections) for r in reports.values())
    shown = volumes.show(svc, ctx, vol["id"])
    assert shown["status"] == "available" and not shown.get("attachments")


# --- item 8, first half: a build heal timed out before it was scheduled --------------------------


def test_a_build_timed_out_before_scheduling_is_buried_in_cell0(cloud: Cloud, ctx: RequestContext) -> None:
    [waiting] = cloud.api.create(ctx, {"name": "waiting", "flavor": "m1.small", "image": "tiny"}, build=False)

    report = heal(cloud.db, cloud.conf, clock=_later(cloud))

    assert _kinds(report) == [("build_timeout", True)]
    with cloud.db.reader() as session:
        cell_id = session.execute(
            select(InstanceMapping.cell_id).where(InstanceMapping.instance_uuid == waiting["id"])
        ).scalar_one()
    assert cell_id is not None and cloud.db.cells.by_id(cell_id).is_cell0
    shown = cloud.api.get(ctx, "waiting")
    assert shown["status"] == "ERROR" and "timed out" in shown["fault"]["message"]
    assert [s["name"] for s in cloud.api.list_servers(ctx)] == ["waiting"]
    assert heal(cloud.db, cloud.conf, clock=_later(cloud)).corrections == []
    assert cloud.api.delete(ctx, "waiting")["status"] == "DELETED"
    assert cloud.api.list_servers(ctx) == []
