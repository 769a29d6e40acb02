"""hosts' last contact and why they are down; the owner of an instance's running task

Liveness without agents: nothing runs on a compute host between requests, so
time since the last heartbeat alone cannot say a host is down. A service now
records when novakit last reached it (``last_contact_at``) and, when that
contact failed or an admin said so, why it is down (``down_reason``).

Ownership of in-flight work: the request that started a task (a build, an
action) owns it (``task_owner``: its request id) and holds a lease on it
(``task_lease_until``), renewed while it waits; heal takes over only work
whose lease has run out.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    with op.batch_alter_table("services", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_contact_at", sa.DateTime()))
        batch_op.add_column(sa.Column("down_reason", sa.String(length=255)))
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("task_owner", sa.String(length=255)))
        batch_op.add_column(sa.Column("task_lease_until", sa.DateTime()))


def downgrade() -> None:
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_column("task_lease_until")
        batch_op.drop_column("task_owner")
    with op.batch_alter_table("services", schema=None) as batch_op:
        batch_op.drop_column("down_reason")
        batch_op.drop_column("last_contact_at")
