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


def worker_url(url: str, worker: str) -> str:
    """``url`` with the database named for a pytest-xdist worker (``novakit`` -> ``novakit_gw0``)."""
    if not url or not worker:
        return url
    parsed = make_url(url)
    return parsed.set(database=f"{parsed.database}_{worker}").render_as_string(hide_password=False)


def recreate(url: str, *, drop_only: bool = False) -> None:
    """Drop the database ``url`` names (and its cell0) on its server, then create it empty."""
    parsed = make_url(url)
    name = parsed.database
    admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for db in (name, f"{name}_cell0"):
                conn.execute(text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
            if not drop_only:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()


@contextlib.contextmanager
def own_database(name: str) -> Iterator[str]:
    """Database ``name`` on the tests' server, created empty, dropped afterwards with its cell0."""
    url = make_url(base_url()).set(database=name).render_as_string(hide_password=False)
    recreate(url)
    try:
        yield url
    finally:
        recreate(url, drop_only=True)
