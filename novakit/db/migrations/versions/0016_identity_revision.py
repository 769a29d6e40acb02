"""identity_revision (API database)

One row whose number every change of the identity tables raises (``novakit.identity.revision``):
a service process checks a token it validated before again only when the number has moved, so
that a disabled user, a revoked token or a role taken away stops working at once in every
process without each request reading the identity tables.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from novakit.db.migration_parts import primary_key

revision = "0016"
down_revision = "0015"


def upgrade() -> None:
    table = op.create_table(
        "identity_revision",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        primary_key("identity_revision", "id"),
    )
    op.bulk_insert(table, [{"id": 1, "revision": 0}])


def downgrade() -> None:
    op.drop_table("identity_revision")
