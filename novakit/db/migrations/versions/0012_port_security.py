"""ports.port_security_enabled (Neutron's port security)

With port security enabled a port's security groups decide its traffic, and a port with no
group lets nothing through; disabled, the port is not filtered and carries no group. New ports
default to enabled. A port that exists already and carries no group was unfiltered until now
(ports made before 0011 carry none): it gets port security disabled, so that it keeps working
as before; a port carrying groups keeps them, enabled.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"


def upgrade() -> None:
    with op.batch_alter_table("ports", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("port_security_enabled", sa.Boolean(), server_default=sa.true(), nullable=False)
        )
    op.execute(
        "UPDATE ports SET port_security_enabled = false"
        " WHERE id NOT IN (SELECT port_id FROM security_group_port_bindings)"
    )


def downgrade() -> None:
    with op.batch_alter_table("ports", schema=None) as batch_op:
        batch_op.drop_column("port_security_enabled")
