"""Images: what servers boot from. A registry of names, formats, checksums and locations.

``location`` is a path or file:// URL that compute hosts read into their image cache (the
libvirt driver refuses paths outside its image store and verifies the sha256 ``checksum``):
an operator registers an image at a location (``create``), a snapshot is written by its host,
and an image created through the Image API (``create_queued``) gets its data by an upload into
the controller's image store (``novakit.catalog.image_data``).

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

import contextlib
import uuid as uuidlib
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, bindparam, false, literal, or_, select, true
from sqlalchemy import update as sql_update
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.compute import schemas, views
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Image, ImageMember
from novakit.host.messages import ImageSpec

#: What each kind of image is when nobody says (Glance: an admin's images are public).
SERVER_IMAGE_VISIBILITY = "private"  # snapshots and shelved images: their server's project's


#: Glance's attributes the images table has no column for, kept in its ``properties`` under
#: Glance's own reserved prefix (``os_glance_``: nobody sets such a property through the API),
#: and shown by ``view`` as attributes of their own
STORED = {
    "protected": "os_glance_protected",
    "tags": "os_glance_tags",
    "md5": "os_glance_md5",  # Glance's ``checksum``
    "sha512": "os_glance_sha512",  # Glance's ``os_hash_value`` (``os_hash_algo`` sha512)
}
RESERVED_PREFIX = "os_glance"


def view(i: Image, ctx: RequestContext | None = None) -> dict[str, Any]:
    """The image as ``ctx`` may see it (``views.image_view``); None: the library's own caller.
    Glance's ``protected``, ``tags``, ``md5`` and ``sha512`` are keys of their own, never
    properties."""
    out = views.image_view(i, ctx)
    stored = out["properties"]
    out["protected"] = bool(stored.get(STORED["protected"], False))
    out["tags"] = list(stored.get(STORED["tags"]) or [])
    out["md5"] = stored.get(STORED["md5"])
    out["sha512"] = stored.get(STORED["sha512"])
    out["properties"] = {k: v for k, v in stored.items() if not k.startswith(RESERVED_PREFIX)}
    return out


def _visible(ctx: RequestContext | None, *, listing: bool = False) -> ColumnElement[bool]:
    """The images ``ctx`` may see. ``listing``: as a listing shows them (community images only
    when asked for, as Glance's); otherwise as a look-up by name or id finds them."""
    if ctx is None or _sees_all(ctx):
        return true()
    return _visible_to(literal(ctx.project_id), listing=listing)


def _sees_all(ctx: RequestContext) -> bool:
    """Whether ``ctx`` sees every image (an admin: ``project:any``)."""
    return policy.allowed(ctx, "project:any")


def _visible_to(
    project: ColumnElement[Any], *, listing: bool, any_member: bool = False
) -> ColumnElement[bool]:
    """The images the project ``project`` (a value, or a bound parameter of a statement built
    once) may see, as ``_visible`` says. ``any_member``: a shared image's member sees it
    whatever its membership's status (Glance shows a pending member the image it is asked to
    accept); otherwise only once accepted (what it lists and boots)."""
    accepted = select(ImageMember.image_id).where(ImageMember.member == project)
    if not any_member:
        accepted = accepted.where(ImageMember.status == "accepted")
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


def find(session: Session, ctx: RequestContext, image_id: str) -> Image:
    """The image of id ``image_id`` in any status but deleted, as Glance finds one to show,
    change, upload to or download: if ``ctx`` may see it (a shared image's member whatever its
    membership's status); else ``ImageNotFound``, exactly as one that does not exist."""
    stmt = select(Image).where(Image.uuid == image_id, Image.status != "deleted")
    if not _sees_all(ctx):
        stmt = stmt.where(_visible_to(literal(ctx.project_id), listing=False, any_member=True))
    row: Image | None = session.execute(stmt).scalar_one_or_none()
    if row is None:
        raise exceptions.ImageNotFound(image_id=image_id)
    return row


def _is_uuid(ref: str) -> bool:
    try:
        uuidlib.UUID(ref)
    except ValueError:
        return False
    return True


def show(db: Database, ctx: RequestContext, ref: str) -> dict[str, Any]:
    """One image as ``ctx`` may see it (Glance's image show): by id in any status (``find``),
    else the active image of that name (``usable``)."""
    with db.reader() as session:
        if _is_uuid(ref):
            with contextlib.suppress(exceptions.ImageNotFound):
                return view(find(session, ctx, ref), ctx)
        return view(usable(session, ctx, ref), ctx)  # a name that looks like an id


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
        properties={k: str(v) for k, v in (i.properties or {}).items() if not k.startswith(RESERVED_PREFIX)},
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
    status: str | None = None,
    hidden: bool = False,
) -> list[dict[str, Any]]:
    """The images ``ctx`` may see, in any status but deleted, as Glance lists them: community
    images only when ``visibility`` asks for them; ``visibility`` keeps only images of that
    visibility, ``name`` only those of that exact name, ``status`` those in that status
    (Glance's filters). ``ctx`` None: the library's own caller (an operator), every image.
    ``hidden``: the images hidden from listings (Glance's ``os_hidden``), none in novakit."""
    if hidden:
        return []
    if visibility is not None and visibility not in schemas.VISIBILITIES:
        raise exceptions.ValidationError("visibility", f"must be one of {', '.join(schemas.VISIBILITIES)}")
    stmt = scoped(select(Image), ctx, listing=visibility != "community")
    if visibility is not None:
        stmt = stmt.where(Image.visibility == visibility)
    if name is not None:
        stmt = stmt.where(Image.name == name)
    if status is not None:
        stmt = stmt.where(Image.status == status)
    with db.reader() as session:
        rows = session.execute(stmt.where(Image.status != "deleted").order_by(Image.name, Image.id))
        return [view(i, ctx) for i in rows.scalars()]


