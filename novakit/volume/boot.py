"""Boot from volume: a server whose root disk is a volume (Nova's block_device_mapping_v2 with
``boot_index 0``, destination ``volume``), from the request to the server's delete.

Two forms, as Nova's API has them:

* ``boot_from_volume: SIZE`` (source ``image``): a new volume of SIZE GiB is made from the image on
  the host the scheduler chooses. Its size is the request's DISK_GB instead of the flavor's
  root_gb (``RequestSpec.resources``), claimed with the server; in the claims' transaction
  (``create_root_volume``, called by the conductor's ``_claimed``) the volume row is written,
  status ``creating``, and that DISK_GB is handed to it (consumer = the volume's uuid), so that
  it outlives the server when ``delete_on_termination`` is false (default true).
* ``boot_volume: VOL`` (source ``volume``): an existing bootable, ``available`` volume of the
  caller's is reserved in the transaction that records the server (``reserve``); no DISK_GB is
  claimed for the root (the volume holds its own) and the server may only land on the volume's
  host (``VolumeHostFilter``). ``delete_on_termination`` defaults to false.

Either way the attachment (device vda, boot index 0) is written with the volume's status; the host
finds the volume in ``InstanceSpec.volumes`` (a new one with its image: the compute manager makes
it before spawning). A built server's root volume goes ``in-use`` (``built``); a build that fails
for good frees it (``release_failed_build``): a new one is removed with its claim, an existing one
is ``available`` again. A server's delete is ``attachments.release_server``'s, as for any volume.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from novakit import exceptions, quota
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.models import Allocation, Volume, VolumeAttachment, utcnow
from novakit.volume import volumes
from novakit.volume.states import VolumeStatus, set_status

ROOT_DEVICE = "vda"


def request_fields(
    session: Session, ctx: RequestContext, req: Any, image: Any | None
) -> tuple[dict[str, Any], Volume | None]:
    """The request spec's boot-from-volume fields (``RequestSpec.new_root_volume_gb`` ...) and the
    existing volume asked for, checked: each refusal names the field and the rule.

    ``image``: the image row of the request (None when only ``boot_volume`` names the root).
    """
    if req.boot_from_volume is not None:
        assert image is not None
        needed = volumes.image_min_gb(image)
        if req.boot_from_volume < needed:
            raise exceptions.ValidationError(
                "boot_from_volume",
                f"{req.boot_from_volume} GiB is smaller than image {image.name}'s {needed} GiB "
                "(its min_disk/size)",
            )
        keep = req.delete_on_termination
        return {
            "new_root_volume_gb": req.boot_from_volume,
            "delete_root_volume_on_termination": True if keep is None else keep,
        }, None
    if req.boot_volume is None:
        return {}, None
    try:
        v = volumes.get(session, ctx, req.boot_volume)
    except exceptions.VolumeNotFound:
        raise exceptions.ValidationError(
            "boot_volume", f"no volume {req.boot_volume!r} in project {ctx.project_id}"
        ) from None
    if v.project_id != ctx.project_id:
        raise exceptions.ValidationError(
            "boot_volume",
            f"volume {v.name} is project {v.project_id}'s; a server boots from its own project's",
        )
    if not v.bootable:
        raise exceptions.ValidationError(
            "boot_volume", f"volume {v.name} is not bootable (it was not made from an image)"
        )
    if v.status != VolumeStatus.AVAILABLE.value:
        raise exceptions.ValidationError(
            "boot_volume", f"volume {v.name} is {v.status}; a server boots only from an available volume"
        )
    return {
        "delete_root_volume_on_termination": bool(req.delete_on_termination),
        "boot_volume": {"id": v.uuid, "name": v.name, "host": v.host or ""},
    }, v


def _attachment(volume_id: int, instance_uuid: str, delete_on_termination: bool) -> VolumeAttachment:
    return VolumeAttachment(
        uuid=str(uuidlib.uuid4()),
        volume_id=volume_id,
        instance_uuid=instance_uuid,
        device_name=ROOT_DEVICE,
        boot_index=0,
        delete_on_termination=delete_on_termination,
        attach_status="attaching",
    )


def reserve(session: Session, spec: dict[str, Any], instance_uuid: str) -> None:
    """The existing root volume of ``spec`` (a request spec as stored) taken for the server, in
    the transaction that records it: ``available -> reserved`` compare-and-swap, so of two
    servers asking for one volume at the same moment one is refused (InvalidVolume)."""
    wanted = spec.get("boot_volume")
    if not wanted:
        return
    row = session.execute(
        select(Volume).where(Volume.uuid == wanted["id"], Volume.deleted == 0)
    ).scalar_one_or_none()
    if row is None:
        raise exceptions.VolumeNotFound(volume=wanted["name"])
    set_status(session, row.id, "reserve", name=row.name)
    session.add(_attachment(row.id, instance_uuid, bool(spec.get("delete_root_volume_on_termination"))))
    session.flush()


def create_root_volume(
    session: Session, inst: Any, spec: dict[str, Any], host: str, *, conf: Config | None = None
) -> None:
    """In the claims' transaction: the new root volume's row and attachment for ``inst`` on
    ``host``, and the volume's size of the server's DISK_GB claim there handed to the volume.

    With ``conf`` (the first claim of the request), the quotas ``volumes`` and ``gigabytes``,
    checked by the API before, are rechecked with the row written, as a volume's create does
    (``quota.recheck``, under the project's lock): of two boots that passed the first check
    together, the one that would go beyond the limit raises OverQuota and its claims roll back.
    A reschedule passes none: its request was counted, and its last host's volume just went.

    Idempotent per server: a server that already has a root volume gets no second one.
    """
    size = spec.get("new_root_volume_gb")
    if not size:
        return
    held = session.execute(
        select(VolumeAttachment.id).where(
            VolumeAttachment.instance_uuid == inst.uuid,
            VolumeAttachment.boot_index == 0,
            VolumeAttachment.deleted == 0,
        )
    ).first()
    if held is not None:
        return
    volume_uuid = str(uuidlib.uuid4())
    row = Volume(
        uuid=volume_uuid,
        # Cinder leaves it nameless; here names are what people type, so the server's and a tag.
        name=f"{inst.display_name[:240]}-root-{volume_uuid[:8]}",
        project_id=inst.project_id,
        user_id=inst.user_id,
        size=size,
        status=VolumeStatus.CREATING.value,
        host=host,
        image_id=inst.image_ref,
        bootable=True,
    )
    session.add(row)
    session.flush()
    if conf is not None:
        quota.recheck(session, conf, inst.project_id, {"volumes": 1, "gigabytes": size})
    session.add(_attachment(row.id, inst.uuid, bool(spec.get("delete_root_volume_on_termination", True))))
    _hand_disk_claim(session, inst.uuid, volume_uuid, size)


def _hand_disk_claim(session: Session, instance_uuid: str, volume_uuid: str, size: int) -> None:
    """``size`` GiB of the server's DISK_GB claim handed to its root volume: the same amount on
    the same provider changes consumer, so no capacity moves and none is checked."""
    claim = session.execute(
        select(Allocation).where(
            Allocation.consumer_id == instance_uuid, Allocation.resource_class == "DISK_GB"
        )
    ).scalar_one_or_none()
    if claim is None or claim.used < size:
        raise exceptions.ComputeError(
            reason=f"server {instance_uuid}'s claim holds no {size} GiB of DISK_GB for its root volume"
        )
    if claim.used == size:
        claim.consumer_id = volume_uuid
    else:
        claim.used -= size
        session.add(
            Allocation(
                resource_provider_id=claim.resource_provider_id,
                consumer_id=volume_uuid,
                resource_class="DISK_GB",
                used=size,
                project_id=claim.project_id,
                user_id=claim.user_id,
            )
        )
    session.flush()


def _roots(session: Session, instance_uuids: list[str]) -> list[tuple[Volume, VolumeAttachment]]:
    if not instance_uuids:
        return []
    return [
        (v, a)
        for v, a in session.execute(
            select(Volume, VolumeAttachment)
            .join(Volume, Volume.id == VolumeAttachment.volume_id)
            .where(
                VolumeAttachment.instance_uuid.in_(instance_uuids),
                VolumeAttachment.boot_index == 0,
                VolumeAttachment.deleted == 0,
            )
        ).all()
    ]


def root_volume(session: Session, instance_uuid: str) -> Volume | None:
    """The server's root volume (boot index 0), or None: it boots from an image's disk."""
    found = _roots(session, [instance_uuid])
    return found[0][0] if found else None


def check_rebuild_image(session: Session, inst: Any, image: Any) -> None:
    """A volume-backed server is rebuilt only with the image its root volume was made from, as
    Nova before microversion 2.93 has it: novakit does not reimage a volume (its data is the
    user's), so a rebuild with another image would say one thing and boot another."""
    root = root_volume(session, inst.uuid)
    if root is None or image.uuid == root.image_id:
        return
    raise exceptions.ValidationError(
        "options.image",
        f"server {inst.display_name} boots from volume {root.name}, made from image "
        f"{root.image_id or '(none)'}, not {image.name} ({image.uuid}); a volume-backed server is "
        "rebuilt only with its own image (its root volume is not reimaged)",
    )


def built(session: Session, instance_uuids: list[str]) -> None:
    """The root volumes of servers that built: ``in-use``, attached (with the servers' write)."""
    for v, a in _roots(session, instance_uuids):
        if a.attach_status != "attached":
            set_status(session, v.id, "booted", name=v.name)
            a.attach_status = "attached"
            a.updated_at = utcnow()


def release_failed_build(session: Session, instance_uuid: str) -> None:
    """A build that failed for good lets its root volume go, with the server's error write: a new
    one (still ``creating``: the host removed its disk) is deleted with its claim; an existing
    one is ``available`` again for another server."""
    from novakit.placement.allocations import remove_allocations_in_session

    now = utcnow()
    for v, a in _roots(session, [instance_uuid]):
        a.deleted = a.id
        a.deleted_at = now
        if v.status == VolumeStatus.CREATING.value:
            session.execute(
                update(Volume)
                .where(Volume.id == v.id, Volume.deleted == 0, Volume.status == VolumeStatus.CREATING.value)
                .values(deleted=Volume.id, deleted_at=now, updated_at=now)
            )
            remove_allocations_in_session(session, v.uuid)
        else:
            set_status(session, v.id, "unreserve", name=v.name)
    session.flush()


def must_stay_on(session: Session, instance_uuid: str) -> str | None:
    """Why the server cannot be rescheduled to another host, else None: its root disk is an
    existing volume, which lives in this host's pool (a new one is made again on the next host:
    ``release_failed_build`` then ``create_root_volume`` in the reschedule's write)."""
    for v, _ in _roots(session, [instance_uuid]):
        if v.status != VolumeStatus.CREATING.value:
            return f"its root disk is volume {v.name}, which lives on host {v.host}"
    return None
