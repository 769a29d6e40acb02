"""a cell's database: instances and their audit trail

The four cell tables as they stand at the API tree's revision 0006. A database
that already holds them (the API database that is also cell1: the embedded
default, a database made before cells) keeps them and is only stamped.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from novakit.db.migration_parts import (
    create_instance_actions,
    create_instance_actions_events,
    create_instance_faults,
    create_instances,
)

revision = "c0001"
down_revision = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("instances"):
        return
    create_instance_actions()
    create_instance_faults()
    create_instances(since_0005=True)
    create_instance_actions_events()


def downgrade() -> None:
    for table in ("instance_actions_events", "instance_actions", "instance_faults", "instances"):
        op.drop_table(table)
