"""security_groups, security_group_rules, security_group_port_bindings (API database)

Neutron's security groups: a project's named sets of allow rules, and which ports carry which
groups. The bindings live beside the ports (the API database); a port's delete takes its
bindings with it, a group a port carries cannot be deleted. A project's ``default`` group is
made on first use (``novakit.network.security_groups``), not here.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from novakit.db.migration_parts import (
    create_table_with_id,
    foreign_key,
    primary_key,
    timestamps,
    unique,
    uuid_column,
)

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    create_table_with_id(
        "security_groups",
        uuid_column(),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.String(length=255)),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        *timestamps(),
        unique("security_groups", "project_id", "name"),
        unique("security_groups", "uuid"),
    )
    create_table_with_id(
        "security_group_rules",
        uuid_column(),
        sa.Column("security_group_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("direction", sa.String(length=16), nullable=False),
        sa.Column("ethertype", sa.String(length=8), nullable=False),
        sa.Column("protocol", sa.String(length=40)),
        sa.Column("port_range_min", sa.Integer()),
        sa.Column("port_range_max", sa.Integer()),
        sa.Column("remote_ip_prefix", sa.String(length=64)),
        sa.Column("remote_group_id", sa.Integer()),
        sa.Column("description", sa.String(length=255)),
        sa.Column("fingerprint", sa.String(length=255), nullable=False),
        *timestamps(),
        foreign_key("security_group_rules", "security_group_id", "security_groups.id", ondelete="CASCADE"),
        foreign_key("security_group_rules", "remote_group_id", "security_groups.id", ondelete="CASCADE"),
        unique("security_group_rules", "security_group_id", "fingerprint"),
        unique("security_group_rules", "uuid"),
    )
    op.create_index(
        "ix_security_group_rules_remote_group_id", "security_group_rules", ["remote_group_id"], unique=False
    )
    op.create_index(
        "ix_security_group_rules_project_id", "security_group_rules", ["project_id"], unique=False
    )
    op.create_table(
        "security_group_port_bindings",
        sa.Column("port_id", sa.Integer(), nullable=False),
        sa.Column("security_group_id", sa.Integer(), nullable=False),
        foreign_key("security_group_port_bindings", "port_id", "ports.id", ondelete="CASCADE"),
        foreign_key("security_group_port_bindings", "security_group_id", "security_groups.id"),
        primary_key("security_group_port_bindings", "port_id", "security_group_id"),
    )
    op.create_index(
        "ix_security_group_port_bindings_security_group_id",
        "security_group_port_bindings",
        ["security_group_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_table("security_group_port_bindings")
    op.drop_table("security_group_rules")
    op.drop_table("security_groups")
