"""networks, subnets, ports, fixed IPs, volumes and their attachments (API database)

Neutron's and Cinder's share of a boot: a port's MAC and fixed IPs are chosen before the
server is scheduled and kept for its life; a volume lives in one host's storage pool and
outlives the servers it is attached to. ``compute_nodes.networks`` holds the networks a
host reported (None: every network).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _times() -> list[sa.Column]:
    return [sa.Column("created_at", sa.DateTime(), nullable=False), sa.Column("updated_at", sa.DateTime())]


def upgrade() -> None:
    with op.batch_alter_table("compute_nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("networks", sa.JSON(), nullable=True))
    op.create_table(
        "networks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=True),
        sa.Column("shared", sa.Boolean(), nullable=False),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("source", sa.String(length=255), nullable=False),
        sa.Column("mtu", sa.Integer(), nullable=True),
        *_times(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_networks")),
        sa.UniqueConstraint("name", name=op.f("uq_networks_name")),
        sa.UniqueConstraint("uuid", name=op.f("uq_networks_uuid")),
    )
    op.create_index(
        "uq_networks_is_default",
        "networks",
        ["is_default"],
        unique=True,
        sqlite_where=sa.text("is_default"),
        postgresql_where=sa.text("is_default"),
    )
    op.create_table(
        "subnets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("network_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=True),
        sa.Column("ip_version", sa.Integer(), nullable=False),
        sa.Column("cidr", sa.String(length=64), nullable=False),
        sa.Column("gateway_ip", sa.String(length=64), nullable=True),
        sa.Column("dns_nameservers", sa.JSON(), nullable=False),
        sa.Column("allocation_pools", sa.JSON(), nullable=False),
        sa.Column("enable_dhcp", sa.Boolean(), nullable=False),
        *_times(),
        sa.ForeignKeyConstraint(
            ["network_id"], ["networks.id"], name=op.f("fk_subnets_network_id_networks"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_subnets")),
        sa.UniqueConstraint("name", name=op.f("uq_subnets_name")),
        sa.UniqueConstraint("uuid", name=op.f("uq_subnets_uuid")),
    )
    op.create_index("ix_subnets_network_id", "subnets", ["network_id"], unique=False)
    op.create_table(
        "ports",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=True),
        sa.Column("network_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=True),
        sa.Column("mac_address", sa.String(length=17), nullable=False),
        sa.Column("device_id", sa.String(length=36), nullable=True),
        sa.Column("device_owner", sa.String(length=255), nullable=True),
        sa.Column("binding_host", sa.String(length=255), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("preserve_on_delete", sa.Boolean(), nullable=False),
        *_times(),
        sa.ForeignKeyConstraint(["network_id"], ["networks.id"], name=op.f("fk_ports_network_id_networks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ports")),
        sa.UniqueConstraint("mac_address", name=op.f("uq_ports_mac_address")),
        sa.UniqueConstraint("uuid", name=op.f("uq_ports_uuid")),
    )
    op.create_index("ix_ports_device_id", "ports", ["device_id"], unique=False)
    op.create_index("ix_ports_network_id", "ports", ["network_id"], unique=False)
    op.create_table(
        "ip_allocations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("port_id", sa.Integer(), nullable=False),
        sa.Column("subnet_id", sa.Integer(), nullable=False),
        sa.Column("network_id", sa.Integer(), nullable=False),
        sa.Column("ip_address", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["network_id"], ["networks.id"], name=op.f("fk_ip_allocations_network_id_networks")
        ),
        sa.ForeignKeyConstraint(
            ["port_id"], ["ports.id"], name=op.f("fk_ip_allocations_port_id_ports"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["subnet_id"], ["subnets.id"], name=op.f("fk_ip_allocations_subnet_id_subnets")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ip_allocations")),
        sa.UniqueConstraint("network_id", "ip_address", name=op.f("uq_ip_allocations_network_id_ip_address")),
    )
    op.create_index("ix_ip_allocations_port_id", "ip_allocations", ["port_id"], unique=False)
    op.create_index("ix_ip_allocations_subnet_id", "ip_allocations", ["subnet_id"], unique=False)
    op.create_table(
        "volumes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=True),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=True),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("pool", sa.String(length=255), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("image_id", sa.String(length=36), nullable=True),
        sa.Column("bootable", sa.Boolean(), nullable=False),
        sa.Column("status_reason", sa.String(length=255), nullable=True),
        *_times(),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("deleted", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_volumes")),
        sa.UniqueConstraint("project_id", "name", "deleted", name=op.f("uq_volumes_project_id_name_deleted")),
        sa.UniqueConstraint("uuid", name=op.f("uq_volumes_uuid")),
    )
    op.create_index("ix_volumes_host", "volumes", ["host"], unique=False)
    op.create_table(
        "volume_attachments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("volume_id", sa.Integer(), nullable=False),
        sa.Column("instance_uuid", sa.String(length=36), nullable=False),
        sa.Column("device_name", sa.String(length=32), nullable=False),
        sa.Column("boot_index", sa.Integer(), nullable=True),
        sa.Column("delete_on_termination", sa.Boolean(), nullable=False),
        sa.Column("attach_status", sa.String(length=32), nullable=False),
        *_times(),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("deleted", sa.Integer(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(
            ["volume_id"], ["volumes.id"], name=op.f("fk_volume_attachments_volume_id_volumes")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_volume_attachments")),
        sa.UniqueConstraint(
            "instance_uuid",
            "device_name",
            "deleted",
            name=op.f("uq_volume_attachments_instance_uuid_device_name_deleted"),
        ),
        sa.UniqueConstraint("uuid", name=op.f("uq_volume_attachments_uuid")),
        sa.UniqueConstraint("volume_id", "deleted", name=op.f("uq_volume_attachments_volume_id_deleted")),
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
