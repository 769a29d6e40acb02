"""Alembic, driven from Python: ``novakit db upgrade`` and the first-use upgrade.

Two migration trees, as Nova has two databases (cells v2): ``api`` (``migrations/``: every
table, version table ``alembic_version``) for the API database, and ``cell``
(``cell_migrations/``: the instance tables of ``models.CELL_TABLES``, version table
``alembic_version_cell``) for a cell's database. The table names are disjoint, so one
database can carry both trees: the embedded default is the API database and cell1 at once.
A change to a cell table is a revision in both trees (the API database keeps its own copy
of the instance tables for servers not scheduled yet, and for cell1 where it is one).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

Tree = Literal["api", "cell"]
TREES: dict[str, tuple[Path, str]] = {
    "api": (Path(__file__).parent / "migrations", "alembic_version"),
    "cell": (Path(__file__).parent / "cell_migrations", "alembic_version_cell"),
}
MIGRATIONS = TREES["api"][0]


def alembic_config(url: str | None = None, tree: Tree = "api") -> AlembicConfig:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(TREES[tree][0]))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


@functools.cache
def head_revision(tree: Tree = "api") -> str | None:
    """The newest revision of ``tree``, read from the migration files without loading Alembic.

    Alembic costs most of a second to import; every Ansible task that opens the
    database would pay it just to learn that nothing needs doing.
    """
    revisions: dict[str, str | None] = {}
    for path in (TREES[tree][0] / "versions").glob("*.py"):
        source = path.read_text()
        rev = re.search(r"^revision\s*=\s*['\"]([^'\"]+)['\"]", source, re.M)
        down = re.search(r"^down_revision\s*=\s*(?:['\"]([^'\"]+)['\"]|None)", source, re.M)
        if rev:
            revisions[rev.group(1)] = down.group(1) if down else None
    parents = {d for d in revisions.values() if d}
    heads = [r for r in revisions if r not in parents]
    if len(heads) != 1:
        raise RuntimeError(f"migrations must have exactly one head, found {sorted(heads)}")
    return heads[0]


def current_revision(engine: Engine | Connection, tree: Tree = "api") -> str | None:
    version_table = TREES[tree][1]
    if isinstance(engine, Connection):
        return _revision(engine, version_table)
    with engine.connect() as conn:
        return _revision(conn, version_table)


def _revision(conn: Connection, version_table: str) -> str | None:
    if not inspect(conn).has_table(version_table):
        return None
    return conn.execute(text(f"SELECT version_num FROM {version_table}")).scalar_one_or_none()


def upgrade(engine: Engine, revision: str = "head", tree: Tree = "api") -> None:
    from alembic import command

    cfg = alembic_config(tree=tree)
    # A writer transaction from the start (BEGIN IMMEDIATE on SQLite): a deferred one that read
    # the schema first could not take the write lock if another process wrote meanwhile.
    with engine.execution_options(novakit_write=True).begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
