"""Where a boot's writes land and what a process killed between them leaves behind."""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from novakit.cells import moves
from novakit.cells.registry import UNSCHEDULED
from novakit.compute import rounds
from novakit.conductor import builds
from novakit.context import RequestContext
from novakit.db.models import Instance, InstanceMapping, utcnow
from novakit.fleet import hosts
from novakit.heal.manager import heal
from novakit.placement import api as placement
from tests.functional.cloud import HOSTS, Cloud
from tests.functional.test_heal_cells import EDGE, Cell2


class Killed(BaseException):
    """The process stops here (nothing after it runs, no handler catches it)."""


def _kill(*_args: object, **_kwargs: object) -> None:
    raise Killed


def test_a_boot_killed_right_after_its_claim_leaves_its_server_placed_in_its_cell(
    cloud: Cloud, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cell is the API database (the embedded default): the server's mapping names the cell
    in the claim's own transaction, so a process killed the moment the claim committed (before
    any move or host call) leaves a server both placed on its host and mapped to its cell."""
    monkeypatch.setattr(builds, "move_to_cell", _kill)
    monkeypatch.setattr(rounds, "run", _kill)
    with pytest.raises(Killed):
        cloud.api.create(ctx, {"name": "cut", "flavor": "m1.small", "image": "tiny"})
    monkeypatch.undo()
    with cloud.db.reader() as session:
        cell_id = session.execute(
            select(InstanceMapping.cell_id).where(InstanceMapping.display_name == "cut")
        ).scalar_one()
    assert cell_id == cloud.db.cells.get("cell1").id
    server = cloud.api.get(cloud.admin, "cut")
    assert (server["status"], server["host"] in HOSTS) == ("BUILD", True)


# --- a server placed on a host of a cell of its own database ---------------------------------


@pytest.fixture
def cell2(cloud: Cloud, tmp_path: Path) -> Cell2:
    return Cell2(cloud, tmp_path)


def _boot_into_cell2(cloud: Cloud, ctx: RequestContext, name: str) -> None:
    """A boot whose only usable host is cell2's ``EDGE`` (the others disabled meanwhile)."""
    for h in HOSTS:
        hosts.set_disabled(cloud.db, cloud.admin, h, True)
    try:
        cloud.api.create(ctx, {"name": name, "flavor": "m1.small", "image": "tiny"})
    finally:
        for h in HOSTS:
            hosts.set_disabled(cloud.db, cloud.admin, h, False)


def _mapping(cloud: Cloud, name: str) -> tuple[str, int | None]:
    with cloud.db.reader() as session:
        uuid, cell_id = session.execute(
            select(InstanceMapping.instance_uuid, InstanceMapping.cell_id).where(
                InstanceMapping.display_name == name
            )
        ).one()
    return uuid, cell_id


def _waiting(cloud: Cloud, uuid: str) -> Instance | None:
    """The server's row where servers wait to be scheduled (the API database's instance tables)."""
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.reader() as session:
        return session.execute(select(Instance).where(Instance.uuid == uuid)).scalar_one_or_none()


def _after_lease(cloud: Cloud) -> dt.datetime:
    return utcnow() + dt.timedelta(seconds=cloud.conf.compute.build_timeout + 5)


def test_a_boot_into_a_cell_of_its_own_writes_the_server_there_once_and_nothing_waits_behind(
    cloud: Cloud, cell2: Cell2, ctx: RequestContext
) -> None:
    _boot_into_cell2(cloud, ctx, "edge")
    uuid, cell_id = _mapping(cloud, "edge")
    assert cell_id == cell2.id
    record = cell2.record(uuid)
    assert record is not None and (record.vm_state, record.host) == ("active", EDGE)
    assert cell2.actions(uuid) == ["create"]
    assert _waiting(cloud, uuid) is None
    [create] = cloud.api.list_actions(ctx, uuid)
    assert (create["action"], create["finish_time"] is not None) == ("create", True)
    assert [(e["event"], e["result"]) for e in create["events"]] == [
        ("compute__do_build_and_run_instance", "Success")
    ]
    assert heal(cloud.db, cloud.conf, clock=lambda: _after_lease(cloud)).corrections == []


