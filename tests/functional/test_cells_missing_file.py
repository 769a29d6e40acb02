"""A SQLite cell whose database file is gone is a down cell (issue 25 item 6).

novakit used to create an empty file at the cell's path: the cell then answered, had no
tables, and every server list, show, create and heal failed with "no such table: instances"
while ``cell list`` said up. A missing file is never created: the cell is down, as a stopped
PostgreSQL cell is, and the other cells go on. The API database (cell1) is SQLite or
PostgreSQL; cell2 is a SQLite file either way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from novakit.cells import manage, registry
from novakit.cli.main import app
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.heal.manager import heal
from tests.functional.cloud import Cloud, make_cloud


@pytest.fixture
def fleet(db: Database, tmp_path: Path) -> Iterator[tuple[Cloud, Path]]:
    """compute-1 and compute-2 in cell1 (the API database), compute-3 in cell2, a SQLite file."""
    cloud = make_cloud(db, tmp_path)
    path = tmp_path / "cells" / "cell2.db"
    path.parent.mkdir()
    manage.create_cell(db, cloud.admin, "cell2", f"sqlite:///{path}", migrate=True)
    with db.writer() as session:
        session.execute(text("DELETE FROM host_mappings WHERE host = 'compute-3'"))
    manage.discover_hosts(db, cloud.admin, "cell2")
    registry.PROBE_SECONDS = 0.0
    yield cloud, path
    registry.PROBE_SECONDS = 2.0


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def test_a_cell_whose_file_is_gone_is_down_and_the_fleet_goes_on(
    fleet: tuple[Cloud, Path], ctx: RequestContext, tmp_path: Path
) -> None:
    cloud, path = fleet
    made = cloud.api.create(ctx, {"name": "d", "flavor": "m1.large", "image": "tiny", "max_count": 8})
    far = [s for s in made if cloud.db.cells.of_instance(s["id"]).name == "cell2"]
    near = [s for s in made if cloud.db.cells.of_instance(s["id"]).name == "cell1"]
    assert far and near
    # Removed under a running process, whose connections to it are still open.
    _remove(path)

    servers, down = cloud.api.list_servers_and_down(ctx)
    assert down == ["cell2"]
    by_id = {s["id"]: s for s in servers}
    assert all(by_id[s["id"]]["status"] == "ACTIVE" for s in near)
    assert all(by_id[s["id"]]["status"] == "UNKNOWN" for s in far)
    shown = cloud.api.get(ctx, far[0]["name"])
    assert shown["status"] == "UNKNOWN" and shown["cell"] == "cell2"
    listed = {c["name"]: c["status"] for c in manage.list_cells(cloud.db, cloud.admin)}
    assert listed["cell1"] == "up" and listed["cell2"].startswith("down"), listed

    # New servers go to the cells that answer; none is left building.
    more = cloud.api.create(ctx, {"name": "late", "flavor": "m1.small", "image": "tiny", "max_count": 2})
    assert [s["status"] for s in more] == ["ACTIVE", "ACTIVE"]
    assert {cloud.db.cells.of_instance(s["id"]).name for s in more} == {"cell1"}
    servers, down = cloud.api.list_servers_and_down(ctx)
    assert down == ["cell2"] and not [s for s in servers if s["status"] == "BUILD"]

    # Heal reports the cell and does the rest.
    report = heal(cloud.db, cloud.conf)
    assert list(report.down_cells) == ["cell2"]
    assert "compute-3" not in report.hosts and "compute-1" in report.hosts
    assert not path.exists()

    # A new process (the command) sees the same, and creates no file either.
    env = {
        "NOVAKIT_DB_URL": cloud.db.url,
        "NOVAKIT_STATE_DIR": str(tmp_path / "state"),
        "NOVAKIT_PROJECT": ctx.project_id,
        "NOVAKIT_USER": ctx.user_id,
        "NOVAKIT_ROLES": "member",
    }
    runner = CliRunner()
    out = runner.invoke(app, ["server", "list", "-f", "json"], env=env)
    assert out.exit_code == 0 and "cell cell2 did not answer" in out.stderr, (out.stdout, out.stderr)
    assert {s["name"]: s["status"] for s in json.loads(out.stdout)}[far[0]["name"]] == "UNKNOWN"
    out = runner.invoke(app, ["server", "show", far[0]["name"], "-f", "json"], env=env)
    assert out.exit_code == 0 and json.loads(out.stdout)["status"] == "UNKNOWN", out.stderr
    out = runner.invoke(app, ["server", "stop", far[0]["name"]], env=env)
    assert out.exit_code == 1 and "Cell cell2 is unreachable" in out.stderr, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    out = runner.invoke(
        app,
        ["server", "create", "cli", "--flavor", "m1.small", "--image", "tiny", "-f", "json"],
        env={**env, "NOVAKIT_PROJECT": "project-cli"},  # project-a is at the default quota's 10
    )
    assert out.exit_code == 0 and json.loads(out.stdout)[0]["status"] == "ACTIVE", (out.stdout, out.stderr)
    out = runner.invoke(app, ["cell", "list", "-f", "json"], env={**env, "NOVAKIT_ROLES": "admin"})
    assert out.exit_code == 0, out.stderr
    assert {c["name"]: c["status"] for c in json.loads(out.stdout)}["cell2"].startswith("down")
    out = runner.invoke(app, ["heal"], env={**env, "NOVAKIT_ROLES": "admin"})
    assert out.exit_code == 0 and "cell cell2 did not answer" in out.stderr, (out.stdout, out.stderr)
    assert not path.exists()
