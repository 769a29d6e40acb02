"""Alembic environment of a cell's database: the instance tables only, their own version table."""

from __future__ import annotations

from alembic import context
from sqlalchemy import MetaData, create_engine
from sqlalchemy.engine import Connection

from novakit.db.models import CELL_TABLES, Base

config = context.config
target_metadata = MetaData(naming_convention=Base.metadata.naming_convention)
for _name in sorted(CELL_TABLES):
    Base.metadata.tables[_name].to_metadata(target_metadata)


def _migrate(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        version_table="alembic_version_cell",
    )
    with context.begin_transaction():
        context.run_migrations()


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _migrate(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "sqlite://")
    with engine.begin() as conn:
        _migrate(conn)


run()
