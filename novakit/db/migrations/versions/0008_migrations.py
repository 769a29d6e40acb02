"""migrations: servers moved between hosts (API database)

A resize, a cold or live migration, an evacuation: Nova's migration records, with
its statuses and types. During a move the migration holds the source host's claim
(placement allocations under its uuid) and the instance the destination's.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from novakit.db.migration_parts import create_table_with_id, timestamps, unique, uuid_column

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    create_table_with_id(
        "migrations",
        uuid_column(),
        uuid_column("instance_uuid"),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("request_id", sa.String(length=255), nullable=False),
        sa.Column("migration_type", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("source_compute", sa.String(length=255)),
        sa.Column("dest_compute", sa.String(length=255)),
        sa.Column("old_flavor", sa.JSON(), nullable=False),
        sa.Column("new_flavor", sa.JSON(), nullable=False),
        sa.Column("old_vm_state", sa.String(length=255), nullable=False),
        *timestamps(),
        unique("migrations", "uuid"),
    )
    with op.batch_alter_table("migrations", schema=None) as batch_op:
        batch_op.create_index("ix_migrations_instance_uuid_status", ["instance_uuid", "status"], unique=False)
        batch_op.create_index(
            "ix_migrations_source_compute_status", ["source_compute", "status"], unique=False
        )


def downgrade() -> None:
    op.drop_table("migrations")