def test_a_boot_killed_after_its_cell_write_and_before_its_claim_committed_leaves_a_copy_heal_removes(
    cloud: Cloud, cell2: Cell2, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cell's transaction committed, the claims' did not: the server still waits, unclaimed,
    in the API database; cell2 holds a copy its mapping does not name, left alone while the
    build's lease runs and removed after it, when the build times out."""
    write = moves.write_records

    def write_then_die(*args: Any) -> None:
        write(*args)
        raise Killed

    monkeypatch.setattr(moves, "write_records", write_then_die)
    with pytest.raises(Killed):
        _boot_into_cell2(cloud, ctx, "cut")
    monkeypatch.undo()
    uuid, cell_id = _mapping(cloud, "cut")
    waiting = _waiting(cloud, uuid)
    assert cell_id is None and waiting is not None
    assert (waiting.vm_state, waiting.task_state, waiting.host) == ("building", "scheduling", None)
    assert placement.get_allocations_for_consumer(cloud.db, uuid) == {}
    assert cell2.record(uuid) is not None
    assert heal(cloud.db, cloud.conf).corrections == []  # the build's lease still runs
    report = heal(cloud.db, cloud.conf, clock=lambda: _after_lease(cloud))
    assert sorted((c.kind, c.applied) for c in report.corrections) == [
        ("build_timeout", True),
        ("stray_copy", True),
    ]
    assert cell2.record(uuid) is None
    assert cloud.api.get(ctx, uuid)["status"] == "ERROR"
    assert placement.get_allocations_for_consumer(cloud.db, uuid) == {}


def test_a_boot_killed_before_its_cell_write_leaves_its_server_waiting_and_unclaimed(
    cloud: Cloud, cell2: Cell2, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(moves, "write_records", _kill)
    with pytest.raises(Killed):
        _boot_into_cell2(cloud, ctx, "early")
    monkeypatch.undo()
    uuid, cell_id = _mapping(cloud, "early")
    waiting = _waiting(cloud, uuid)
    assert cell_id is None and waiting is not None and waiting.host is None
    assert cloud.api.get(ctx, uuid)["status"] == "BUILD"
    assert placement.get_allocations_for_consumer(cloud.db, uuid) == {}
    assert cell2.record(uuid) is None


def test_a_boot_killed_right_after_its_claim_has_its_server_in_its_cell_with_its_host(
    cloud: Cloud, cell2: Cell2, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rounds, "run", _kill)
    with pytest.raises(Killed):
        _boot_into_cell2(cloud, ctx, "placed")
    monkeypatch.undo()
    uuid, cell_id = _mapping(cloud, "placed")
    assert cell_id == cell2.id and _waiting(cloud, uuid) is None
    shown = cloud.api.get(cloud.admin, uuid)
    assert (shown["status"], shown["host"]) == ("BUILD", EDGE)
    assert cell2.actions(uuid) == ["create"]
    assert placement.get_allocations_for_consumer(cloud.db, uuid) != {}
    # Its owner is gone: once the lease ran out heal ends the build in cell2, where the server is.
    report = heal(cloud.db, cloud.conf, clock=lambda: _after_lease(cloud))
    assert [(c.kind, c.instance, c.applied) for c in report.corrections] == [("build_timeout", uuid, True)]
    assert cloud.api.get(ctx, uuid)["status"] == "ERROR"
    assert _waiting(cloud, uuid) is None


def test_a_claims_transaction_retried_after_its_cell_write_leaves_one_server_in_the_cell(
    cloud: Cloud, cell2: Cell2, ctx: RequestContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transient conflict after the cell's write rolls the claims back and runs them again: the
    first attempt's rows in the cell are removed before the second writes them."""
    write = moves.write_records
    calls = []

    def write_then_conflict_once(*args: Any) -> None:
        write(*args)
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("COMMIT", {}, sqlite3.OperationalError("database is locked"))

    monkeypatch.setattr(moves, "write_records", write_then_conflict_once)
    _boot_into_cell2(cloud, ctx, "again")
    monkeypatch.undo()
    assert len(calls) == 2
    uuid, cell_id = _mapping(cloud, "again")
    assert cell_id == cell2.id and _waiting(cloud, uuid) is None
    assert cloud.api.get(ctx, uuid)["status"] == "ACTIVE"
    assert cell2.actions(uuid) == ["create"]
    assert heal(cloud.db, cloud.conf, clock=lambda: _after_lease(cloud)).corrections == []
