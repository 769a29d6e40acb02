"""image_members: images shared with other projects (API database)

Glance's image visibility: ``images.visibility`` (public, private, shared, community) and
``images.project_id`` (the owner) existed from the start but were never enforced; every
image was public. This adds the members of shared images and makes the snapshots and
shelved images written so far private to their project, as they are written from now on.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_SERVER_IMAGES = ("snapshot", "shelved")


def upgrade() -> None:
    op.create_table(
        "image_members",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.String(length=36), nullable=False),
        sa.Column("member", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["image_id"], ["images.uuid"], name=op.f("fk_image_members_image_id_images"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_image_members")),
        sa.UniqueConstraint("image_id", "member", name=op.f("uq_image_members_image_id_member")),
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