def set_visibility(
    db: Database, ctx: RequestContext, ref: str, visibility: str, *, dry_run: bool = False
) -> dict[str, Any]:
    """Change who sees an image: its owner's (or an admin's) to change; making it public is an
    admin's (``image:publicize``, Glance's ``publicize_image``). ``dry_run`` (check mode): the
    checks, in a read, and the image as it would be; nothing written."""
    if visibility not in schemas.VISIBILITIES:
        raise exceptions.ValidationError("visibility", f"must be one of {', '.join(schemas.VISIBILITIES)}")
    if visibility == "public":
        policy.authorize(ctx, "image:publicize")

    def write(session: Session) -> dict[str, Any]:
        row = owned(session, ctx, ref)
        if dry_run:
            return {**view(row, ctx), "visibility": visibility}
        row.visibility = visibility
        session.flush()
        return view(row, ctx)

    result: dict[str, Any] = db.run_or_dry_run(write, dry_run=dry_run)
    return result


def show_owned(db: Database, ctx: RequestContext, ref: str) -> dict[str, Any]:
    """The image named or identified ``ref`` that ``ctx`` may change (``owned``), as the image
    module finds the one it manages: by id in any status, by name the active one, among the
    images ``ctx`` may see, the scope ``create`` checks a new name in. One it sees but may not
    change (another project's public image) is refused, naming its owner rule; one it may not
    see is ``ImageNotFound``, exactly as one that does not exist: another project's private
    image is neither shown nor in the way of a name."""
    with db.reader() as session:
        return view(owned(session, ctx, ref), ctx)


def owned(session: Session, ctx: RequestContext, ref: str) -> Image:
    """An image ``ctx`` may change (its visibility, its members): its owner's, or an admin's.
    One it may see but not change is refused; one it may not see is not found."""
    return _owner_only(_by_ref(session, ctx, ref), ctx)


def _by_ref(session: Session, ctx: RequestContext, ref: str) -> Image:
    """By id, the image in any status (``find``); by name, the active one (``usable``)."""
    return find(session, ctx, ref) if _is_uuid(ref) else usable(session, ctx, ref)


