"""Images: what servers boot from. A registry of names, formats, checksums and locations.

novakit does not store image bytes: ``location`` is a path or file:// URL that
compute hosts read into their image cache (the libvirt driver refuses paths
outside its image store and verifies the sha256 ``checksum``).

Who sees an image is Glance's visibility, decided here and nowhere else: ``scoped`` narrows
any image query to what a caller may see, ``usable`` finds one image by name or id the way
every boot, rebuild, rescue and show does. An image is ``public`` (everyone),
``private`` (its owner project), ``shared`` (its owner, and the projects it was shared with
that accepted: ``novakit.catalog.image_members``) or ``community`` (everyone who names it; a
listing shows community images only when asked for them). An admin sees every image.
Another project's image that the caller may not see looks exactly like one that does not
exist. Snapshots and shelved images are private to their server's project; an image an admin
registers is public unless it says otherwise. Where compute hosts read an image (its
``location``, the ``image_host`` that wrote a snapshot) is the operator's: views show it
only to a caller allowed ``host:show``.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, bindparam, false, literal, or_, select, true
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.compute import schemas, views
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Image, ImageMember
from novakit.host.messages import ImageSpec

#: What each kind of image is when nobody says (Glance: an admin's images are public).
SERVER_IMAGE_VISIBILITY = "private"  # snapshots and shelved images: their server's project's


def view(i: Image, ctx: RequestContext | None = None) -> dict[str, Any]:
    """The image as ``ctx`` may see it (``views.image_view``); None: the library's own caller."""
    return views.image_view(i, ctx)


def _visible(ctx: RequestContext | None, *, listing: bool = False) -> ColumnElement[bool]:
    """The images ``ctx`` may see. ``listing``: as a listing shows them (community images only
    when asked for, as Glance's); otherwise as a look-up by name or id finds them."""
    if ctx is None or _sees_all(ctx):
        return true()
    return _visible_to(literal(ctx.project_id), listing=listing)


def _sees_all(ctx: RequestContext) -> bool:
    """Whether ``ctx`` sees every image (an admin: ``project:any``)."""
    return policy.allowed(ctx, "project:any")


def _visible_to(project: ColumnElement[Any], *, listing: bool) -> ColumnElement[bool]:
    """The images the project ``project`` (a value, or a bound parameter of a statement built
    once) may see, as ``_visible`` says."""
    accepted = select(ImageMember.image_id).where(
        ImageMember.member == project, ImageMember.status == "accepted"
    )
    return or_(
        Image.visibility == "public",
        Image.project_id == project,
        and_(Image.visibility == "shared", Image.uuid.in_(accepted)),
        false() if listing else Image.visibility == "community",
    )


def scoped(stmt: Select[Any], ctx: RequestContext | None, *, listing: bool = False) -> Select[Any]:
    """``stmt`` (a select of images) narrowed to what ``ctx`` may see: the one place image
    visibility is decided. ``ctx`` None is the library's own caller (an operator): everything."""
    return stmt.where(_visible(ctx, listing=listing))


# Built once: every boot looks its image up, and building the query costs more than running it.
_BY_REF = (
    select(Image)
    .where(or_(Image.uuid == bindparam("ref"), Image.name == bindparam("ref")), Image.status == "active")
    .limit(2)
)
_BY_UUID = select(Image).where(Image.uuid == bindparam("uuid"))
#: ``_BY_REF`` among what the project ``:project`` may see (``_visible_to``), for a member's boot
_USABLE_BY_REF = _BY_REF.where(_visible_to(bindparam("project"), listing=False))


def get(session: Session, ref: str) -> Image:
    """The active image named or identified ``ref``, whoever owns it: for the library's own
    look-ups (what a host needs of an image already chosen). A caller's look-up is ``usable``."""
    rows = list(session.execute(_BY_REF, {"ref": ref}).scalars())
    return _one(rows, ref)


def usable(session: Session, ctx: RequestContext, ref: str) -> Image:
    """The active image named or identified ``ref`` that ``ctx`` may see and use (boot, rebuild,
    rescue, show, a volume made of it); one it may not see raises ``ImageNotFound`` exactly as
    one that does not exist."""
    if _sees_all(ctx):
        rows = list(session.execute(_BY_REF, {"ref": ref}).scalars())
    else:
        rows = list(session.execute(_USABLE_BY_REF, {"ref": ref, "project": ctx.project_id}).scalars())
    return _one(rows, ref)


