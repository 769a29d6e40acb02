"""A PostgreSQL database of a test's own, with the cell0 database novakit derives from its name.

The tests' server keeps its data between runs (as root its directory is outside the checkout), so
a database a test names must start empty each time: its cell0 database (``<name>_cell0``, made by
novakit on first use) too, or a server buried there by an earlier run collides with this run's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


def base_url() -> str:
    """The tests' server (NOVAKIT_TEST_PG_URL); skips, or fails under NOVAKIT_REQUIRE_REAL=1."""
    base = os.environ.get("NOVAKIT_TEST_PG_URL", "")
    if not base:
        if os.environ.get("NOVAKIT_REQUIRE_REAL") == "1":
            pytest.fail("NOVAKIT_REQUIRE_REAL=1 but NOVAKIT_TEST_PG_URL is not set")
        pytest.skip("NOVAKIT_TEST_PG_URL is not set (tests/services/postgres.sh start prints it)")
    return base


@contextlib.contextmanager
def own_database(name: str) -> Iterator[str]:
    """Database ``name`` on the tests' server, created empty, dropped afterwards with its cell0."""
    base = make_url(base_url())
    admin = create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")

    def drop() -> None:
        with admin.connect() as conn:
            for db in (name, f"{name}_cell0"):
                conn.execute(text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))

    drop()
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        drop()
        admin.dispose()
