"""The mappings a process keeps (``novakit.cells.registry``): read once, then kept; what this
process writes seen at once, what another process writes seen at once when it is new and
within ``MAPPINGS_SECONDS`` when it changes something kept."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import delete, event, text

from novakit.cells import manage, registry
from novakit.context import RequestContext
from novakit.db.engine import Database, write_gate
from novakit.db.models import ComputeNode, InstanceFault
from tests.functional.cloud import Cloud
from tests.functional.test_cells import cell2_url, cells  # noqa: F401 (fixtures)


@contextmanager
def api_statements(db: Database) -> Iterator[list[str]]:
    """The statements run on the API database inside."""
    seen: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", record)


def by_another_process(db: Database, sql: str) -> None:
    """``sql`` run on the API database past this process's engines (as another process would)."""
    conn = db.engine.raw_connection()
    try:
        cursor = conn.cursor()
        cursor.execute(sql)
        cursor.close()
        conn.commit()
    finally:
        conn.close()


def test_a_placed_servers_cell_and_its_hosts_cell_are_not_read_again(
    cells: Cloud,  # noqa: F811
    ctx: RequestContext,
) -> None:
    cloud = cells
    made = cloud.api.create(ctx, {"name": "web", "flavor": "m1.large", "image": "tiny", "max_count": 3})
    assert [s["status"] for s in made] == ["ACTIVE"] * 3
    uuids = [s["id"] for s in made]
    reg = cloud.db.cells
    with api_statements(cloud.db) as seen:
        assert {c.name for c in reg.all()} == {"cell0", "cell1", "cell2"}
        assert reg.get("cell2").name == "cell2" and reg.cell0().is_cell0
        assert reg.host_cells(["compute-1", "compute-3"]) == {
            "compute-1": reg.get("cell1"),
            "compute-3": reg.get("cell2"),
        }
        found = reg.of_instances(uuids)
        assert sorted(u for us in found.values() for u in us) == sorted(uuids)
        for uuid in uuids:
            with registry.targeting(cloud.db, uuid) as cell:
                assert cell.name in ("cell1", "cell2")
    assert not [s for s in seen if "_mappings" in s], seen


def test_a_new_host_or_cell_of_another_process_is_seen_at_once_a_change_soon(
    cells: Cloud,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cloud = cells
    reg = cloud.db.cells
    cell2 = reg.get("cell2")
    assert reg.host_cells(["compute-1"]) == {"compute-1": reg.get("cell1")}
    by_another_process(
        cloud.db,
        "INSERT INTO host_mappings (host, cell_id, created_at) "
        f"VALUES ('compute-9', {cell2.id}, CURRENT_TIMESTAMP)",
    )
    by_another_process(
        cloud.db,
        "INSERT INTO cell_mappings (uuid, name, database_url, disabled, created_at) "
        "VALUES ('11111111-2222-3333-4444-555555555555', 'cell3', "
        f"'{cell2.database_url}', FALSE, CURRENT_TIMESTAMP)",
    )
    by_another_process(cloud.db, "UPDATE cell_mappings SET disabled = TRUE WHERE name = 'cell2'")
    assert {h: c.name for h, c in reg.host_cells(["compute-1", "compute-9"]).items()} == {
        "compute-1": "cell1",
        "compute-9": "cell2",
    }
    assert reg.get("cell3").name == "cell3"
    # A change to what is kept: seen once what is kept is old enough.
    monkeypatch.setattr(registry, "MAPPINGS_SECONDS", 0.0)
    assert reg.get("cell2").disabled


def test_this_processs_own_writes_are_seen_at_once(cells: Cloud) -> None:  # noqa: F811
    cloud = cells
    reg = cloud.db.cells
    assert reg.host_cells(["compute-3"]) == {"compute-3": reg.get("cell2")}
    assert not reg.get("cell2").disabled
    manage.set_disabled(cloud.db, cloud.admin, "cell2", True)
    assert reg.get("cell2").disabled
    assert "compute-3" in reg.unusable_hosts()
    with cloud.db.writer() as session:
        session.execute(text("DELETE FROM host_mappings WHERE host = 'compute-3'"))
    assert reg.host_cells(["compute-3"]) == {}


def _write_in_cell2(db: Database, *, api_too: bool) -> threading.Event:
    """A writer targeted at cell2, started in a thread: a cell table written, and an API
    database's table too if ``api_too``; the event is set when it committed."""
    done = threading.Event()

    def write() -> None:
        with db.target_cell(db.cells.get("cell2")), db.writer() as session:
            session.execute(delete(InstanceFault).where(InstanceFault.id == -1))
            if api_too:
                session.execute(delete(ComputeNode).where(ComputeNode.id == -1))
        done.set()

    threading.Thread(target=write, daemon=True).start()
    return done


def test_a_write_in_another_cells_database_waits_only_for_the_gates_it_writes_behind(
    cells: Cloud,  # noqa: F811
    db_url: str,
) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("PostgreSQL's writers queue on row locks: there is no writers' gate")
    cloud = cells
    held, release = threading.Event(), threading.Event()

    def hold_the_api_gate() -> None:
        with write_gate(cloud.db):
            held.set()
            release.wait(20)

    holder = threading.Thread(target=hold_the_api_gate, daemon=True)
    holder.start()
    try:
        assert held.wait(5)
        # Only cell2's database written: it does not queue behind the API database's writer.
        assert _write_in_cell2(cloud.db, api_too=False).wait(5)
        # The API database written too: it waits its turn there.
        both = _write_in_cell2(cloud.db, api_too=True)
        assert not both.wait(0.5)
        release.set()
        assert both.wait(5)
    finally:
        release.set()
        holder.join(5)
