"""instances.key_data: the public key a server was booted with (a cell's database)

The API tree's 0010 adds the same column to the API database's copy of the instance tables;
a database that carries both trees (the embedded default) already has it then.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from novakit.db.migration_parts import add_cell_column

revision = "c0002"
down_revision = "c0001"


def upgrade() -> None:
    add_cell_column("instances", sa.Column("key_data", sa.Text()))


def downgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_column("key_data")
