"""Shared fixtures: a fresh database per test, on SQLite and on a real PostgreSQL.

``db`` is parametrised over both back ends. PostgreSQL comes from
``NOVAKIT_TEST_PG_URL`` (``tests/run.sh`` starts a server of its own and sets
it). Without it the PostgreSQL variant is skipped, unless
``NOVAKIT_REQUIRE_REAL=1`` says the real services must be there, in which case
it fails: CI never passes by skipping.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from novakit.config import Config, load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import CELL_TABLES, Base

# The test run is the operator: its identity is the admin's, given as an operator gives it (the
# environment, which every playbook, worker and command the tests start inherits). Tests of the
# trust model take it away or give another.
OPERATOR_ENV = {"NOVAKIT_PROJECT": "admin", "NOVAKIT_USER": "admin", "NOVAKIT_ROLES": "admin"}
for _name, _value in OPERATOR_ENV.items():
    os.environ.setdefault(_name, _value)

REQUIRE_REAL = os.environ.get("NOVAKIT_REQUIRE_REAL") == "1"
PG_URL = os.environ.get("NOVAKIT_TEST_PG_URL", "")


def need_real(reason: str) -> None:
    """Skip for a missing real service, or fail when the run requires them."""
    if REQUIRE_REAL:
        pytest.fail(f"NOVAKIT_REQUIRE_REAL=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "novakit.db"
    db = Database(f"sqlite:///{path}")
    db.dispose()
    return path


@pytest.fixture(scope="session")
def pg_database() -> Iterator[Database | None]:
    if not PG_URL:
        yield None
        return
    db = Database(PG_URL, auto_upgrade=False)
    with db.engine.begin() as conn:
        Base.metadata.drop_all(conn)
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
        conn.execute(text("DROP TABLE IF EXISTS alembic_version_cell"))
    db.upgrade_if_needed()
    yield db
    db.dispose()


def _truncate(db: Database) -> None:
    """Empty every table, keeping the cells the migrations made (cell0, cell1); cell0's own
    database (made beside the API database on first use) is emptied too."""
    names = ", ".join(t.name for t in Base.metadata.sorted_tables if t.name != "cell_mappings")
    with db.engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
        conn.execute(text("DELETE FROM cell_mappings WHERE name NOT IN ('cell0', 'cell1')"))
    cell0 = db.cells.database(db.cells.cell0())
    cell_tables = ", ".join(t.name for t in Base.metadata.sorted_tables if t.name in CELL_TABLES)
    with cell0.engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {cell_tables} RESTART IDENTITY CASCADE"))


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path) -> Iterator[str]:
    """A URL to an empty, migrated database; both back ends."""
    if request.param == "sqlite":
        path = tmp_path / "novakit.db"
        shutil.copy(sqlite_template, path)
        yield f"sqlite:///{path}"
        return
    pg = request.getfixturevalue("pg_database")
    if pg is None:
        need_real("NOVAKIT_TEST_PG_URL is not set (tests/services/postgres.sh start prints it)")
    _truncate(pg)
    yield PG_URL


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    yield database
    database.dispose()


@pytest.fixture
def sqlite_db(tmp_path: Path, sqlite_template: Path) -> Iterator[Database]:
    """SQLite only, for tests that are about the embedded default itself."""
    path = tmp_path / "novakit.db"
    shutil.copy(sqlite_template, path)
    database = Database(f"sqlite:///{path}")
    yield database
    database.dispose()


@pytest.fixture
def conf(tmp_path: Path, db_url: str) -> Config:
    return load_config(db_url=db_url, state_dir=tmp_path / "state")


@pytest.fixture
def admin_ctx() -> RequestContext:
    return RequestContext(project_id="admin-project", user_id="admin", roles=["admin"])


@pytest.fixture
def ctx() -> RequestContext:
    return RequestContext(project_id="project-a", user_id="alice", roles=["member"])


@pytest.fixture
def other_ctx() -> RequestContext:
    return RequestContext(project_id="project-b", user_id="bob", roles=["member"])
