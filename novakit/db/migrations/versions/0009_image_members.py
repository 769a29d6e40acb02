"""image_members: images shared with other projects (API database)

Glance's image visibility: ``images.visibility`` (public, private, shared, community) and
``images.project_id`` (the owner) existed from the start but were never enforced; every
image was public. This adds the members of shared images and makes the snapshots and
shelved images written so far private to their project, as they are written from now on.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from novakit.db.migration_parts import create_table_with_id, foreign_key, timestamps, unique, uuid_column

revision = "0009"
down_revision = "0008"

_SERVER_IMAGES = ("snapshot", "shelved")


def upgrade() -> None:
    create_table_with_id(
        "image_members",
        uuid_column("image_id"),
        sa.Column("member", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        *timestamps(),
        foreign_key("image_members", "image_id", "images.uuid", ondelete="CASCADE"),
        unique("image_members", "image_id", "member"),
    )
    with op.batch_alter_table("image_members", schema=None) as batch_op:
        batch_op.create_index("ix_image_members_member_status", ["member", "status"], unique=False)

    # Images made of servers were written public (the column's default): they are their project's.
    conn = op.get_bind()
    images = sa.table("images", sa.column("id", sa.Integer), sa.column("properties", sa.JSON))
    for row_id, properties in conn.execute(sa.select(images.c.id, images.c.properties)).all():
        props = json.loads(properties) if isinstance(properties, str) else (properties or {})
        if props.get("image_type") in _SERVER_IMAGES:
            conn.execute(sa.text("UPDATE images SET visibility = 'private' WHERE id = :id"), {"id": row_id})


def downgrade() -> None:
    op.drop_table("image_members")