def _owner_only(row: Image, ctx: RequestContext, rule: str = "project:any") -> Image:
    """``row`` when ``ctx`` is its owner or allowed ``rule`` (an admin); a caller that sees
    another project's image (public, shared with it) is refused."""
    if row.project_id != ctx.project_id and not policy.allowed(ctx, rule):
        raise exceptions.Forbidden(
            reason=f"image {row.uuid} belongs to another project; only its owner changes it"
        )
    return row


def delete(db: Database, ctx: RequestContext, ref: str, *, dry_run: bool = False) -> str:
    """Delete an image (Glance's): its owner's, or an admin's (``image:delete``); a protected
    image is refused until it is unprotected. Returns where its data was (``location``), for
    ``novakit.catalog.image_data`` to remove what the image store holds of it. ``dry_run``: the
    checks, in a read, and nothing deleted."""

    def write(session: Session) -> str:
        row = _owner_only(_by_ref(session, ctx, ref), ctx, "image:delete")
        if (row.properties or {}).get(STORED["protected"]):
            raise exceptions.Forbidden(reason=f"image {row.uuid} is protected and cannot be deleted")
        if not dry_run:
            transition(session, row.uuid, "delete")
        return row.location

    result: str = db.run_or_dry_run(write, dry_run=dry_run)
    return result


def remove(db: Database, conf: Config, ctx: RequestContext, ref: str, *, dry_run: bool = False) -> None:
    """Delete an image as the tools do (the image module, ``novakit image delete``), the way the
    Image API does: ``delete``, and the data the image store holds of it
    (``image_data.delete``). Nothing is answered: where the data was is the operator's, and a
    member's call through a cloud must not carry it. ``dry_run``: ``delete``'s checks only."""
    if dry_run:
        delete(db, ctx, ref, dry_run=True)
        return
    from novakit.catalog import image_data  # it imports this module

    image_data.delete(db, ctx, ref, image_data.store_of(conf))


# --- Glance's image record: created queued, changed by JSON patch, deactivated --------------------

#: Glance's image states as its API moves them (one table): operation -> (from, to). A write
#: says what it expects (a guarded UPDATE); a status not in "from" refuses the operation.
TRANSITIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "upload": (("queued",), "saving"),  # novakit.catalog.image_data.upload
    "uploaded": (("saving",), "active"),
    "upload_failed": (("saving",), "queued"),  # the data is gone: back to queued, as Glance
    "deactivate": (("active", "deactivated"), "deactivated"),
    "reactivate": (("deactivated", "active"), "active"),
    "delete": (("queued", "saving", "active", "deactivated", "killed"), "deleted"),
}
DISK_FORMATS = ("ami", "ari", "aki", "vhd", "vhdx", "vmdk", "raw", "qcow2", "vdi", "iso", "ploop")
CONTAINER_FORMATS = ("ami", "ari", "aki", "bare", "ovf", "ova", "docker", "compressed")
#: Glance's attributes nobody sets (403), and the names it keeps for itself (403)
READ_ONLY = frozenset(
    {
        "id",
        "status",
        "owner",
        "size",
        "virtual_size",
        "checksum",
        "os_hash_algo",
        "os_hash_value",
        "created_at",
        "updated_at",
        "self",
        "file",
        "schema",
        "direct_url",
    }
)
RESERVED = frozenset({"location", "locations", "deleted", "deleted_at", "image_host"})
#: the attributes an image has whatever its properties (a JSON patch may not remove them)
CORE = ("name", "visibility", "disk_format", "container_format", "min_disk", "min_ram", "protected", "tags")
MAX_STRING = 255
MAX_PROPERTY = 65535


def transition(session: Session, image_uuid: str, operation: str) -> None:
    """Move an image along ``TRANSITIONS[operation]``, guarded by the statuses it may leave;
    from any other status the operation is refused (409), and nothing is written."""
    sources, target = TRANSITIONS[operation]
    done = session.execute(
        sql_update(Image)
        .where(Image.uuid == image_uuid, Image.status.in_(sources))
        .values(status=target)
        .execution_options(synchronize_session="fetch")
    )
    if getattr(done, "rowcount", 0) != 1:
        now = session.execute(select(Image.status).where(Image.uuid == image_uuid)).scalar_one_or_none()
        what = operation.replace("_", " ")
        raise exceptions.Conflict(reason=f"image {image_uuid} is {now}: it cannot {what}")


