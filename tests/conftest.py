"""Shared fixtures: a fresh database per test, on SQLite and on a real PostgreSQL.

``db`` is parametrised over both back ends. PostgreSQL comes from
``NOVAKIT_TEST_PG_URL`` (``tests/run.sh`` starts a server of its own and sets
it). Without it the PostgreSQL variant is skipped, unless
``NOVAKIT_REQUIRE_REAL=1`` says the real services must be there, in which case
it fails: CI never passes by skipping.

Under pytest-xdist (``-n``) each worker gets databases of its own on both servers: the URLs name
``<database>_<worker>`` (made empty when the worker starts, dropped when it ends), so the per-test
truncation of one worker never empties another's tables; and a state directory of its own
(``XDG_STATE_HOME``, novakit's default when nothing names one). Everything the worker starts
(playbooks, workers, commands) inherits both.

Markers given here by path (README, "Run the tests"): ``slow`` for what needs real guests,
playbooks, the testbed or many processes (``-m "not slow"`` is the fast lane); ``machine`` for what
uses a thing of the machine's one test at a time, which ``tests/run.sh`` runs one after another
beside the parallel part; ``serial`` for what nothing else may run beside, run last, alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from novakit.config import Config, load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import CELL_TABLES, Base
from tests.pgdatabases import recreate, worker_url

# The test run is the operator: its identity is the admin's, given as an operator gives it (the
# environment, which every playbook, worker and command the tests start inherits). Tests of the
# trust model take it away or give another.
OPERATOR_ENV = {"NOVAKIT_PROJECT": "admin", "NOVAKIT_USER": "admin", "NOVAKIT_ROLES": "admin"}
for _name, _value in OPERATOR_ENV.items():
    os.environ.setdefault(_name, _value)

# pytest-xdist names its workers gw0, gw1...; empty when the run is not distributed.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
PG_URL_VARS = ("NOVAKIT_TEST_PG_URL", "NOVAKIT_TEST_PG2_URL")
if WORKER:
    # Before any test module reads them (they do, at import).
    for _var in PG_URL_VARS:
        if os.environ.get(_var):
            os.environ[_var] = worker_url(os.environ[_var], WORKER)
    # A worker finds COLUMNS=80 in its environment, which a run in one process (output piped, as
    # in CI) does not: novakit's console, made at import, would cut its tables at 80 columns.
    os.environ.pop("COLUMNS", None)

REQUIRE_REAL = os.environ.get("NOVAKIT_REQUIRE_REAL") == "1"
PG_URL = os.environ.get("NOVAKIT_TEST_PG_URL", "")

# What is slow (left out by the fast lane, ``-m "not slow"``), by path.
SLOW = ("tests/e2e/", "tests/integration/", "tests/concurrency/")
# What uses something of the machine's that only one test at a time may use (the system libvirtd,
# the testbed, sshd, process storms): one after another, in a lane of their own that runs beside
# the parallel part (tests/run.sh), by path or node id prefix.
MACHINE = (
    "tests/integration/",  # the system libvirtd's domains, networks, pools and filters; an sshd
    "tests/concurrency/",  # process storms: one at a time, so that each has the cores it expects
    "tests/e2e/testbed/",  # the multi-host testbed: /opt/novakit-testbed, users nk-h*, their sshd
    "tests/e2e/test_multihost_",
    "tests/e2e/test_compute_node_install.py",  # the system libvirtd, its pid files
)
# What must run with nothing else at all: after both lanes, alone.
SERIAL = (
    "tests/e2e/test_execution_environment.py",  # /usr/share/ansible/collections, seen by every run
    "tests/e2e/test_awx_credential.py",  # reads every /tmp/novakit-runner-* and ~/.ansible/tmp
    # Stops and starts the second PostgreSQL server every worker's cell tests use.
    "tests/functional/test_cells.py::test_a_down_cell_leaves_the_rest_working",
)
# Tests that share a named thing among themselves only: one worker runs each group (--dist loadgroup).
GROUPS = {
    "tests/functional/test_cells_upgrade.py": "novakit_upgrade",  # a database of a fixed name
    "tests/functional/test_cell0_unusable.py": "nocreatedb",  # one role and database for the file
}


def pytest_configure(config: pytest.Config) -> None:
    if not WORKER:
        return
    for var in PG_URL_VARS:
        if os.environ.get(var):
            recreate(os.environ[var])
    if "XDG_STATE_HOME" not in os.environ:
        state = tempfile.mkdtemp(prefix=f"novakit-state-{WORKER}-")
        os.environ["XDG_STATE_HOME"] = state
        config.add_cleanup(lambda: shutil.rmtree(state, ignore_errors=True))


def pytest_unconfigure(config: pytest.Config) -> None:
    if not WORKER:
        return
    for var in PG_URL_VARS:
        if os.environ.get(var):
            # A server a failed test left stopped keeps it: the next run drops it first.
            with contextlib.suppress(Exception):
                recreate(os.environ[var], drop_only=True)


@pytest.hookimpl(tryfirst=True)  # before -m deselects and --dist loadgroup reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        nodeid = item.nodeid
        if nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
        if nodeid.startswith(MACHINE):
            item.add_marker(pytest.mark.machine)
            # Kept together on one worker if a run distributes them anyway (--dist loadgroup).
            item.add_marker(pytest.mark.xdist_group("machine"))
        if nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
            item.add_marker(pytest.mark.xdist_group("serial"))
        group = GROUPS.get(nodeid.split("::", 1)[0])
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


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
    """Empty every table, keeping the cells the migrations made (cell0, cell1) and the identity
    revision's row; cell0's own
    database (made beside the API database on first use) is emptied too."""
    kept = {"cell_mappings", "identity_revision"}  # made by the migrations, rows and all
    names = ", ".join(t.name for t in Base.metadata.sorted_tables if t.name not in kept)
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
