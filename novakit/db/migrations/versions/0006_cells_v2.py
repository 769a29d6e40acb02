"""cells v2: cell, host and instance mappings in the API database

A database made before cells holds the API tables and one cell's instances at once
(the table names are disjoint): it becomes the API database and cell1, with cell0
(where servers that could not be scheduled go) derived next to it. Every existing
host is mapped to cell1 and every instance, live or deleted, to cell1, with its name
and project, so nothing about the data changes.
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

from novakit.db.migration_parts import create_table_with_id, foreign_key, timestamps, unique, uuid_column

revision = "0006"
down_revision = "0005"

#: Nova's fixed uuid for cell0.
CELL0_UUID = "00000000-0000-0000-0000-000000000000"


def upgrade() -> None:
    create_table_with_id(
        "cell_mappings",
        uuid_column(),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("database_url", sa.Text()),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        *timestamps(),
        unique("cell_mappings", "name"),
        unique("cell_mappings", "uuid"),
    )
    create_table_with_id(
        "host_mappings",
        sa.Column("cell_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        *timestamps(),
        foreign_key("host_mappings", "cell_id", "cell_mappings.id"),
        unique("host_mappings", "host"),
    )
    with op.batch_alter_table("host_mappings", schema=None) as batch_op:
        batch_op.create_index("ix_host_mappings_cell_id", ["cell_id"], unique=False)
    create_table_with_id(
        "instance_mappings",
        uuid_column("instance_uuid"),
        sa.Column("cell_id", sa.Integer()),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255)),
        sa.Column("display_name", sa.String(length=255), nullable=False),
        *timestamps(soft_delete=True),
        foreign_key("instance_mappings", "cell_id", "cell_mappings.id"),
        unique("instance_mappings", "instance_uuid"),
        unique("instance_mappings", "project_id", "display_name", "deleted"),
    )
    with op.batch_alter_table("instance_mappings", schema=None) as batch_op:
        batch_op.create_index("ix_instance_mappings_cell_id", ["cell_id"], unique=False)

    bind = op.get_bind()
    now = sa.func.now() if bind.dialect.name == "postgresql" else sa.text("CURRENT_TIMESTAMP")
    cells = sa.table(
        "cell_mappings",
        sa.column("uuid", sa.String),
        sa.column("name", sa.String),
        sa.column("database_url", sa.Text),
        sa.column("disabled", sa.Boolean),
        sa.column("created_at", sa.DateTime),
    )
    op.execute(
        cells.insert().values(uuid=CELL0_UUID, name="cell0", database_url=None, disabled=True, created_at=now)
    )
    op.execute(
        cells.insert().values(
            uuid=str(uuid.uuid4()), name="cell1", database_url=None, disabled=False, created_at=now
        )
    )
    # What the database already holds is cell1's.
    op.execute(
        "INSERT INTO host_mappings (cell_id, host, created_at) "
        "SELECT (SELECT id FROM cell_mappings WHERE name = 'cell1'), host, MIN(created_at) "
        "FROM compute_nodes WHERE deleted = 0 GROUP BY host"
    )
    op.execute(
        "INSERT INTO instance_mappings "
        "(instance_uuid, cell_id, project_id, user_id, display_name, created_at, updated_at, deleted_at, deleted) "
        "SELECT uuid, (SELECT id FROM cell_mappings WHERE name = 'cell1'), project_id, user_id, display_name, "
        "created_at, updated_at, deleted_at, CASE WHEN deleted = 0 THEN 0 ELSE id END FROM instances"
    )


def downgrade() -> None:
    op.drop_table("instance_mappings")
    op.drop_table("host_mappings")
    op.drop_table("cell_mappings")
