"""The Alembic migrations build exactly the schema the models describe, on both back ends."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from novakit.db import migration
from novakit.db.engine import Database
from novakit.db.models import Base


def test_migrations_match_models(db: Database) -> None:
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


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
