"""The Alembic migrations build exactly the schema the models describe, on both back ends."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData, inspect, text

from novakit.db import migration
from novakit.db.engine import Database
from novakit.db.models import CELL_TABLES, Base


def _not_a_version_table(
    obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
) -> bool:
    return not (type_ == "table" and name in ("alembic_version", "alembic_version_cell"))


def test_migrations_match_models(db: Database) -> None:
    with db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"include_object": _not_a_version_table})
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == []


def _cell_metadata() -> MetaData:
    md = MetaData(naming_convention=Base.metadata.naming_convention)
    for name in sorted(CELL_TABLES):
        Base.metadata.tables[name].to_metadata(md)
    return md


@pytest.mark.parametrize("way", ["alembic", "first use"])
def test_a_cell_database_has_the_cell_tables_of_the_models_and_nothing_else(tmp_path: Path, way: str) -> None:
    """The cell tree builds the four cell tables as the models say, by Alembic (``novakit db
    upgrade``, a cell made with --migrate) or from the models on first use (cell0): the same."""
    db = Database(f"sqlite:///{tmp_path / 'cell.db'}", kind="cell", auto_upgrade=False)
    if way == "alembic":
        migration.upgrade(db.engine, tree="cell")
    else:
        db.upgrade()
    with db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"include_object": _not_a_version_table})
        assert compare_metadata(ctx, _cell_metadata()) == []
        assert set(inspect(conn).get_table_names()) == {*CELL_TABLES, "alembic_version_cell"}
    assert db.current_revision() == migration.head_revision("cell")
    db.dispose()


def test_a_new_sqlite_file_is_upgraded_on_first_use(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'novakit.db'}")
    assert db.current_revision() == migration.head_revision()
    assert "instances" in inspect(db.engine).get_table_names()
    with db.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() >= 1000
    db.dispose()


def test_head_is_read_without_alembic_and_agrees_with_it() -> None:
    from alembic.script import ScriptDirectory

    assert (
        migration.head_revision()
        == ScriptDirectory.from_config(migration.alembic_config()).get_current_head()
    )
