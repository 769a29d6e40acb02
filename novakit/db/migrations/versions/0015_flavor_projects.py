"""flavor_projects: the projects given access to a private flavor (API database)

Nova's flavor access (``os-flavor-access``): a private flavor (``flavors.is_public`` false) is
listed, shown and booted by the admins and by the projects named here only. A flavor's rows
go with it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from novakit.db.migration_parts import create_table_with_id, foreign_key, timestamps, unique

revision = "0015"
down_revision = "0014"


def upgrade() -> None:
    create_table_with_id(
        "flavor_projects",
        sa.Column("flavor_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        *timestamps(),
        foreign_key("flavor_projects", "flavor_id", "flavors.id", ondelete="CASCADE"),
        unique("flavor_projects", "flavor_id", "project_id"),
    )


def downgrade() -> None:
    op.drop_table("flavor_projects")
