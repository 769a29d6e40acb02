"""key_pairs: users' SSH public keys (Nova's os-keypairs), and instances.key_data

A key pair belongs to a user, its name unique per user. A server keeps the public key it was
booted with in ``instances.key_data`` (as Nova does), so deleting the pair later does not change
what the server was given. ``instances`` is a cell table: the cell tree adds the column too
(``c0002``); a database carrying both trees gets it once.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "key_pairs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("type", sa.String(length=10), nullable=False),
        sa.Column("fingerprint", sa.String(length=255), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_key_pairs")),
        sa.UniqueConstraint("user_id", "name", name=op.f("uq_key_pairs_user_id_name")),
    )
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("instances")}
    if "key_data" not in columns:
        with op.batch_alter_table("instances", schema=None) as batch_op:
            batch_op.add_column(sa.Column("key_data", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_column("key_data")
    op.drop_table("key_pairs")
