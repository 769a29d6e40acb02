"""identity_users, identity_projects, identity_roles, identity_role_assignments,
identity_revoked_tokens, identity_endpoints (API database)

The service path's identity (a Keystone v3 subset, ``novakit.identity``): users with argon2
password hashes and the times their password last changed and they were last disabled, projects, global roles, a user's
roles on a project, revoked tokens by audit id, and the service catalog's endpoints. Nothing
here holds a password or a token. ``novakit identity bootstrap`` fills the tables, not this.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from novakit.db.migration_parts import create_table_with_id, foreign_key, primary_key, timestamps, unique

revision = "0013"
down_revision = "0012"


def _keystone_id() -> sa.Column[str]:
    return sa.Column("uuid", sa.String(length=64), nullable=False)


def upgrade() -> None:
    create_table_with_id(
        "identity_users",
        _keystone_id(),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("domain_id", sa.String(length=64), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("password_hash", sa.String(length=255)),
        sa.Column("password_changed_at", sa.DateTime()),
        sa.Column("tokens_revoked_at", sa.DateTime()),
        *timestamps(),
        unique("identity_users", "domain_id", "name"),
        unique("identity_users", "uuid"),
    )
    create_table_with_id(
        "identity_projects",
        _keystone_id(),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("domain_id", sa.String(length=64), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("description", sa.Text()),
        *timestamps(),
        unique("identity_projects", "domain_id", "name"),
        unique("identity_projects", "uuid"),
    )
    create_table_with_id(
        "identity_roles",
        _keystone_id(),
        sa.Column("name", sa.String(length=255), nullable=False),
        *timestamps(),
        unique("identity_roles", "name"),
        unique("identity_roles", "uuid"),
    )
    op.create_table(
        "identity_role_assignments",
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("role_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        foreign_key("identity_role_assignments", "user_id", "identity_users.id", ondelete="CASCADE"),
        foreign_key("identity_role_assignments", "project_id", "identity_projects.id", ondelete="CASCADE"),
        foreign_key("identity_role_assignments", "role_id", "identity_roles.id", ondelete="CASCADE"),
        primary_key("identity_role_assignments", "user_id", "project_id", "role_id"),
    )
    op.create_index(
        "ix_identity_role_assignments_project_id", "identity_role_assignments", ["project_id"], unique=False
    )
    op.create_index(
        "ix_identity_role_assignments_role_id", "identity_role_assignments", ["role_id"], unique=False
    )
    op.create_table(
        "identity_revoked_tokens",
        sa.Column("audit_id", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("revoked_at", sa.DateTime(), nullable=False),
        primary_key("identity_revoked_tokens", "audit_id"),
    )
    op.create_index(
        "ix_identity_revoked_tokens_expires_at", "identity_revoked_tokens", ["expires_at"], unique=False
    )
    create_table_with_id(
        "identity_endpoints",
        _keystone_id(),
        sa.Column("service_id", sa.String(length=64), nullable=False),
        sa.Column("service_type", sa.String(length=255), nullable=False),
        sa.Column("service_name", sa.String(length=255), nullable=False),
        sa.Column("interface", sa.String(length=16), nullable=False),
        sa.Column("region_id", sa.String(length=255), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        *timestamps(),
        unique("identity_endpoints", "service_type", "interface", "region_id"),
        unique("identity_endpoints", "uuid"),
    )


def downgrade() -> None:
    op.drop_table("identity_endpoints")
    op.drop_table("identity_revoked_tokens")
    op.drop_table("identity_role_assignments")
    op.drop_table("identity_roles")
    op.drop_table("identity_projects")
    op.drop_table("identity_users")
