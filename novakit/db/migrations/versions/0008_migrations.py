"""migrations: servers moved between hosts (API database)

A resize, a cold or live migration, an evacuation: Nova's migration records, with
its statuses and types. During a move the migration holds the source host's claim
(placement allocations under its uuid) and the instance the destination's.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "migrations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("instance_uuid", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("request_id", sa.String(length=255), nullable=False),
        sa.Column("migration_type", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("source_compute", sa.String(length=255), nullable=True),
        sa.Column("dest_compute", sa.String(length=255), nullable=True),
        sa.Column("old_flavor", sa.JSON(), nullable=False),
        sa.Column("new_flavor", sa.JSON(), nullable=False),
        sa.Column("old_vm_state", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_migrations")),
        sa.UniqueConstraint("uuid", name=op.f("uq_migrations_uuid")),
    )
    with op.batch_alter_table("migrations", schema=None) as batch_op:
        batch_op.create_index("ix_migrations_instance_uuid_status", ["instance_uuid", "status"], unique=False)
        batch_op.create_index(
            "ix_migrations_source_compute_status", ["source_compute", "status"], unique=False
        )


def downgrade() -> None:
    op.drop_table("migrations")
