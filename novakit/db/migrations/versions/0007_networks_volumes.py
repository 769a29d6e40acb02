"""networks, subnets, ports, fixed IPs, volumes and their attachments (API database)

Neutron's and Cinder's share of a boot: a port's MAC and fixed IPs are chosen before the
server is scheduled and kept for its life; a volume lives in one host's storage pool and
outlives the servers it is attached to. ``compute_nodes.networks`` holds the networks a
host reported (None: every network).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from novakit.db.migration_parts import create_table_with_id, foreign_key, timestamps, unique, uuid_column

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    with op.batch_alter_table("compute_nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("networks", sa.JSON()))
    create_table_with_id(
        "networks",
        uuid_column(),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("project_id", sa.String(length=255)),
        sa.Column("shared", sa.Boolean(), nullable=False),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("source", sa.String(length=255), nullable=False),
        sa.Column("mtu", sa.Integer()),
        *timestamps(),
        unique("networks", "name"),
        unique("networks", "uuid"),
    )
    op.create_index(
        "uq_networks_is_default",
        "networks",
        ["is_default"],
        unique=True,
        sqlite_where=sa.text("is_default"),
        postgresql_where=sa.text("is_default"),
    )
    create_table_with_id(
        "subnets",
        uuid_column(),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("network_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255)),
        sa.Column("ip_version", sa.Integer(), nullable=False),
        sa.Column("cidr", sa.String(length=64), nullable=False),
        sa.Column("gateway_ip", sa.String(length=64)),
        sa.Column("dns_nameservers", sa.JSON(), nullable=False),
        sa.Column("allocation_pools", sa.JSON(), nullable=False),
        sa.Column("enable_dhcp", sa.Boolean(), nullable=False),
        *timestamps(),
        foreign_key("subnets", "network_id", "networks.id", ondelete="CASCADE"),
        unique("subnets", "name"),
        unique("subnets", "uuid"),
    )
    op.create_index("ix_subnets_network_id", "subnets", ["network_id"], unique=False)
    create_table_with_id(
        "ports",
        uuid_column(),
        sa.Column("name", sa.String(length=255)),
        sa.Column("network_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255)),
        sa.Column("mac_address", sa.String(length=17), nullable=False),
        sa.Column("device_id", sa.String(length=36)),
        sa.Column("device_owner", sa.String(length=255)),
        sa.Column("binding_host", sa.String(length=255)),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("preserve_on_delete", sa.Boolean(), nullable=False),
        *timestamps(),
        foreign_key("ports", "network_id", "networks.id"),
        unique("ports", "mac_address"),
        unique("ports", "uuid"),
    )
    op.create_index("ix_ports_device_id", "ports", ["device_id"], unique=False)
    op.create_index("ix_ports_network_id", "ports", ["network_id"], unique=False)
    create_table_with_id(
        "ip_allocations",
        sa.Column("port_id", sa.Integer(), nullable=False),
        sa.Column("subnet_id", sa.Integer(), nullable=False),
        sa.Column("network_id", sa.Integer(), nullable=False),
        sa.Column("ip_address", sa.String(length=64), nullable=False),
        foreign_key("ip_allocations", "network_id", "networks.id"),
        foreign_key("ip_allocations", "port_id", "ports.id", ondelete="CASCADE"),
        foreign_key("ip_allocations", "subnet_id", "subnets.id"),
        unique("ip_allocations", "network_id", "ip_address"),
    )
    op.create_index("ix_ip_allocations_port_id", "ip_allocations", ["port_id"], unique=False)
    op.create_index("ix_ip_allocations_subnet_id", "ip_allocations", ["subnet_id"], unique=False)
    create_table_with_id(
        "volumes",
        uuid_column(),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.String(length=255)),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255)),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("host", sa.String(length=255)),
        sa.Column("pool", sa.String(length=255), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("image_id", sa.String(length=36)),
        sa.Column("bootable", sa.Boolean(), nullable=False),
        sa.Column("status_reason", sa.String(length=255)),
        *timestamps(soft_delete=True),
        unique("volumes", "project_id", "name", "deleted"),
        unique("volumes", "uuid"),
    )
    op.create_index("ix_volumes_host", "volumes", ["host"], unique=False)
    create_table_with_id(
        "volume_attachments",
        uuid_column(),
        sa.Column("volume_id", sa.Integer(), nullable=False),
        uuid_column("instance_uuid"),
        sa.Column("device_name", sa.String(length=32), nullable=False),
        sa.Column("boot_index", sa.Integer()),
        sa.Column("delete_on_termination", sa.Boolean(), nullable=False),
        sa.Column("attach_status", sa.String(length=32), nullable=False),
        *timestamps(soft_delete=True),
        foreign_key("volume_attachments", "volume_id", "volumes.id"),
        unique("volume_attachments", "instance_uuid", "device_name", "deleted"),
        unique("volume_attachments", "uuid"),
        unique("volume_attachments", "volume_id", "deleted"),
    )
    op.create_index(
        "ix_volume_attachments_instance_uuid", "volume_attachments", ["instance_uuid"], unique=False
    )


def downgrade() -> None:
    op.drop_table("volume_attachments")
    op.drop_table("volumes")
    op.drop_table("ip_allocations")
    op.drop_table("ports")
    op.drop_table("subnets")
    op.drop_table("networks")
    with op.batch_alter_table("compute_nodes", schema=None) as batch_op:
        batch_op.drop_column("networks")
