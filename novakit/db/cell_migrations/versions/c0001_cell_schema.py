"""a cell's database: instances and their audit trail

The four cell tables as they stand at the API tree's revision 0006. A database
that already holds them (the API database that is also cell1: the embedded
default, a database made before cells) keeps them and is only stamped.

Revision ID: c0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("instances"):
        return
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
        sa.Column("task_owner", sa.String(length=255), nullable=True),
        sa.Column("task_lease_until", sa.DateTime(), nullable=True),
        sa.Column("power_state", sa.Integer(), nullable=False),
        sa.Column("locked", sa.Boolean(), nullable=False),
        sa.Column("locked_by", sa.String(length=255), nullable=True),
        sa.Column("locked_reason", sa.String(length=255), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("user_data", sa.Text(), nullable=True),
        sa.Column("admin_password_hash", sa.String(length=255), nullable=True),
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


def downgrade() -> None:
    for table in ("instance_actions_events", "instance_actions", "instance_faults", "instances"):
        op.drop_table(table)
