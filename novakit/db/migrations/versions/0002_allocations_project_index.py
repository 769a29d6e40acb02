"""index allocations by project, for quota usage counted from placement

The quota recheck counts a project's allocations inside every claim
transaction; without this index that count reads the whole table.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.create_index("ix_allocations_project_id", ["project_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.drop_index("ix_allocations_project_id")
