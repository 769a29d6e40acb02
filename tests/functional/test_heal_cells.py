"""Heal and the brownfield import with two cells: each server is corrected (or imported) in its
own cell's database, and a cell whose database does not answer is reported and left alone."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import uuid as uuidlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import insert, select, update
from typer.testing import CliRunner

from novakit.cells.registry import UNSCHEDULED
from novakit.cli.main import app
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import CellMapping, Instance, InstanceAction, InstanceMapping, utcnow
from novakit.fleet import hosts
from novakit.fleet.importer import import_guests
from novakit.heal.manager import heal
from novakit.placement import api as placement
from novakit.virt.driver import load_driver
from tests.functional.cloud import HOSTS, Cloud

EDGE = "edge-1"  # the one host of cell2


class Cell2:
    """cell2: its own SQLite database, mapped in the API database, with host ``EDGE`` in it."""

    def __init__(self, cloud: Cloud, tmp_path: Path) -> None:
        self.cloud = cloud
        self.path = tmp_path / "cell2" / "cell2.db"
        self.path.parent.mkdir()
        self.url = f"sqlite:///{self.path}"
        made = Database(self.url, kind="cell", auto_upgrade=False)
        made.upgrade()
        made.dispose()
        with cloud.db.writer() as session:
            session.add(
                CellMapping(uuid=str(uuidlib.uuid4()), name="cell2", database_url=self.url, disabled=False)
            )
        info = cloud.driver_info(EDGE)
        driver = load_driver("fake", EDGE, info["options"])
        driver.init_host()
        hosts.register_host(cloud.db, cloud.conf, EDGE, driver.get_available_resource(), info, cell="cell2")
        self.id = cloud.db.cells.get("cell2").id

    def record(self, uuid: str) -> Instance | None:
        """The server's row in cell2's own database, read without the API database."""
        own = Database(self.url, kind="cell", auto_upgrade=False)
        try:
            with own.reader() as session:
                return session.execute(select(Instance).where(Instance.uuid == uuid)).scalar_one_or_none()
        finally:
            own.dispose()

    def actions(self, uuid: str) -> list[str]:
        own = Database(self.url, kind="cell", auto_upgrade=False)
        try:
            with own.reader() as session:
                return list(
                    session.execute(
                        select(InstanceAction.action).where(InstanceAction.instance_uuid == uuid)
                    ).scalars()
                )
        finally:
            own.dispose()

    def go_down(self) -> None:
        """Its database stops answering: the file is gone, a directory stands at its path (what
        SQLite says of a database server that is not there: "unable to open database file")."""
        self.cloud.db.cells.dispose()  # as a new process would: no connection left open to it
        for suffix in ("", "-wal", "-shm"):
            moved = Path(f"{self.path}{suffix}")
            if moved.exists():
                shutil.move(moved, f"{moved}.away")
        self.path.mkdir()

    def come_back(self) -> None:
        self.path.rmdir()
        for suffix in ("", "-wal", "-shm"):
            away = Path(f"{self.path}{suffix}.away")
            if away.exists():
                shutil.move(away, f"{self.path}{suffix}")
        self.cloud.db.cells.dispose()


@pytest.fixture
def cell2(cloud: Cloud, tmp_path: Path) -> Cell2:
    return Cell2(cloud, tmp_path)


def boot_on(cloud: Cloud, ctx: RequestContext, name: str, host: str) -> dict[str, Any]:
    """Boot a server on ``host``: the other hosts are disabled meanwhile."""
    others = [h for h in (*HOSTS, EDGE) if h != host]
    for h in others:
        hosts.set_disabled(cloud.db, cloud.admin, h, True)
    try:
        [server] = cloud.api.create(ctx, {"name": name, "flavor": "m1.small", "image": "tiny"})
    finally:
        for h in others:
            hosts.set_disabled(cloud.db, cloud.admin, h, False)
    shown = cloud.api.get(cloud.admin, server["id"])
    assert (shown["status"], shown["host"]) == ("ACTIVE", host), shown
    return shown


def _kinds(report: Any) -> list[tuple[str, str]]:
    return sorted((c.kind, c.instance) for c in report.corrections)


def _in_api_database(cloud: Cloud, uuids: list[str]) -> list[str]:
    """The uuids whose rows the API database's own instance tables hold (cell1's, here)."""
    with cloud.db.target_cell(cloud.db.cells.get("cell1")), cloud.db.reader() as session:
        return list(session.execute(select(Instance.uuid).where(Instance.uuid.in_(uuids))).scalars())


def test_heal_corrects_the_servers_of_every_cell_each_in_its_own_database(
    cloud: Cloud, cell2: Cell2, ctx: RequestContext
) -> None:
    gone1 = boot_on(cloud, ctx, "gone-1", "compute-1")["id"]
    off1 = boot_on(cloud, ctx, "off-1", "compute-1")["id"]
    gone2 = boot_on(cloud, ctx, "gone-2", EDGE)["id"]
    off2 = boot_on(cloud, ctx, "off-2", EDGE)["id"]
    half2 = boot_on(cloud, ctx, "half-deleted-2", EDGE)["id"]
    assert cell2.record(gone2) is not None and _in_api_database(cloud, [gone2, off2, half2]) == []
    cloud.fake("compute-1").vanish(gone1)
    cloud.fake(EDGE).vanish(gone2)
    cloud.fake("compute-1").power_off(SimpleNamespace(uuid=off1))
    cloud.fake(EDGE).power_off(SimpleNamespace(uuid=off2))
    # A delete in cell2 that died after the record was marked deleted: its guest and claim stay.
    own = Database(cell2.url, kind="cell", auto_upgrade=False)
    with own.writer() as session:
        session.execute(
            update(Instance)
            .where(Instance.uuid == half2)
            .values(deleted=Instance.id, vm_state="deleted", deleted_at=utcnow())
        )
    own.dispose()

    report = heal(cloud.db, cloud.conf)
    assert report.down_cells == {} and report.hosts == sorted([*HOSTS, EDGE])
    assert _kinds(report) == sorted(
        [
            ("vanished", gone1),
            ("vanished", gone2),
            ("stopped", off1),
            ("stopped", off2),
            ("orphan_guest", half2),
            ("orphan_allocation", half2),
        ]
    )
    assert all(c.applied for c in report.corrections if c.kind != "orphan_guest")
    for uuid, status in ((gone1, "ERROR"), (gone2, "ERROR"), (off1, "SHUTOFF"), (off2, "SHUTOFF")):
        assert cloud.api.get(ctx, uuid)["status"] == status
    # cell2's corrections are in cell2's database, with their audit trail; none leaked into cell1's.
    gone, off = cell2.record(gone2), cell2.record(off2)
    assert gone is not None and (gone.vm_state, gone.power_state) == ("error", 0)
    assert off is not None and off.vm_state == "stopped"
    assert "heal" in cell2.actions(gone2) and "stop" in cell2.actions(off2)
    assert _in_api_database(cloud, [gone2, off2, half2]) == []
    assert placement.get_allocations_for_consumer(cloud.db, half2) == {}
    assert placement.get_allocations_for_consumer(cloud.db, off2) != {}

    # Nothing left but the orphan guest, reported until asked to destroy it.
    assert _kinds(heal(cloud.db, cloud.conf)) == [("orphan_guest", half2)]
    destroyed = heal(cloud.db, cloud.conf, destroy_orphans=True)
    assert [(c.kind, c.host, c.applied) for c in destroyed.corrections] == [("orphan_guest", EDGE, True)]
    assert half2 not in cloud.fake(EDGE).list_instances()
    assert off2 in cloud.fake(EDGE).list_instances()


def test_a_cell_whose_database_does_not_answer_is_reported_and_nothing_of_it_is_changed(
    cloud: Cloud, cell2: Cell2, ctx: RequestContext, db_url: str, tmp_path: Path
) -> None:
    off1 = boot_on(cloud, ctx, "off-1", "compute-2")["id"]
    gone2 = boot_on(cloud, ctx, "gone-2", EDGE)["id"]
    kept2 = boot_on(cloud, ctx, "kept-2", EDGE)["id"]
    cloud.fake("compute-2").power_off(SimpleNamespace(uuid=off1))
    cloud.fake(EDGE).vanish(gone2)
    cell2.go_down()

    # Even asked to destroy orphans: cell2's servers' guests and claims are not orphans.
    report = heal(cloud.db, cloud.conf, destroy_orphans=True)
    assert list(report.down_cells) == ["cell2"]
    assert "unable to open database file" in report.down_cells["cell2"]
    assert _kinds(report) == [("stopped", off1)] and report.corrections[0].applied
    assert report.hosts == sorted(HOSTS) and report.unreachable == {}
    assert kept2 in cloud.fake(EDGE).list_instances()
    assert all(placement.get_allocations_for_consumer(cloud.db, u) != {} for u in (gone2, kept2))
    assert cloud.api.get(ctx, off1)["status"] == "SHUTOFF"

    # As an operator sees it: the command names the cell, and its JSON report carries it.
    runner = CliRunner()
    env = {
        "NOVAKIT_DB_URL": db_url,
        "NOVAKIT_STATE_DIR": str(tmp_path / "state"),
        "NOVAKIT_CONFIG": None,
        "NOVAKIT_REQUEST_ID": None,
        "COLUMNS": "250",
    }
    shown = runner.invoke(app, ["heal"], env=env)
    assert shown.exit_code == 0, (shown.stdout, shown.stderr)
    assert "cell cell2 did not answer (its servers and hosts were left as they are)" in shown.stderr
    dumped = runner.invoke(app, ["heal", "-o", "json"], env=env)
    assert dumped.exit_code == 0, (dumped.stdout, dumped.stderr)
    assert list(json.loads(dumped.stdout)["down_cells"]) == ["cell2"]

    cell2.come_back()
    gone = cell2.record(gone2)
    assert gone is not None and gone.vm_state == "active"  # untouched while it was down
    report = heal(cloud.db, cloud.conf)
    assert report.down_cells == {} and _kinds(report) == [("vanished", gone2)]
    assert cloud.api.get(ctx, gone2)["status"] == "ERROR"
    assert cloud.api.get(ctx, kept2)["status"] == "ACTIVE"


def test_an_unmanaged_guest_is_imported_into_the_cell_of_its_host(cloud: Cloud, cell2: Cell2) -> None:
    on_edge = cloud.fake(EDGE).define_foreign("legacy-edge", vcpus=1, memory_mb=1024, root_gb=10)
    on_one = cloud.fake("compute-1").define_foreign("legacy-one", vcpus=1, memory_mb=1024, root_gb=10)

    for host, uuid in ((EDGE, on_edge), ("compute-1", on_one)):
        [guest] = import_guests(cloud.db, cloud.conf, host).guests
        assert (guest.uuid, guest.outcome, guest.vm_state) == (uuid, "imported", "active")
    with cloud.db.reader() as session:
        cells = dict(
            session.execute(
                select(InstanceMapping.instance_uuid, InstanceMapping.cell_id).where(
                    InstanceMapping.instance_uuid.in_([on_edge, on_one])
                )
            ).all()
        )
    assert cells == {on_edge: cell2.id, on_one: cloud.db.cells.get("cell1").id}
    record = cell2.record(on_edge)
    assert record is not None and (record.vm_state, record.host) == ("active", EDGE)
    assert cell2.actions(on_edge) == ["import"]
    assert _in_api_database(cloud, [on_edge, on_one]) == [on_one]

    admin = cloud.admin
    assert cloud.api.get(admin, on_edge)["status"] == "ACTIVE"
    assert cloud.api.stop(admin, on_edge)["status"] == "SHUTOFF"
    # Adopted: the host lists it as novakit's now, and heal finds nothing to correct in either cell.
    assert [g.outcome for g in import_guests(cloud.db, cloud.conf, EDGE).guests] == []
    assert heal(cloud.db, cloud.conf).corrections == []

    # A guest whose host's cell does not answer is refused, and nothing of it stays behind.
    late = cloud.fake(EDGE).define_foreign("legacy-late", vcpus=1, memory_mb=1024, root_gb=10)
    cell2.go_down()
    [guest] = import_guests(cloud.db, cloud.conf, EDGE).guests
    assert (guest.uuid, guest.outcome) == (late, "refused")
    assert "Cell cell2 is unreachable" in guest.reason
    assert placement.get_allocations_for_consumer(cloud.db, late) == {}
    with cloud.db.reader() as session:
        assert (
            session.execute(select(InstanceMapping.id).where(InstanceMapping.instance_uuid == late)).first()
            is None
        )
    assert _in_api_database(cloud, [late]) == []
    cell2.come_back()
    assert [g.outcome for g in import_guests(cloud.db, cloud.conf, EDGE).guests] == ["imported"]
    assert cell2.record(late) is not None


def test_a_copy_left_by_a_move_cut_off_half_way_is_removed_once_the_move_is_over(
    cloud: Cloud, cell2: Cell2, ctx: RequestContext
) -> None:
    [uuid] = [
        s["id"]
        for s in cloud.api.create(
            ctx, {"name": "waiting", "flavor": "m1.small", "image": "tiny"}, build=False
        )
    ]
    # The move into cell2 copied the records and died before pointing the mapping at them.
    with cloud.db.target_cell(UNSCHEDULED), cloud.db.reader() as session:
        inst = session.execute(select(Instance).where(Instance.uuid == uuid)).scalar_one()
        row = {c.key: getattr(inst, c.key) for c in inst.__mapper__.column_attrs if c.key != "id"}
    own = Database(cell2.url, kind="cell", auto_upgrade=False)
    with own.writer() as session:
        session.execute(insert(Instance), [row])
    own.dispose()
    # While the move may still be running, its copy is left alone (and the build to its owner).
    assert heal(cloud.db, cloud.conf).corrections == []
    assert cell2.record(uuid) is not None

    later = utcnow() + dt.timedelta(seconds=cloud.conf.compute.build_timeout + 5)
    dry = heal(cloud.db, cloud.conf, clock=lambda: later, dry_run=True)
    assert ("stray_copy", uuid) in _kinds(dry) and cell2.record(uuid) is not None
    report = heal(cloud.db, cloud.conf, clock=lambda: later)
    # The server is the one its mapping names, not yet scheduled: its build's owner is gone.
    assert _kinds(report) == [("build_timeout", uuid), ("stray_copy", uuid)]
    copy = next(c for c in report.corrections if c.kind == "stray_copy")
    assert copy.applied and "cell2" in copy.detail
    assert cell2.record(uuid) is None
    assert cloud.api.get(ctx, uuid)["status"] == "ERROR"
    assert heal(cloud.db, cloud.conf, clock=lambda: later).corrections == []
