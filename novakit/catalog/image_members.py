"""The projects a shared image is shared with: Glance's image members, kept small.

The image's owner (or an admin) adds a project to an image whose visibility is ``shared``;
the membership starts ``pending``. The member project accepts or rejects it (or sets it back
to pending); only an ``accepted`` membership lets the member see and use the image
(``novakit.catalog.images.scoped``). The owner lists and removes members; a member lists its
own membership only. A project that is neither owner nor member finds no such image.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.catalog import images
from novakit.compute import schemas
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Image, ImageMember


def member_view(m: ImageMember) -> dict[str, Any]:
    return {
        "image_id": m.image_id,
        "member_id": m.member,
        "status": m.status,
        "created_at": m.created_at,
        "updated_at": m.updated_at,
    }


def _membership(session: Session, image_uuid: str, member: str) -> ImageMember | None:
    row: ImageMember | None = session.execute(
        select(ImageMember).where(ImageMember.image_id == image_uuid, ImageMember.member == member)
    ).scalar_one_or_none()
    return row


def add_member(db: Database, ctx: RequestContext, ref: str, member: str) -> dict[str, Any]:
    """Share image ``ref`` with project ``member`` (pending until it accepts); the owner's call."""
    req = schemas.parse(schemas.ImageMemberRequest, {"member": member})

    def write(session: Session) -> dict[str, Any]:
        image = images.owned(session, ctx, ref)
        if image.visibility != "shared":
            raise exceptions.ValidationError(
                "visibility",
                f"image {image.uuid} is {image.visibility}: only a shared image has members "
                "(set its visibility to shared first)",
            )
        if req.member == image.project_id:
            raise exceptions.ValidationError("member", "the image's owner is not one of its members")
        if _membership(session, image.uuid, req.member) is not None:
            raise exceptions.Conflict(
                reason=f"project {req.member} is already a member of image {image.uuid}"
            )
        row = ImageMember(image_id=image.uuid, member=req.member, status="pending")
        session.add(row)
        session.flush()
        return member_view(row)

    result: dict[str, Any] = db.run_in_transaction(write)
    return result


def _shared_with(session: Session, ctx: RequestContext, ref: str) -> tuple[Image, ImageMember]:
    """A shared image ``ctx``'s project is a member of, whatever its status (a pending member
    must reach the image to accept it): by id or name; else not found, as any unseen image."""
    stmt = (
        select(Image, ImageMember)
        .join(ImageMember, ImageMember.image_id == Image.uuid)
        .where(
            (Image.uuid == ref) | (Image.name == ref),
            Image.status == "active",
            Image.visibility == "shared",
            ImageMember.member == ctx.project_id,
        )
        .limit(2)
    )
    rows = session.execute(stmt).all()
    if not rows:
        raise exceptions.ImageNotFound(image_id=ref)
    if len(rows) > 1:
        raise exceptions.Invalid(reason=f"more than one image is named {ref!r}; use its id")
    return rows[0][0], rows[0][1]


def set_member_status(
    db: Database, ctx: RequestContext, ref: str, status: str, member: str | None = None
) -> dict[str, Any]:
    """The member project accepts, rejects or sets back to pending its membership of ``ref``.
    ``member``: an admin sets another project's (a member may name its own project only)."""
    req = schemas.parse(schemas.ImageMemberRequest, {"member": member or ctx.project_id, "status": status})

    def write(session: Session) -> dict[str, Any]:
        if req.member != ctx.project_id:
            policy.authorize(ctx, "project:any")  # another project's answer: an admin's only
            image = images.usable(session, ctx, ref)
            row = _membership(session, image.uuid, req.member)
            if row is None:
                raise exceptions.NotFound(f"Project {req.member} is not a member of image {image.uuid}.")
        else:
            _, row = _shared_with(session, ctx, ref)
        row.status = req.status
        session.flush()
        return member_view(row)

    result: dict[str, Any] = db.run_in_transaction(write)
    return result


def list_members(db: Database, ctx: RequestContext, ref: str) -> list[dict[str, Any]]:
    """The members of ``ref``: all of them for its owner (or an admin), a member's own only."""
    with db.reader() as session:
        try:
            image = images.owned(session, ctx, ref)
        except (exceptions.ImageNotFound, exceptions.Forbidden):
            _, mine = _shared_with(session, ctx, ref)
            return [member_view(mine)]
        rows = session.execute(
            select(ImageMember).where(ImageMember.image_id == image.uuid).order_by(ImageMember.member)
        ).scalars()
        return [member_view(m) for m in rows]


def remove_member(db: Database, ctx: RequestContext, ref: str, member: str) -> None:
    """Stop sharing ``ref`` with project ``member``: the owner's (or an admin's) call."""

    def write(session: Session) -> None:
        image = images.owned(session, ctx, ref)
        row = _membership(session, image.uuid, member)
        if row is None:
            raise exceptions.NotFound(f"Project {member} is not a member of image {image.uuid}.")
        session.delete(row)

    db.run_in_transaction(write)


def show_member(db: Database, ctx: RequestContext, ref: str, member: str) -> dict[str, Any]:
    """One member of ``ref``, among those ``ctx`` may list (``list_members``)."""
    for found in list_members(db, ctx, ref):
        if found["member_id"] == member:
            return found
    raise exceptions.NotFound(f"Project {member} is not a member of image {ref}.")
