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
