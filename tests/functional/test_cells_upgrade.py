"""A database made before cells upgrades in place: it becomes the API database and cell1.

The data is what novakit made before cells (``data/pre_cells_0005.json``: written by commit
4123582's own API on a database at revision 0005: two fake hosts, three servers of which one
stopped, a deleted one, one in error after "no valid host", their actions, events, fault and
claims). It is loaded into a database migrated to 0005, then ``novakit db upgrade`` runs.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import JSON, Boolean, DateTime, create_engine, insert, make_url, text
from typer.testing import CliRunner

from novakit.cli.main import app
from novakit.db import migration
from novakit.db.engine import Database
from novakit.db.models import Base
from tests.conftest import PG_URL, need_real

DATA = Path(__file__).parent / "data" / "pre_cells_0005.json"


def _value(column: Any, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(column.type, JSON):
        return json.loads(value) if isinstance(value, str) else value
    if isinstance(column.type, DateTime):
        return dt.datetime.fromisoformat(value)
    if isinstance(column.type, Boolean):
        return bool(value)
    return value


def load_pre_cells(url: str, fake_dir: Path) -> None:
    """A database at revision 0005 holding the old data (fake hosts pointed at ``fake_dir``)."""
    engine = create_engine(url)
    migration.upgrade(engine, "0005")
    tables = json.loads(DATA.read_text())["tables"]
    with engine.begin() as conn:
        for table in Base.metadata.sorted_tables:
            rows = tables.get(table.name)
            if not rows:
                continue
            values = [{c: _value(table.c[c], v) for c, v in row.items()} for row in rows]
            if table.name == "compute_nodes":
                for v in values:
                    v["driver"]["options"]["state_dir"] = str(fake_dir)
            conn.execute(insert(table), values)
        if engine.dialect.name == "postgresql":  # the ids were given: move the sequences past them
            for table in Base.metadata.sorted_tables:
                if table.name in tables and "id" in table.c:
                    conn.execute(
                        text(
                            f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), MAX(id)) "
                            f"FROM {table.name}"
                        )
                    )
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def old_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'novakit.db'}"
        return
    if not PG_URL:
        need_real("NOVAKIT_TEST_PG_URL is not set (tests/services/postgres.sh start prints it)")
    admin = create_engine(make_url(PG_URL).set(database="postgres"), isolation_level="AUTOCOMMIT")
    names = ("novakit_upgrade", "novakit_upgrade_cell0")
    with admin.connect() as conn:
        for name in names:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        conn.execute(text("CREATE DATABASE novakit_upgrade"))
    yield make_url(PG_URL).set(database="novakit_upgrade").render_as_string(hide_password=False)
    with admin.connect() as conn:
        for name in names:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()


def test_a_pre_cells_database_upgrades_in_place_and_keeps_everything(old_url: str, tmp_path: Path) -> None:
    load_pre_cells(old_url, tmp_path / "fake")
    env = {
        "NOVAKIT_DB_URL": old_url,
        "NOVAKIT_STATE_DIR": str(tmp_path / "state"),
        "NOVAKIT_PROJECT": "admin",
        "NOVAKIT_ROLES": "admin",
    }
    runner = CliRunner()

    def run(*args: str, code: int = 0, **as_who: str) -> str:
        result = runner.invoke(app, list(args), env={**env, **as_who})
        assert result.exit_code == code, (args, result.stdout, result.stderr)
        return result.stdout

    if not old_url.startswith("sqlite"):
        # A shared PostgreSQL is upgraded explicitly: before that, every face says what to run.
        # (The embedded SQLite default upgrades itself on first use: the command below finds it done.)
        assert "novakit db upgrade" in runner.invoke(app, ["server", "list"], env=env).stderr
    said = run("db", "upgrade")
    assert f"database at revision {migration.head_revision()}" in said
    assert (
        "cell cell1: (the API database)" in said and f"cell cell0: {migration.head_revision('cell')}" in said
    )
    db = Database(old_url, auto_upgrade=False)
    assert db.current_revision() == migration.head_revision()

    cells = {c["name"]: c for c in json.loads(run("cell", "list", "-f", "json"))}
    assert set(cells) == {"cell0", "cell1"}
    assert cells["cell1"]["hosts"] == 2 and cells["cell1"]["servers"] == 4
    assert cells["cell1"]["database_is_api"] and cells["cell0"]["status"] == "up"

    servers = {s["name"]: s for s in json.loads(run("server", "list", "--all-projects", "-f", "json"))}
    assert {n: s["status"] for n, s in servers.items()} == {
        "keep-1": "ACTIVE",
        "keep-2": "SHUTOFF",
        "keep-3": "ACTIVE",
        "toobig": "ERROR",
    }
    shown = json.loads(run("server", "show", "toobig", "-f", "json"))
    assert "No valid host" in shown["fault"]["message"]
    events = run("server", "events", "keep-2")
    assert "create" in events and "stop" in events
    assert json.loads(run("server", "show", "gone", "--deleted", "-f", "json"))["vm_state"] == "deleted"
    hosts = {h["host"]: h for h in json.loads(run("host", "list", "-f", "json"))}
    assert {h: (v["instances"], v["cell"]) for h, v in hosts.items()} == {
        "old-1": (2, "cell1"),
        "old-2": (1, "cell1"),
    }
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM allocations")).scalar() == 9

    # It goes on working as the API database and cell1: names, actions, new servers, deletes.
    alice = {"NOVAKIT_PROJECT": "team-a", "NOVAKIT_USER": "alice", "NOVAKIT_ROLES": "member"}
    taken = runner.invoke(
        app, ["server", "create", "keep-2", "--flavor", "small", "--image", "img"], env={**env, **alice}
    )
    assert taken.exit_code == 1 and "already exists in project team-a" in taken.stderr
    run("server", "rename", "keep-1", "first", **alice)
    run("server", "create", "keep-1", "--flavor", "small", "--image", "img", **alice)
    new = json.loads(run("server", "show", "keep-1", "-f", "json"))
    assert new["status"] == "ACTIVE" and new["host"] in ("old-1", "old-2")
    assert db.cells.of_instance(new["id"]).name == "cell1"
    run("server", "delete", "toobig")
    names = {s["name"] for s in json.loads(run("server", "list", "--all-projects", "-f", "json"))}
    assert names == {"first", "keep-1", "keep-2", "keep-3"}
    # A second upgrade changes nothing.
    assert f"database at revision {migration.head_revision()}" in run("db", "upgrade")
    db.dispose()
