"""What the migrations of both trees (``migrations/``, ``cell_migrations/``) write again and again.

A migration is history: the schema it made must never change afterwards, so nothing here may
be edited to change a table; a later change is a new revision, and a new shape is a new
function. Every function returns new objects (a ``Column`` belongs to the one table it is
given to). Constraint names are the ones ``models.NAMING`` gives, spelled out here so that a
later change to that convention cannot rename what a migration made.

The four cell tables stand here whole: the API tree's 0001 and the cell tree's c0001 create
the same tables (c0001 with the columns 0004 and 0005 added since, where the models put them).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op


def uuid_column(name: str = "uuid") -> sa.Column[Any]:
    return sa.Column(name, sa.String(length=36), nullable=False)


def timestamps(*, soft_delete: bool = False) -> list[sa.Column[Any]]:
    """``created_at``, ``updated_at``; with ``soft_delete``, ``deleted_at`` and ``deleted`` (0 while
    the row lives, its id once deleted, so that unique constraints hold among live rows only)."""
    columns: list[sa.Column[Any]] = [
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime()),
    ]
    if soft_delete:
        columns += [
            sa.Column("deleted_at", sa.DateTime()),
            sa.Column("deleted", sa.Integer(), server_default="0", nullable=False),
        ]
    return columns


def primary_key(table: str, *columns: str) -> sa.PrimaryKeyConstraint:
    return sa.PrimaryKeyConstraint(*columns, name=op.f(f"pk_{table}"))


def create_table_with_id(name: str, *items: sa.schema.SchemaItem) -> None:
    """``op.create_table`` of a table keyed by an integer ``id``, its first column (every table but
    the link tables). The key is declared last, but a table's DDL names its primary key first
    whatever the order it was declared in."""
    op.create_table(name, sa.Column("id", sa.Integer(), nullable=False), *items, primary_key(name, "id"))


def unique(table: str, *columns: str) -> sa.UniqueConstraint:
    return sa.UniqueConstraint(*columns, name=op.f(f"uq_{table}_{'_'.join(columns)}"))


def foreign_key(
    table: str, column: str, referred: str, *, ondelete: str | None = None
) -> sa.ForeignKeyConstraint:
    """``table.column`` refers to ``referred`` (``"other_table.column"``)."""
    referred_table = referred.split(".")[0]
    return sa.ForeignKeyConstraint(
        [column], [referred], name=op.f(f"fk_{table}_{column}_{referred_table}"), ondelete=ondelete
    )


def add_cell_column(table: str, column: sa.Column[Any]) -> None:
    """Add a column to a cell table unless the other tree has added it already: the API database
    carries both trees and keeps its own copy of the cell tables (``novakit.db.migration``)."""
    if column.name not in {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(column)


# --- the cell tables --------------------------------------------------------------------------


def create_instance_actions() -> None:
    create_table_with_id(
        "instance_actions",
        sa.Column("action", sa.String(length=255), nullable=False),
        uuid_column("instance_uuid"),
        sa.Column("request_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255)),
        sa.Column("project_id", sa.String(length=255)),
        sa.Column("start_time", sa.DateTime(), nullable=False),
        sa.Column("finish_time", sa.DateTime()),
        sa.Column("message", sa.String(length=255)),
        *timestamps(soft_delete=True),
        unique("instance_actions", "instance_uuid", "request_id", "action"),
    )
    with op.batch_alter_table("instance_actions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_instance_actions_instance_uuid_request_id", ["instance_uuid", "request_id"], unique=False
        )


def create_instance_faults() -> None:
    create_table_with_id(
        "instance_faults",
        uuid_column("instance_uuid"),
        sa.Column("code", sa.Integer(), nullable=False),
        sa.Column("message", sa.String(length=255), nullable=False),
        sa.Column("details", sa.Text()),
        sa.Column("host", sa.String(length=255)),
        *timestamps(soft_delete=True),
    )
    with op.batch_alter_table("instance_faults", schema=None) as batch_op:
        batch_op.create_index("ix_instance_faults_instance_uuid", ["instance_uuid"], unique=False)


def create_instances(*, since_0005: bool) -> None:
    """``instances`` as 0001 made it; ``since_0005``: with the columns 0004 (``task_owner``,
    ``task_lease_until``) and 0005 (``admin_password_hash``) added, where c0001 puts them."""
    task_columns: list[sa.Column[Any]] = [
        sa.Column("task_owner", sa.String(length=255)),
        sa.Column("task_lease_until", sa.DateTime()),
    ]
    password_columns: list[sa.Column[Any]] = [sa.Column("admin_password_hash", sa.String(length=255))]
    create_table_with_id(
        "instances",
        uuid_column(),
        sa.Column("display_name", sa.String(length=255), nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("project_id", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255)),
        sa.Column("node", sa.String(length=255)),
        sa.Column("availability_zone", sa.String(length=255)),
        sa.Column("reservation_id", sa.String(length=255)),
        sa.Column("launch_index", sa.Integer(), nullable=False),
        sa.Column("flavor", sa.JSON(), nullable=False),
        sa.Column("instance_type_id", sa.Integer()),
        sa.Column("vcpus", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.Integer(), nullable=False),
        sa.Column("root_gb", sa.Integer(), nullable=False),
        sa.Column("ephemeral_gb", sa.Integer(), nullable=False),
        sa.Column("image_ref", sa.String(length=255)),
        sa.Column("vm_state", sa.String(length=255), nullable=False),
        sa.Column("task_state", sa.String(length=255)),
        *(task_columns if since_0005 else []),
        sa.Column("power_state", sa.Integer(), nullable=False),
        sa.Column("locked", sa.Boolean(), nullable=False),
        sa.Column("locked_by", sa.String(length=255)),
        sa.Column("locked_reason", sa.String(length=255)),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("user_data", sa.Text()),
        *(password_columns if since_0005 else []),
        sa.Column("config_drive", sa.Boolean(), nullable=False),
        sa.Column("key_name", sa.String(length=255)),
        sa.Column("addresses", sa.JSON(), nullable=False),
        sa.Column("networks", sa.JSON(), nullable=False),
        sa.Column("launched_at", sa.DateTime()),
        sa.Column("terminated_at", sa.DateTime()),
        sa.Column("scheduled_at", sa.DateTime()),
        *timestamps(soft_delete=True),
        unique("instances", "project_id", "display_name", "deleted"),
        unique("instances", "uuid"),
    )
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_index("ix_instances_host_deleted", ["host", "deleted"], unique=False)
        batch_op.create_index("ix_instances_project_deleted", ["project_id", "deleted"], unique=False)
        batch_op.create_index("ix_instances_vm_state", ["vm_state"], unique=False)


def create_instance_actions_events() -> None:
    create_table_with_id(
        "instance_actions_events",
        sa.Column("event", sa.String(length=255), nullable=False),
        sa.Column("action_id", sa.Integer(), nullable=False),
        sa.Column("start_time", sa.DateTime(), nullable=False),
        sa.Column("finish_time", sa.DateTime()),
        sa.Column("result", sa.String(length=255)),
        sa.Column("traceback", sa.Text()),
        sa.Column("host", sa.String(length=255)),
        sa.Column("details", sa.Text()),
        *timestamps(soft_delete=True),
        foreign_key("instance_actions_events", "action_id", "instance_actions.id"),
    )
    with op.batch_alter_table("instance_actions_events", schema=None) as batch_op:
        batch_op.create_index("ix_instance_actions_events_action_id", ["action_id"], unique=False)
