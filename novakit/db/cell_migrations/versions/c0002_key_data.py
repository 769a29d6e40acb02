"""instances.key_data: the public key a server was booted with (a cell's database)

The API tree's 0010 adds the same column to the API database's copy of the instance tables;
a database that carries both trees (the embedded default) already has it then.

Revision ID: c0002
Revises: c0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0002"
down_revision = "c0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("instances")}
    if "key_data" not in columns:
        with op.batch_alter_table("instances", schema=None) as batch_op:
            batch_op.add_column(sa.Column("key_data", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_column("key_data")
