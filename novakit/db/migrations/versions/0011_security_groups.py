"""security_groups, security_group_rules, security_group_port_bindings (API database)

Neutron's security groups: a project's named sets of allow rules, and which ports carry which
groups. The bindings live beside the ports (the API database); a port's delete takes its
bindings with it, a group a port carries cannot be deleted. A project's ``default`` group is
made on first use (``novakit.network.security_groups``), not here.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def _times() -> list[sa.Column]:
    return [sa.Column("created_at", sa.DateTime(), nullable=False), sa.Column("updated_at", sa.DateTime())]


def upgrade() -> None:
    op.create_table(
        "security_groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=True),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        *_times(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_security_groups")),
        sa.UniqueConstraint("project_id", "name", name=op.f("uq_security_groups_project_id_name")),
        sa.UniqueConstraint("uuid", name=op.f("uq_security_groups_uuid")),
    )
    op.create_table(
        "security_group_rules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("security_group_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("direction", sa.String(length=16), nullable=False),
        sa.Column("ethertype", sa.String(length=8), nullable=False),
        sa.Column("protocol", sa.String(length=40), nullable=True),
        sa.Column("port_range_min", sa.Integer(), nullable=True),
        sa.Column("port_range_max", sa.Integer(), nullable=True),
        sa.Column("remote_ip_prefix", sa.String(length=64), nullable=True),
        sa.Column("remote_group_id", sa.Integer(), nullable=True),
        sa.Column("description", sa.String(length=255), nullable=True),
        sa.Column("fingerprint", sa.String(length=255), nullable=False),
        *_times(),
        sa.ForeignKeyConstraint(
            ["security_group_id"],
            ["security_groups.id"],
            name=op.f("fk_security_group_rules_security_group_id_security_groups"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["remote_group_id"],
            ["security_groups.id"],
            name=op.f("fk_security_group_rules_remote_group_id_security_groups"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_security_group_rules")),
        sa.UniqueConstraint(
            "security_group_id",
            "fingerprint",
            name=op.f("uq_security_group_rules_security_group_id_fingerprint"),
        ),
        sa.UniqueConstraint("uuid", name=op.f("uq_security_group_rules_uuid")),
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
        sa.ForeignKeyConstraint(
            ["port_id"],
            ["ports.id"],
            name=op.f("fk_security_group_port_bindings_port_id_ports"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["security_group_id"],
            ["security_groups.id"],
            name=op.f("fk_security_group_port_bindings_security_group_id_security_groups"),
        ),
        sa.PrimaryKeyConstraint("port_id", "security_group_id", name=op.f("pk_security_group_port_bindings")),
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