def _one(rows: list[Image], ref: str) -> Image:
    if not rows:
        raise exceptions.ImageNotFound(image_id=ref)
    if len(rows) > 1:
        by_id = [r for r in rows if r.uuid == ref]
        if len(by_id) == 1:
            return by_id[0]
        raise exceptions.Invalid(reason=f"more than one image is named {ref!r}; use its id")
    return rows[0]


def show(db: Database, ctx: RequestContext, ref: str) -> dict[str, Any]:
    """One image as ``ctx`` may see it (Glance's image show)."""
    with db.reader() as session:
        return view(usable(session, ctx, ref), ctx)


def by_uuid(session: Session, uuid: str) -> Image | None:
    """The image record with this uuid, whatever its status (a server keeps its image)."""
    row: Image | None = session.execute(_BY_UUID, {"uuid": uuid}).scalar_one_or_none()
    return row


def spec(i: Image) -> ImageSpec:
    return ImageSpec(
        id=i.uuid,
        name=i.name,
        disk_format=i.disk_format,
        container_format=i.container_format,
        checksum=i.checksum,
        location=i.location,
        size=i.size,
        min_disk=i.min_disk,
        min_ram=i.min_ram,
        properties={k: str(v) for k, v in (i.properties or {}).items()},
    )


def create(db: Database, ctx: RequestContext, data: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
    """Register an image (admin only); public unless ``data["visibility"]`` says otherwise."""
    policy.authorize(ctx, "image:create")
    req = schemas.parse(schemas.ImageCreate, data)
    visibility = req.visibility or ("public" if policy.allowed(ctx, "image:publicize") else "private")
    if visibility == "public":
        policy.authorize(ctx, "image:publicize")

    def write(session: Session) -> dict[str, Any]:
        if _named(session, ctx, req.name, ["active"]):
            raise exceptions.Conflict(reason=f"an image named {req.name!r} exists")
        properties = dict(req.properties)
        # The kernel and ramdisk of a direct kernel boot are images: resolved now, by name or id,
        # and stored by uuid; one that does not resolve is refused, never ignored at boot.
        for key in ("kernel_id", "ramdisk_id"):
            if properties.get(key):
                try:
                    properties[key] = get(session, properties[key]).uuid
                except exceptions.ImageNotFound:
                    raise exceptions.ValidationError(
                        f"properties.{key}", f"no image is named or has the id {properties[key]!r}"
                    ) from None
        row = Image(
            uuid=req.uuid or str(uuidlib.uuid4()),
            project_id=ctx.project_id,
            **req.model_dump(exclude={"uuid", "properties", "visibility"}),
            properties=properties,
            visibility=visibility,
        )
        if dry_run:  # check mode: every check, nothing written
            return view(row, ctx)
        session.add(row)
        session.flush()
        return view(row, ctx)

    return db.run_or_dry_run(write, dry_run=dry_run)


def list_images(
    db: Database,
    ctx: RequestContext | None = None,
    *,
    visibility: str | None = None,
    name: str | None = None,
) -> list[dict[str, Any]]:
    """The active images ``ctx`` may see, as Glance lists them: community images only when
    ``visibility`` asks for them; ``visibility`` keeps only images of that visibility, ``name``
    only those of that exact name (Glance's filter). ``ctx`` None: the library's own caller (an
    operator), every image."""
    if visibility is not None and visibility not in schemas.VISIBILITIES:
        raise exceptions.ValidationError("visibility", f"must be one of {', '.join(schemas.VISIBILITIES)}")
    stmt = scoped(select(Image), ctx, listing=visibility != "community")
    if visibility is not None:
        stmt = stmt.where(Image.visibility == visibility)
    if name is not None:
        stmt = stmt.where(Image.name == name)
    with db.reader() as session:
        rows = session.execute(stmt.where(Image.status == "active").order_by(Image.name, Image.id))
        return [view(i, ctx) for i in rows.scalars()]


def set_visibility(db: Database, ctx: RequestContext, ref: str, visibility: str) -> dict[str, Any]:
    """Change who sees an image: its owner's (or an admin's) to change; making it public is an
    admin's (``image:publicize``, Glance's ``publicize_image``)."""
    if visibility not in schemas.VISIBILITIES:
        raise exceptions.ValidationError("visibility", f"must be one of {', '.join(schemas.VISIBILITIES)}")
    if visibility == "public":
        policy.authorize(ctx, "image:publicize")

    def write(session: Session) -> dict[str, Any]:
        row = owned(session, ctx, ref)
        row.visibility = visibility
        session.flush()
        return view(row, ctx)

    result: dict[str, Any] = db.run_in_transaction(write)
    return result


def owned(session: Session, ctx: RequestContext, ref: str) -> Image:
    """An image ``ctx`` may change (its visibility, its members): its owner's, or an admin's.
    One it may see but not change is refused; one it may not see is not found."""
    row = usable(session, ctx, ref)
    if row.project_id != ctx.project_id and not policy.allowed(ctx, "project:any"):
        raise exceptions.Forbidden(
            reason=f"image {row.uuid} belongs to another project; only its owner changes it"
        )
    return row


def delete(db: Database, ctx: RequestContext, ref: str) -> None:
    policy.authorize(ctx, "image:delete")
    db.run_in_transaction(lambda s: setattr(get(s, ref), "status", "deleted"))


# --- images made of servers (novakit.conductor.flows): snapshots and shelved images -------------


def _named(session: Session, ctx: RequestContext | None, name: str, statuses: list[str]) -> bool:
    stmt = scoped(select(Image.uuid), ctx).where(Image.name == name, Image.status.in_(statuses))
    return session.execute(stmt.limit(1)).first() is not None


def check_name_free(
    session: Session, name: str, field: str = "options.name", ctx: RequestContext | None = None
) -> None:
    """Refuse ``name`` when an image ``ctx`` may see has it (another project's private image
    does not take a name from this one: it does not exist for it). ``ctx`` None: any image."""
    if _named(session, ctx, name, ["active", "queued"]):
        raise exceptions.ValidationError(field, f"an image named {name!r} exists")


def add_snapshot(
    session: Session,
    name: str,
    instance: Any,
    host: str,
    kind: str,
    metadata: dict[str, Any],
    image_id: str | None = None,
) -> Image:
    """A new image of ``instance``'s root disk, ``queued`` until its host has written it (Nova
    creates the Glance record first, then uploads). ``kind``: snapshot or shelved. ``image_id``:
    its id, chosen when the request was started (a new one otherwise).

    The image is private to the server's project (its owner), as Nova's snapshots are.
    """
    check_name_free(session, name, ctx=RequestContext(instance.project_id, instance.user_id or ""))
    row = Image(
        uuid=image_id or str(uuidlib.uuid4()),
        name=name,
        project_id=instance.project_id,
        visibility=SERVER_IMAGE_VISIBILITY,
        disk_format="raw",
        container_format="bare",
        location="",
        size=0,
        status="queued",
        properties={
            **{k: str(v) for k, v in metadata.items()},
            "image_type": kind,
            "instance_uuid": instance.uuid,
            "image_host": host,
            "base_image_ref": instance.image_ref or "",
        },
    )
    session.add(row)
    session.flush()
    return row


def activate(session: Session, uuid: str, written: dict[str, Any]) -> None:
    """A queued snapshot becomes bootable, where its host wrote it."""
    row = session.execute(select(Image).where(Image.uuid == uuid, Image.status == "queued")).scalar_one()
    row.location = str(written["location"])
    row.checksum = str(written["checksum"])
    row.size = int(written["size"])
    row.disk_format = str(written.get("disk_format", "raw"))
    row.status = "active"


def shelved_image_of(session: Session, instance_uuid: str) -> Image | None:
    """The image a shelved server will be unshelved from."""
    for row in session.execute(
        select(Image).where(Image.status == "active").order_by(Image.id.desc())
    ).scalars():
        props = row.properties or {}
        if props.get("image_type") == "shelved" and props.get("instance_uuid") == instance_uuid:
            return row
    return None
