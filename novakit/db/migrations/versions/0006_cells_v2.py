"""cells v2: cell, host and instance mappings in the API database

A database made before cells holds the API tables and one cell's instances at once
(the table names are disjoint): it becomes the API database and cell1, with cell0
(where servers that could not be scheduled go) derived next to it. Every existing
host is mapped to cell1 and every instance, live or deleted, to cell1, with its name
and project, so nothing about the data changes.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

#: Nova's fixed uuid for cell0.
CELL0_UUID = "00000000-0000-0000-0000-000000000000"


def upgrade() -> None:
    op.create_table(
        "cell_mappings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("database_url", sa.Text(), nullable=True),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cell_mappings")),
        sa.UniqueConstraint("name", name=op.f("uq_cell_mappings_name")),
        sa.UniqueConstraint("uuid", name=op.f("uq_cell_mappings_uuid")),
    )
    op.create_table(
        "host_mappings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cell_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["cell_id"], ["cell_mappings.id"], name=op.f("fk_host_mappings_cell_id_cell_mappings")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_host_mappings")),
        sa.UniqueConstraint("host", name=op.f("uq_host_mappings_host")),
    )
    with op.batch_alter_table("host_mappings", schema=None) as batch_op:
        batch_op.create_index("ix_host_mappings_cell_id", ["cell_id"], unique=False)
    op.create_table(
        "instance_mappings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("instance_uuid", sa.String(length=36), nullable=False),
        sa.Column("cell_id", sa.Integer(), nullable=True),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=True),
        sa.Column("display_name", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("deleted", sa.Integer(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(
            ["cell_id"], ["cell_mappings.id"], name=op.f("fk_instance_mappings_cell_id_cell_mappings")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instance_mappings")),
        sa.UniqueConstraint("instance_uuid", name=op.f("uq_instance_mappings_instance_uuid")),
        sa.UniqueConstraint(
            "project_id",
            "display_name",
            "deleted",
            name=op.f("uq_instance_mappings_project_id_display_name_deleted"),
        ),
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
