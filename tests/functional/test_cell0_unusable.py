"""cell0's database cannot be made or opened (issue 25 item 7).

On PostgreSQL cell0's database ``<name>_cell0`` is created by ``novakit db upgrade``; a database
user without CREATEDB cannot. The upgrade used to say success, and then ``server list`` failed
entirely and a server that fit no host failed with the cell0 error. Now the upgrade fails and
says what the user needs, the live cells' servers are listed, and a server that fits no host
fails with NoValidHost, recorded in the API database. On SQLite the same is a cell0 file that
cannot be opened (a directory stands at its path).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.engine import Connection, Engine
from typer.testing import CliRunner, Result

from novakit.catalog import flavors
from novakit.cells.registry import UNSCHEDULED, derived_url
from novakit.cli.main import app
from novakit.context import RequestContext
from novakit.db import migration
from novakit.db.engine import Database
from tests.conftest import PG_URL, need_real
from tests.functional.cloud import make_cloud

# Names of this run's own (a role is the server's, not a database's: two runs or workers on one
# server must not share it).
RUN = uuid.uuid4().hex[:8]
ROLE = f"nk_nocreatedb_{RUN}"
NAME = f"nk_nocreatedb_{RUN}_api"


def _admin_engine() -> Engine:
    return create_engine(make_url(PG_URL).set(database="postgres"), isolation_level="AUTOCOMMIT")


def _drop(conn: Connection) -> None:
    for name in (NAME, f"{NAME}_cell0"):
        conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    conn.execute(text(f"DROP ROLE IF EXISTS {ROLE}"))


@pytest.fixture
def no_createdb_url() -> Iterator[str]:
    """An empty database owned by a role of its own that may not create databases."""
    if not PG_URL:
        need_real("NOVAKIT_TEST_PG_URL is not set (tests/services/postgres.sh start prints it)")
    admin = _admin_engine()
    with admin.connect() as conn:
        _drop(conn)
        conn.execute(text(f"CREATE ROLE {ROLE} LOGIN PASSWORD 'nocreatedb' NOCREATEDB"))
        conn.execute(text(f"CREATE DATABASE {NAME} OWNER {ROLE}"))
    yield (
        make_url(PG_URL)
        .set(database=NAME, username=ROLE, password="nocreatedb")
        .render_as_string(hide_password=False)
    )
    with admin.connect() as conn:
        _drop(conn)
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def unusable(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL whose cell0 cannot be made or opened; not migrated yet."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("no_createdb_url"))
    url = f"sqlite:///{tmp_path / 'novakit.db'}"
    Path(make_url(derived_url(url, "cell0")).database or "").mkdir()
    return url


def _run(url: str, tmp_path: Path, *args: str, roles: str = "admin", project: str = "admin") -> Result:
    env = {
        "NOVAKIT_DB_URL": url,
        "NOVAKIT_STATE_DIR": str(tmp_path / "state"),
        "NOVAKIT_PROJECT": project,
        "NOVAKIT_ROLES": roles,
    }
    return CliRunner().invoke(app, list(args), env=env)


def test_db_upgrade_fails_saying_what_the_database_user_needs(no_createdb_url: str, tmp_path: Path) -> None:
    out = _run(no_createdb_url, tmp_path, "db", "upgrade")
    said = out.stdout + out.stderr
    assert out.exit_code != 0, said
    assert f"{NAME}_cell0" in said and "CREATEDB" in said and ROLE in said, said
    assert "Traceback" not in said

    # The db module (db_upgrade.yml) fails as well, with the same words.
    from tests.e2e.runner import run_playbook

    env = {"NOVAKIT_DB_URL": no_createdb_url, "NOVAKIT_STATE_DIR": str(tmp_path / "state")}
    played = run_playbook("db_upgrade.yml", tmp_path, env)
    text_out = played.stdout.read()
    assert played.rc != 0 and "CREATEDB" in text_out and f"{NAME}_cell0" in text_out, text_out

    # Once cell0's database is made by hand, owned by the user, the upgrade passes.
    admin = _admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {NAME}_cell0 OWNER {ROLE}"))
    admin.dispose()
    out = _run(no_createdb_url, tmp_path, "db", "upgrade")
    assert out.exit_code == 0, (out.stdout, out.stderr)
    assert "cell cell0: c" in out.stdout
    assert Database(no_createdb_url, auto_upgrade=False).current_revision() == migration.head_revision()


def test_the_fleet_goes_on_without_cell0_and_no_valid_host_is_said(
    unusable: str, tmp_path: Path, ctx: RequestContext
) -> None:
    out = _run(unusable, tmp_path, "db", "upgrade")
    assert out.exit_code != 0 and "cell0" in out.stderr, (out.stdout, out.stderr)
    # The API database made anyway (as an operator who ignored the failure would run).
    db = Database(unusable, auto_upgrade=False)
    db.upgrade_if_needed()
    try:
        cloud = make_cloud(db, tmp_path)
        [ok] = cloud.api.create(ctx, {"name": "fits", "flavor": "m1.small", "image": "tiny"})
        assert ok["status"] == "ACTIVE"
        flavors.create(db, cloud.admin, {"name": "huge", "vcpus": 1, "memory_mb": 10**6, "root_gb": 1})
        [whale] = cloud.api.create(ctx, {"name": "whale", "flavor": "huge", "image": "tiny"})
        assert whale["status"] == "ERROR"
        shown = cloud.api.get(ctx, "whale")
        assert shown["status"] == "ERROR" and "No valid host" in shown["fault"]["message"], shown
        # Recorded in the API database, where it waited: cell0 could not take it.
        assert db.cells.of_instances([whale["id"]]) == {UNSCHEDULED: [whale["id"]]}

        listed = {s["name"]: s["status"] for s in cloud.api.list_servers(ctx)}
        assert listed == {"fits": "ACTIVE", "whale": "ERROR"}
        out = _run(unusable, tmp_path, "server", "list", "-f", "json", roles="member", project=ctx.project_id)
        assert out.exit_code == 0, (out.stdout, out.stderr)
        shown_list = {s["name"]: s["status"] for s in json.loads(out.stdout)}
        assert shown_list == {"fits": "ACTIVE", "whale": "ERROR"}
        cloud.api.delete(ctx, "whale")
        assert {s["name"] for s in cloud.api.list_servers(ctx)} == {"fits"}
    finally:
        db.dispose()
