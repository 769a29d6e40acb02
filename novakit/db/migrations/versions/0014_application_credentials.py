"""identity_application_credentials, identity_application_credential_roles (API database)

Keystone's application credentials (``novakit.identity.application_credentials``): a user's
delegation of some of its roles on one project to a job, proven by a secret kept only as an
argon2 hash, with an optional expiry. Nothing here holds a secret.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from novakit.db.migration_parts import create_table_with_id, foreign_key, primary_key, unique

revision = "0014"
down_revision = "0013"


def upgrade() -> None:
    table = "identity_application_credentials"
    create_table_with_id(
        table,
        sa.Column("uuid", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("secret_hash", sa.String(length=255), nullable=False),
        sa.Column("description", sa.Text()),
        sa.Column("expires_at", sa.DateTime()),
        sa.Column("unrestricted", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        foreign_key(table, "user_id", "identity_users.id", ondelete="CASCADE"),
        foreign_key(table, "project_id", "identity_projects.id", ondelete="CASCADE"),
        unique(table, "user_id", "name"),
        unique(table, "uuid"),
    )
    op.create_index(f"ix_{table}_project_id", table, ["project_id"], unique=False)
    roles = "identity_application_credential_roles"
    op.create_table(
        roles,
        sa.Column("application_credential_id", sa.Integer(), nullable=False),
        sa.Column("role_id", sa.Integer(), nullable=False),
        foreign_key(roles, "application_credential_id", f"{table}.id", ondelete="CASCADE"),
        foreign_key(roles, "role_id", "identity_roles.id", ondelete="CASCADE"),
        primary_key(roles, "application_credential_id", "role_id"),
    )
    op.create_index(f"ix_{roles}_role_id", roles, ["role_id"], unique=False)


def downgrade() -> None:
    op.drop_table("identity_application_credential_roles")
    op.drop_table("identity_application_credentials")
