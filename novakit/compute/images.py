"""Images: what servers boot from. A registry of names, formats, checksums and locations.

novakit does not store image bytes: ``location`` is a path or file:// URL that
compute hosts read into their image cache (the libvirt driver refuses paths
outside its image store and verifies the sha256 ``checksum``).
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from sqlalchemy import bindparam, or_, select
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.compute import schemas
from novakit.compute.messages import ImageSpec
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Image


def view(i: Image) -> dict[str, Any]:
    return {
        "id": i.uuid,
        "name": i.name,
        "disk_format": i.disk_format,
        "container_format": i.container_format,
        "checksum": i.checksum,
        "size": i.size,
        "location": i.location,
        "min_disk": i.min_disk,
        "min_ram": i.min_ram,
        "properties": dict(i.properties or {}),
        "status": i.status,
    }


# Built once: every boot looks its image up, and building the query costs more than running it.
_BY_REF = (
    select(Image)
    .where(or_(Image.uuid == bindparam("ref"), Image.name == bindparam("ref")), Image.status == "active")
    .limit(2)
)
_BY_UUID = select(Image).where(Image.uuid == bindparam("uuid"))


def get(session: Session, ref: str) -> Image:
    rows = list(session.execute(_BY_REF, {"ref": ref}).scalars())
    if not rows:
        raise exceptions.ImageNotFound(image_id=ref)
    if len(rows) > 1:
        raise exceptions.Invalid(reason=f"more than one image is named {ref!r}; use its id")
    return rows[0]


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


def create(db: Database, ctx: RequestContext, data: dict[str, Any]) -> dict[str, Any]:
    policy.authorize(ctx, "image:create")
    req = schemas.parse(schemas.ImageCreate, data)

    def write(session: Session) -> dict[str, Any]:
        if session.execute(select(Image).where(Image.name == req.name, Image.status == "active")).first():
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
            **req.model_dump(exclude={"uuid", "properties"}),
            properties=properties,
        )
        session.add(row)
        session.flush()
        return view(row)

    return db.run_in_transaction(write)


def list_images(db: Database) -> list[dict[str, Any]]:
    with db.reader() as session:
        rows = session.execute(select(Image).where(Image.status == "active").order_by(Image.name))
        return [view(i) for i in rows.scalars()]


def delete(db: Database, ctx: RequestContext, ref: str) -> None:
    policy.authorize(ctx, "image:delete")
    db.run_in_transaction(lambda s: setattr(get(s, ref), "status", "deleted"))


# --- images made of servers (novakit.moves.images): snapshots and shelved images -------------


def check_name_free(session: Session, name: str, field: str = "options.name") -> None:
    taken = session.execute(
        select(Image.uuid).where(Image.name == name, Image.status.in_(["active", "queued"]))
    ).first()
    if taken is not None:
        raise exceptions.ValidationError(field, f"an image named {name!r} exists")


def add_snapshot(
    session: Session, name: str, instance: Any, host: str, kind: str, metadata: dict[str, Any]
) -> Image:
    """A new image of ``instance``'s root disk, ``queued`` until its host has written it (Nova
    creates the Glance record first, then uploads). ``kind``: snapshot or shelved."""
    check_name_free(session, name)
    row = Image(
        uuid=str(uuidlib.uuid4()),
        name=name,
        project_id=instance.project_id,
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
