"""initial schema"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from novakit.db.migration_parts import (
    create_instance_actions,
    create_instance_actions_events,
    create_instance_faults,
    create_instances,
    create_table_with_id,
    foreign_key,
    primary_key,
    timestamps,
    unique,
    uuid_column,
)

revision = "0001"
down_revision = None


def upgrade() -> None:
    create_table_with_id(
        "compute_nodes",
        uuid_column(),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("hypervisor_hostname", sa.String(length=255), nullable=False),
        sa.Column("hypervisor_type", sa.String(length=255), nullable=False),
        sa.Column("hypervisor_version", sa.Integer(), nullable=False),
        sa.Column("cpu_arch", sa.String(length=32), nullable=False),
        sa.Column("cpu_info", sa.JSON(), nullable=False),
        sa.Column("vcpus", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.Integer(), nullable=False),
        sa.Column("local_gb", sa.Integer(), nullable=False),
        sa.Column("cpu_allocation_ratio", sa.Float(), nullable=False),
        sa.Column("ram_allocation_ratio", sa.Float(), nullable=False),
        sa.Column("disk_allocation_ratio", sa.Float(), nullable=False),
        sa.Column("reserved_host_memory_mb", sa.Integer(), nullable=False),
        sa.Column("reserved_host_cpus", sa.Integer(), nullable=False),
        sa.Column("reserved_host_disk_mb", sa.Integer(), nullable=False),
        sa.Column("cached_images", sa.JSON(), nullable=False),
        sa.Column("driver", sa.JSON(), nullable=False),
        sa.Column("stats", sa.JSON(), nullable=False),
        *timestamps(soft_delete=True),
        unique("compute_nodes", "host", "hypervisor_hostname", "deleted"),
    )
    create_table_with_id(
        "flavors",
        sa.Column("flavorid", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("vcpus", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.Integer(), nullable=False),
        sa.Column("root_gb", sa.Integer(), nullable=False),
        sa.Column("ephemeral_gb", sa.Integer(), nullable=False),
        sa.Column("swap", sa.Integer(), nullable=False),
        sa.Column("extra_specs", sa.JSON(), nullable=False),
        sa.Column("is_public", sa.Boolean(), nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column("description", sa.Text()),
        *timestamps(),
        unique("flavors", "flavorid"),
        unique("flavors", "name"),
    )
    create_table_with_id(
        "images",
        uuid_column(),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("disk_format", sa.String(length=32), nullable=False),
        sa.Column("container_format", sa.String(length=32), nullable=False),
        sa.Column("checksum", sa.String(length=64)),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("location", sa.Text(), nullable=False),
        sa.Column("min_disk", sa.Integer(), nullable=False),
        sa.Column("min_ram", sa.Integer(), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("project_id", sa.String(length=255)),
        sa.Column("visibility", sa.String(length=32), nullable=False),
        *timestamps(),
        unique("images", "uuid"),
    )
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.create_index("ix_images_name", ["name"], unique=False)

    create_instance_actions()
    create_instance_faults()
    create_table_with_id(
        "instance_groups",
        uuid_column(),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("policy", sa.String(length=255), nullable=False),
        sa.Column("rules", sa.JSON(), nullable=False),
        *timestamps(soft_delete=True),
        unique("instance_groups", "uuid"),
    )
    create_instances(since_0005=False)
    create_table_with_id(
        "placement_aggregates",
        uuid_column(),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("availability_zone", sa.String(length=255)),
        sa.Column("metadata", sa.JSON(), nullable=False),
        unique("placement_aggregates", "name"),
        unique("placement_aggregates", "uuid"),
    )
    create_table_with_id(
        "quotas",
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("resource", sa.String(length=255), nullable=False),
        sa.Column("hard_limit", sa.Integer(), nullable=False),
        *timestamps(),
        unique("quotas", "project_id", "resource"),
    )
    create_table_with_id(
        "request_specs",
        uuid_column("instance_uuid"),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("alternates", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("tried_hosts", sa.JSON(), nullable=False),
        unique("request_specs", "instance_uuid"),
    )
    create_table_with_id(
        "resource_providers",
        uuid_column(),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        *timestamps(),
        unique("resource_providers", "name"),
        unique("resource_providers", "uuid"),
    )
    create_table_with_id(
        "services",
        uuid_column(),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("binary", sa.String(length=255), nullable=False),
        sa.Column("topic", sa.String(length=255)),
        sa.Column("report_count", sa.Integer(), nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_reason", sa.String(length=255)),
        sa.Column("last_seen_up", sa.DateTime()),
        sa.Column("forced_down", sa.Boolean(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        *timestamps(soft_delete=True),
        unique("services", "host", "binary", "deleted"),
    )
    create_table_with_id(
        "traits",
        sa.Column("name", sa.String(length=255), nullable=False),
        unique("traits", "name"),
    )
    create_table_with_id(
        "allocations",
        sa.Column("resource_provider_id", sa.Integer(), nullable=False),
        uuid_column("consumer_id"),
        sa.Column("resource_class", sa.String(length=255), nullable=False),
        sa.Column("used", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255)),
        sa.Column("user_id", sa.String(length=255)),
        *timestamps(),
        foreign_key("allocations", "resource_provider_id", "resource_providers.id", ondelete="CASCADE"),
    )
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.create_index("ix_allocations_consumer", ["consumer_id"], unique=False)
        batch_op.create_index(
            "ix_allocations_rp_rc", ["resource_provider_id", "resource_class"], unique=False
        )

    create_instance_actions_events()
    create_table_with_id(
        "instance_group_member",
        sa.Column("group_id", sa.Integer(), nullable=False),
        uuid_column("instance_uuid"),
        *timestamps(),
        foreign_key("instance_group_member", "group_id", "instance_groups.id"),
        unique("instance_group_member", "group_id", "instance_uuid"),
    )
    with op.batch_alter_table("instance_group_member", schema=None) as batch_op:
        batch_op.create_index("ix_igm_instance", ["instance_uuid"], unique=False)

    create_table_with_id(
        "inventories",
        sa.Column("resource_provider_id", sa.Integer(), nullable=False),
        sa.Column("resource_class", sa.String(length=255), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("reserved", sa.Integer(), nullable=False),
        sa.Column("min_unit", sa.Integer(), nullable=False),
        sa.Column("max_unit", sa.Integer(), nullable=False),
        sa.Column("step_size", sa.Integer(), nullable=False),
        sa.Column("allocation_ratio", sa.Float(), nullable=False),
        *timestamps(),
        foreign_key("inventories", "resource_provider_id", "resource_providers.id", ondelete="CASCADE"),
        unique("inventories", "resource_provider_id", "resource_class"),
    )
    with op.batch_alter_table("inventories", schema=None) as batch_op:
        batch_op.create_index(
            "ix_inventories_rc_rp", ["resource_class", "resource_provider_id"], unique=False
        )

    op.create_table(
        "resource_provider_aggregates",
        sa.Column("resource_provider_id", sa.Integer(), nullable=False),
        sa.Column("aggregate_id", sa.Integer(), nullable=False),
        foreign_key(
            "resource_provider_aggregates", "aggregate_id", "placement_aggregates.id", ondelete="CASCADE"
        ),
        foreign_key(
            "resource_provider_aggregates",
            "resource_provider_id",
            "resource_providers.id",
            ondelete="CASCADE",
        ),
        primary_key("resource_provider_aggregates", "resource_provider_id", "aggregate_id"),
    )
    op.create_table(
        "resource_provider_traits",
        sa.Column("resource_provider_id", sa.Integer(), nullable=False),
        sa.Column("trait_id", sa.Integer(), nullable=False),
        foreign_key(
            "resource_provider_traits", "resource_provider_id", "resource_providers.id", ondelete="CASCADE"
        ),
        foreign_key("resource_provider_traits", "trait_id", "traits.id", ondelete="CASCADE"),
        primary_key("resource_provider_traits", "resource_provider_id", "trait_id"),
    )


def downgrade() -> None:
    # A table's indexes go with it.
    for table in (
        "resource_provider_traits",
        "resource_provider_aggregates",
        "inventories",
        "instance_group_member",
        "instance_actions_events",
        "allocations",
        "traits",
        "services",
        "resource_providers",
        "request_specs",
        "quotas",
        "placement_aggregates",
        "instances",
        "instance_groups",
        "instance_faults",
        "instance_actions",
        "images",
        "flavors",
        "compute_nodes",
    ):
        op.drop_table(table)
