"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 10:19:48.459444
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "compute_nodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
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
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("deleted", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_compute_nodes")),
        sa.UniqueConstraint(
            "host",
            "hypervisor_hostname",
            "deleted",
            name=op.f("uq_compute_nodes_host_hypervisor_hostname_deleted"),
        ),
    )
    op.create_table(
        "flavors",
        sa.Column("id", sa.Integer(), nullable=False),
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
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_flavors")),
        sa.UniqueConstraint("flavorid", name=op.f("uq_flavors_flavorid")),
        sa.UniqueConstraint("name", name=op.f("uq_flavors_name")),
    )
    op.create_table(
        "images",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("disk_format", sa.String(length=32), nullable=False),
        sa.Column("container_format", sa.String(length=32), nullable=False),
        sa.Column("checksum", sa.String(length=64), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("location", sa.Text(), nullable=False),
        sa.Column("min_disk", sa.Integer(), nullable=False),
        sa.Column("min_ram", sa.Integer(), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=True),
        sa.Column("visibility", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_images")),
        sa.UniqueConstraint("uuid", name=op.f("uq_images_uuid")),
    )
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.create_index("ix_images_name", ["name"], unique=False)

    op.create_table(
        "instance_actions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=255), nullable=False),
        sa.Column("instance_uuid", sa.String(length=36), nullable=False),
        sa.Column("request_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=True),
        sa.Column("project_id", sa.String(length=255), nullable=True),
        sa.Column("start_time", sa.DateTime(), nullable=False),
        sa.Column("finish_time", sa.DateTime(), nullable=True),
        sa.Column("message", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("deleted", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instance_actions")),
        sa.UniqueConstraint(
            "instance_uuid",
            "request_id",
            "action",
            name=op.f("uq_instance_actions_instance_uuid_request_id_action"),
        ),
    )
    with op.batch_alter_table("instance_actions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_instance_actions_instance_uuid_request_id", ["instance_uuid", "request_id"], unique=False
        )

    op.create_table(
        "instance_faults",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("instance_uuid", sa.String(length=36), nullable=False),
        sa.Column("code", sa.Integer(), nullable=False),
        sa.Column("message", sa.String(length=255), nullable=False),
        sa.Column("details", sa.Text(), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("deleted", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instance_faults")),
    )
    with op.batch_alter_table("instance_faults", schema=None) as batch_op:
        batch_op.create_index("ix_instance_faults_instance_uuid", ["instance_uuid"], unique=False)

    op.create_table(
        "instance_groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("policy", sa.String(length=255), nullable=False),
        sa.Column("rules", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("deleted", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instance_groups")),
        sa.UniqueConstraint("uuid", name=op.f("uq_instance_groups_uuid")),
    )
    op.create_table(
        "instances",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("display_name", sa.String(length=255), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("node", sa.String(length=255), nullable=True),
        sa.Column("availability_zone", sa.String(length=255), nullable=True),
        sa.Column("reservation_id", sa.String(length=255), nullable=True),
        sa.Column("launch_index", sa.Integer(), nullable=False),
        sa.Column("flavor", sa.JSON(), nullable=False),
        sa.Column("instance_type_id", sa.Integer(), nullable=True),
        sa.Column("vcpus", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.Integer(), nullable=False),
        sa.Column("root_gb", sa.Integer(), nullable=False),
        sa.Column("ephemeral_gb", sa.Integer(), nullable=False),
        sa.Column("image_ref", sa.String(length=255), nullable=True),
        sa.Column("vm_state", sa.String(length=255), nullable=False),
        sa.Column("task_state", sa.String(length=255), nullable=True),
        sa.Column("power_state", sa.Integer(), nullable=False),
        sa.Column("locked", sa.Boolean(), nullable=False),
        sa.Column("locked_by", sa.String(length=255), nullable=True),
        sa.Column("locked_reason", sa.String(length=255), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("user_data", sa.Text(), nullable=True),
        sa.Column("config_drive", sa.Boolean(), nullable=False),
        sa.Column("key_name", sa.String(length=255), nullable=True),
        sa.Column("addresses", sa.JSON(), nullable=False),
        sa.Column("networks", sa.JSON(), nullable=False),
        sa.Column("launched_at", sa.DateTime(), nullable=True),
        sa.Column("terminated_at", sa.DateTime(), nullable=True),
        sa.Column("scheduled_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("deleted", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instances")),
        sa.UniqueConstraint(
            "project_id", "display_name", "deleted", name=op.f("uq_instances_project_id_display_name_deleted")
        ),
        sa.UniqueConstraint("uuid", name=op.f("uq_instances_uuid")),
    )
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_index("ix_instances_host_deleted", ["host", "deleted"], unique=False)
        batch_op.create_index("ix_instances_project_deleted", ["project_id", "deleted"], unique=False)
        batch_op.create_index("ix_instances_vm_state", ["vm_state"], unique=False)

    op.create_table(
        "placement_aggregates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("availability_zone", sa.String(length=255), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_placement_aggregates")),
        sa.UniqueConstraint("name", name=op.f("uq_placement_aggregates_name")),
        sa.UniqueConstraint("uuid", name=op.f("uq_placement_aggregates_uuid")),
    )
    op.create_table(
        "quotas",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("resource", sa.String(length=255), nullable=False),
        sa.Column("hard_limit", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_quotas")),
        sa.UniqueConstraint("project_id", "resource", name=op.f("uq_quotas_project_id_resource")),
    )
    op.create_table(
        "request_specs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("instance_uuid", sa.String(length=36), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("alternates", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("tried_hosts", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_request_specs")),
        sa.UniqueConstraint("instance_uuid", name=op.f("uq_request_specs_instance_uuid")),
    )
    op.create_table(
        "resource_providers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_resource_providers")),
        sa.UniqueConstraint("name", name=op.f("uq_resource_providers_name")),
        sa.UniqueConstraint("uuid", name=op.f("uq_resource_providers_uuid")),
    )
    op.create_table(
        "services",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("binary", sa.String(length=255), nullable=False),
        sa.Column("topic", sa.String(length=255), nullable=True),
        sa.Column("report_count", sa.Integer(), nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_reason", sa.String(length=255), nullable=True),
        sa.Column("last_seen_up", sa.DateTime(), nullable=True),
        sa.Column("forced_down", sa.Boolean(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("deleted", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_services")),
        sa.UniqueConstraint("host", "binary", "deleted", name=op.f("uq_services_host_binary_deleted")),
    )
    op.create_table(
        "traits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_traits")),
        sa.UniqueConstraint("name", name=op.f("uq_traits_name")),
    )
    op.create_table(
        "allocations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("resource_provider_id", sa.Integer(), nullable=False),
        sa.Column("consumer_id", sa.String(length=36), nullable=False),
        sa.Column("resource_class", sa.String(length=255), nullable=False),
        sa.Column("used", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=True),
        sa.Column("user_id", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["resource_provider_id"],
            ["resource_providers.id"],
            name=op.f("fk_allocations_resource_provider_id_resource_providers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_allocations")),
    )
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.create_index("ix_allocations_consumer", ["consumer_id"], unique=False)
        batch_op.create_index(
            "ix_allocations_rp_rc", ["resource_provider_id", "resource_class"], unique=False
        )

    op.create_table(
        "instance_actions_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("event", sa.String(length=255), nullable=False),
        sa.Column("action_id", sa.Integer(), nullable=False),
        sa.Column("start_time", sa.DateTime(), nullable=False),
        sa.Column("finish_time", sa.DateTime(), nullable=True),
        sa.Column("result", sa.String(length=255), nullable=True),
        sa.Column("traceback", sa.Text(), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("details", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("deleted", sa.Integer(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(
            ["action_id"],
            ["instance_actions.id"],
            name=op.f("fk_instance_actions_events_action_id_instance_actions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instance_actions_events")),
    )
    with op.batch_alter_table("instance_actions_events", schema=None) as batch_op:
        batch_op.create_index("ix_instance_actions_events_action_id", ["action_id"], unique=False)

    op.create_table(
        "instance_group_member",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("group_id", sa.Integer(), nullable=False),
        sa.Column("instance_uuid", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["instance_groups.id"],
            name=op.f("fk_instance_group_member_group_id_instance_groups"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instance_group_member")),
        sa.UniqueConstraint(
            "group_id", "instance_uuid", name=op.f("uq_instance_group_member_group_id_instance_uuid")
        ),
    )
    with op.batch_alter_table("instance_group_member", schema=None) as batch_op:
        batch_op.create_index("ix_igm_instance", ["instance_uuid"], unique=False)

    op.create_table(
        "inventories",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("resource_provider_id", sa.Integer(), nullable=False),
        sa.Column("resource_class", sa.String(length=255), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("reserved", sa.Integer(), nullable=False),
        sa.Column("min_unit", sa.Integer(), nullable=False),
        sa.Column("max_unit", sa.Integer(), nullable=False),
        sa.Column("step_size", sa.Integer(), nullable=False),
        sa.Column("allocation_ratio", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["resource_provider_id"],
            ["resource_providers.id"],
            name=op.f("fk_inventories_resource_provider_id_resource_providers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_inventories")),
        sa.UniqueConstraint(
            "resource_provider_id",
            "resource_class",
            name=op.f("uq_inventories_resource_provider_id_resource_class"),
        ),
    )
    with op.batch_alter_table("inventories", schema=None) as batch_op:
        batch_op.create_index(
            "ix_inventories_rc_rp", ["resource_class", "resource_provider_id"], unique=False
        )

    op.create_table(
        "resource_provider_aggregates",
        sa.Column("resource_provider_id", sa.Integer(), nullable=False),
        sa.Column("aggregate_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["aggregate_id"],
            ["placement_aggregates.id"],
            name=op.f("fk_resource_provider_aggregates_aggregate_id_placement_aggregates"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["resource_provider_id"],
            ["resource_providers.id"],
            name=op.f("fk_resource_provider_aggregates_resource_provider_id_resource_providers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "resource_provider_id", "aggregate_id", name=op.f("pk_resource_provider_aggregates")
        ),
    )
    op.create_table(
        "resource_provider_traits",
        sa.Column("resource_provider_id", sa.Integer(), nullable=False),
        sa.Column("trait_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["resource_provider_id"],
            ["resource_providers.id"],
            name=op.f("fk_resource_provider_traits_resource_provider_id_resource_providers"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["trait_id"],
            ["traits.id"],
            name=op.f("fk_resource_provider_traits_trait_id_traits"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("resource_provider_id", "trait_id", name=op.f("pk_resource_provider_traits")),
    )


def downgrade() -> None:
    op.drop_table("resource_provider_traits")
    op.drop_table("resource_provider_aggregates")
    with op.batch_alter_table("inventories", schema=None) as batch_op:
        batch_op.drop_index("ix_inventories_rc_rp")

    op.drop_table("inventories")
    with op.batch_alter_table("instance_group_member", schema=None) as batch_op:
        batch_op.drop_index("ix_igm_instance")

    op.drop_table("instance_group_member")
    with op.batch_alter_table("instance_actions_events", schema=None) as batch_op:
        batch_op.drop_index("ix_instance_actions_events_action_id")

    op.drop_table("instance_actions_events")
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.drop_index("ix_allocations_rp_rc")
        batch_op.drop_index("ix_allocations_consumer")

    op.drop_table("allocations")
    op.drop_table("traits")
    op.drop_table("services")
    op.drop_table("resource_providers")
    op.drop_table("request_specs")
    op.drop_table("quotas")
    op.drop_table("placement_aggregates")
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_index("ix_instances_vm_state")
        batch_op.drop_index("ix_instances_project_deleted")
        batch_op.drop_index("ix_instances_host_deleted")

    op.drop_table("instances")
    op.drop_table("instance_groups")
    with op.batch_alter_table("instance_faults", schema=None) as batch_op:
        batch_op.drop_index("ix_instance_faults_instance_uuid")

    op.drop_table("instance_faults")
    with op.batch_alter_table("instance_actions", schema=None) as batch_op:
        batch_op.drop_index("ix_instance_actions_instance_uuid_request_id")

    op.drop_table("instance_actions")
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.drop_index("ix_images_name")

    op.drop_table("images")
    op.drop_table("flavors")
    op.drop_table("compute_nodes")
