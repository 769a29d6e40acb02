"""instances.admin_password_hash: the admin password as the guest gets it, hashed

The API turns an admin password into a SHA-512 crypt hash before anything is
written; builds and rebuilds are made later from the records (the boot
playbook's build play, a rebuild's request), so the hash is kept with the
instance. The clear text is never stored.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("admin_password_hash", sa.String(length=255)))


def downgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_column("admin_password_hash")
