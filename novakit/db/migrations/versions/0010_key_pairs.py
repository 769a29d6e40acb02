"""key_pairs: users' SSH public keys (Nova's os-keypairs), and instances.key_data

A key pair belongs to a user, its name unique per user. A server keeps the public key it was
booted with in ``instances.key_data`` (as Nova does), so deleting the pair later does not change
what the server was given. ``instances`` is a cell table: the cell tree adds the column too
(``c0002``); a database carrying both trees gets it once.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from novakit.db.migration_parts import add_cell_column, create_table_with_id, timestamps, unique

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    create_table_with_id(
        "key_pairs",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("type", sa.String(length=10), nullable=False),
        sa.Column("fingerprint", sa.String(length=255), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        *timestamps(),
        unique("key_pairs", "user_id", "name"),
    )
    add_cell_column("instances", sa.Column("key_data", sa.Text()))


def downgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_column("key_data")
    op.drop_table("key_pairs")