def _whole(key: str, value: Any, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= schemas.MAX_INT:
        raise exceptions.ValidationError(key, f"must be a whole number from {low} to {schemas.MAX_INT}")
    return value


def _one_of(key: str, value: Any, allowed: tuple[str, ...], nullable: bool = True) -> str | None:
    if value is None and nullable:
        return None
    if value not in allowed:
        raise exceptions.ValidationError(key, f"must be one of {', '.join(allowed)}")
    return str(value)


def _text(key: str, value: Any, limit: int = MAX_STRING, nullable: bool = True) -> str | None:
    if value is None and nullable:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise exceptions.ValidationError(key, f"must be a string of at most {limit} characters")
    return value


def _tags(key: str, value: Any) -> list[str]:
    if not isinstance(value, list):
        raise exceptions.ValidationError(key, "must be a list of strings")
    return list(dict.fromkeys(str(_text(key, t, nullable=False)) for t in value))


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise exceptions.ValidationError(key, "must be true or false")
    return value


#: how each core attribute's value is checked (Glance's image schema)
_CHECKS: dict[str, Any] = {
    "name": _text,
    "visibility": lambda k, v: _one_of(k, v, schemas.VISIBILITIES, nullable=False),
    "disk_format": lambda k, v: _one_of(k, v, DISK_FORMATS),
    "container_format": lambda k, v: _one_of(k, v, CONTAINER_FORMATS),
    "min_disk": _whole,
    "min_ram": _whole,
    "protected": _flag,
    "tags": _tags,
}


def _checked(ctx: RequestContext, key: str, value: Any) -> Any:
    """``value`` for attribute or property ``key``, as Glance's schema and policy take it."""
    if key in READ_ONLY:
        raise exceptions.Forbidden(reason=f"attribute {key!r} is read-only")
    if key in RESERVED or key.startswith(RESERVED_PREFIX):
        raise exceptions.Forbidden(reason=f"attribute {key!r} is reserved")
    if key in _CHECKS:
        checked = _CHECKS[key](key, value)
        if key == "visibility" and checked == "public":
            policy.authorize(ctx, "image:publicize")
        return checked
    if not key or len(key) > MAX_STRING:
        raise exceptions.ValidationError("property", f"a name must be 1 to {MAX_STRING} characters")
    return _text(key, value, MAX_PROPERTY, nullable=False)


def _set(row: Image, key: str, value: Any) -> None:
    """Set attribute or property ``key`` of ``row`` (a value ``_checked`` returned)."""
    if key in ("name", "disk_format", "container_format"):
        setattr(row, key, value or "")
    elif key in ("visibility", "min_disk", "min_ram"):
        setattr(row, key, value)
    else:
        properties = dict(row.properties or {})
        properties[STORED.get(key, key)] = value
        row.properties = properties


def create_queued(db: Database, ctx: RequestContext, data: dict[str, Any]) -> dict[str, Any]:
    """A new image of ``ctx``'s project with no data yet (``queued``), as Glance's image create:
    any member may; ``visibility`` is Glance's default ``shared`` unless said (``public`` is an
    admin's); ``id`` may be chosen; other keys are properties (strings). Image names need not
    be unique (Glance's), but an image found by name must be (``usable``)."""
    given = dict(data)
    image_id = given.pop("id", None)
    if image_id is not None and (not isinstance(image_id, str) or not _is_uuid(image_id)):
        raise exceptions.ValidationError("id", "must be a UUID")
    values = {key: _checked(ctx, key, value) for key, value in given.items()}
    row = Image(
        uuid=str(uuidlib.UUID(image_id)) if image_id else str(uuidlib.uuid4()),
        name="",
        project_id=ctx.project_id,
        visibility=values.pop("visibility", "shared"),
        disk_format="",
        container_format="",
        location="",
        size=0,
        checksum=None,
        status="queued",
        properties={},
    )
    for key, value in values.items():
        _set(row, key, value)

    def write(session: Session) -> dict[str, Any]:
        if by_uuid(session, row.uuid) is not None:
            raise exceptions.Conflict(reason=f"an image with id {row.uuid} exists")
        session.add(row)
        session.flush()
        return view(row, ctx)

    result: dict[str, Any] = db.run_in_transaction(write)
    return result


def _pointer(change: dict[str, Any]) -> str:
    """The attribute a JSON patch operation's ``path`` names (one level: ``/name``)."""
    path = change.get("path")
    if not isinstance(path, str) or not path.startswith("/") or "/" in path[1:]:
        raise exceptions.ValidationError("path", "must name one attribute, as /name")
    return path[1:].replace("~1", "/").replace("~0", "~")


def _apply(ctx: RequestContext, row: Image, change: Any) -> None:
    """One operation of a JSON patch (Glance's: add and replace set, remove unsets)."""
    if not isinstance(change, dict) or change.get("op") not in ("add", "replace", "remove"):
        raise exceptions.ValidationError("op", "must be add, replace or remove")
    op, key = change["op"], _pointer(change)
    properties = row.properties or {}
    if op == "remove":
        if key in READ_ONLY or key in RESERVED or key.startswith(RESERVED_PREFIX):
            _checked(ctx, key, None)  # refuses it, as it refuses setting it
        if key in CORE:
            raise exceptions.Forbidden(reason=f"attribute {key!r} may not be removed")
        if key not in properties:
            raise exceptions.Conflict(reason=f"property {key!r} does not exist")
        row.properties = {k: v for k, v in properties.items() if k != key}
        return
    if "value" not in change:
        raise exceptions.ValidationError("value", f"is required by {op}")
    value = _checked(ctx, key, change["value"])
    if op == "replace" and key not in CORE and key not in properties:
        raise exceptions.Conflict(reason=f"property {key!r} does not exist")
    if key in ("disk_format", "container_format") and row.status != "queued":
        raise exceptions.Forbidden(reason=f"attribute {key!r} can be replaced only for a queued image")
    _set(row, key, value)


def update(db: Database, ctx: RequestContext, image_id: str, changes: list[Any]) -> dict[str, Any]:
    """Apply a JSON patch to an image (Glance's image update): its owner's or an admin's; all
    of it or, when one operation is refused, none of it."""
    if not isinstance(changes, list):
        raise exceptions.ValidationError("body", "must be a list of JSON patch operations")

    def write(session: Session) -> dict[str, Any]:
        row = owned(session, ctx, image_id)
        for change in changes:
            _apply(ctx, row, change)
        session.flush()
        return view(row, ctx)

    result: dict[str, Any] = db.run_in_transaction(write)
    return result


def set_tag(db: Database, ctx: RequestContext, image_id: str, tag: str, present: bool) -> None:
    """Add tag ``tag`` to an image, or (``present`` False) remove it: not found when absent."""
    checked = _text("tag", tag, nullable=False)

    def write(session: Session) -> None:
        row = owned(session, ctx, image_id)
        tags = list((row.properties or {}).get(STORED["tags"]) or [])
        if present and checked not in tags:
            tags.append(checked)
        elif not present:
            if checked not in tags:
                raise exceptions.NotFound(f"Tag {checked} not found on image {image_id}.")
            tags.remove(checked)
        _set(row, "tags", tags)

    db.run_in_transaction(write)


def set_active(db: Database, ctx: RequestContext, image_id: str, active: bool) -> None:
    """Deactivate an image (nobody but an admin downloads or boots it) or reactivate it: an
    admin's (``image:deactivate``, Glance's); only an active or deactivated image."""
    policy.authorize(ctx, "image:deactivate")

    def write(session: Session) -> None:
        row = find(session, ctx, image_id)
        operation = "reactivate" if active else "deactivate"
        if row.status not in TRANSITIONS[operation][0]:
            raise exceptions.Forbidden(reason=f"an image in status {row.status} cannot {operation}")
        transition(session, row.uuid, operation)

    db.run_in_transaction(write)


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
