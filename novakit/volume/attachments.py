"""A volume's side of attaching it to a server and detaching it: the guarded steps and checks.

The server's side (its checks, its instance action, the host's ``attach_volume``) is the compute
front door's, ``novakit.compute.volume_attach``, which calls the steps here in this order
(Nova's ``reserve_block_device_name`` + Cinder's attachment); this module never calls back up:

1. ``reserve``: in one transaction, the volume is the caller's, on the server's host,
   ``available`` (``check_attach``); the device is valid and free (``choose_device``: the next
   free ``vdX`` after the server's own disks when none is given); ``available -> reserved``
   compare-and-swap and the attachment row (unique per volume and per device of a server, so a
   racing attach loses here); ``unreserve`` undoes it when the action is refused;
2. ``start_attach``: ``reserved -> attaching`` once the action is recorded; ``end_attach``:
   ``in-use``, or ``available`` again with the attachment removed when the host failed.

A detach is the mirror (``begin_detach``: ``in-use -> detaching``; ``end_detach``); a root
volume (boot index 0) is never detached. A server's delete releases its attachments in the
records (``release_server``), and heal does the same for servers that vanished, and settles the
volumes whose caller is gone (``novakit.heal.volumes``, with ``unreserve``, ``end_attach`` and
``end_detach``).

The actions themselves start only on what the reservation leaves (``check_reserved``, their step
in ``novakit.compute.prepare``): ``API.act(server, "attach_volume", ...)`` called around the front
door's attach is refused (VolumeNotReserved, naming ``options.volume_id``) with nothing changed.

A server is given to this module as the dict the front door reads (``id``, ``name``, ``host``,
``flavor``, ``config_drive``): what the volume's checks need, and nothing to call.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid as uuidlib
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.compute.views import host_shown
from novakit.context import RequestContext
from novakit.db.models import Volume, VolumeAttachment, utcnow
from novakit.volume import volumes
from novakit.volume.states import VolumeStatus, set_status

_DEVICE = re.compile(r"^(/dev/)?(vd[a-z])$")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def local_disk_count(server: dict[str, Any]) -> int:
    """How many ``vdX`` devices a server's own disks take (root, ephemeral, swap, config drive),
    in the order the libvirt driver defines them; volumes come after them."""
    flavor = server.get("flavor") or {}
    return (
        1
        + bool(flavor.get("ephemeral_gb"))
        + bool(flavor.get("swap"))
        + bool(server.get("config_drive", True))
    )


def choose_device(session: Session, server: dict[str, Any], given: str | None) -> str:
    """The device the volume gets: ``given`` if valid and free, else the next free one."""
    taken = set(
        session.execute(
            select(VolumeAttachment.device_name).where(
                VolumeAttachment.instance_uuid == server["id"], VolumeAttachment.deleted == 0
            )
        ).scalars()
    )
    first = local_disk_count(server)
    own = {f"vd{c}" for c in _LETTERS[:first]}
    if given is not None:
        m = _DEVICE.match(given)
        if m is None:
            raise exceptions.ValidationError("device", f"must be vdb .. vdz (or /dev/vdb ...), got {given!r}")
        device = m.group(2)
        if device in own:
            raise exceptions.ValidationError(
                "device",
                f"{device} is one of server {server['id']}'s own disks (vda .. vd{_LETTERS[first - 1]})",
            )
        if device in taken:
            raise exceptions.ValidationError(
                "device", f"{device} of server {server['id']} holds another volume"
            )
        return device
    for c in _LETTERS[first:]:
        if f"vd{c}" not in taken:
            return f"vd{c}"
    raise exceptions.ValidationError("device", f"server {server['id']} has no free device left (vdb .. vdz)")


#: the statuses the reservation leaves a volume in for each action (with its attachment to the
#: server): what the action finds when this module asked for it
RESERVED_FOR = {
    "attach_volume": frozenset({VolumeStatus.RESERVED, VolumeStatus.ATTACHING}),
    "detach_volume": frozenset({VolumeStatus.DETACHING}),
}
_HOW = {
    "attach_volume": "reserved for it (reserved or attaching, with its attachment) by an attach "
    "(novakit.compute.volume_attach.attach, `novakit server add volume`), which checks and reserves it",
    "detach_volume": "marked detaching from it by a detach (novakit.compute.volume_attach.detach, "
    "`novakit server remove volume`)",
}


def check_reserved(session: Session, instance_uuid: str, volume_uuid: str, action: str) -> None:
    """The step of ``attach_volume`` / ``detach_volume``: the volume is where this module's
    reservation leaves it for the server (``RESERVED_FOR``), else VolumeNotReserved."""
    row = session.execute(
        select(Volume.status, VolumeAttachment.instance_uuid)
        .outerjoin(
            VolumeAttachment,
            (VolumeAttachment.volume_id == Volume.id) & (VolumeAttachment.deleted == 0),
        )
        .where(Volume.uuid == volume_uuid, Volume.deleted == 0)
    ).first()
    if row is not None and row.status in RESERVED_FOR[action] and row.instance_uuid == instance_uuid:
        return
    if row is None:
        found = "not found"
    else:
        held = row.instance_uuid not in (None, instance_uuid)
        found = row.status + (f" (attached to server {row.instance_uuid})" if held else "")
    raise exceptions.VolumeNotReserved(
        instance_uuid,
        f"volume {volume_uuid} is {found}; {action} of server {instance_uuid} starts only on a volume "
        f"{_HOW[action]}",
    )


def check_attach(session: Session, ctx: RequestContext, server: dict[str, Any], ref: str) -> Volume:
    """The volume can be attached to ``server``: the caller's, on the server's host, ``available``."""
    v = volumes.get(session, ctx, ref)
    if v.host != server["host"]:
        # Each host as the caller may see it: a member gets its host_id, never its name.
        on = host_shown(ctx, v.project_id, v.host or "")
        server_on = host_shown(ctx, v.project_id, server["host"] or "")
        raise exceptions.InvalidVolume(
            reason=f"volume {v.name} is on host {on}, server {server['name']} on host {server_on}; "
            "a volume attaches only to servers on its host"
        )
    if v.status != VolumeStatus.AVAILABLE.value:
        held = volumes.attachments_of(session, [v.id]).get(v.id, [])
        by = f" (attached to server {held[0].instance_uuid})" if held else ""
        raise exceptions.InvalidVolume(
            reason=f"volume {v.name} is {v.status}{by}; only an available volume can be attached"
        )
    return v


def reserve(
    session: Session, ctx: RequestContext, server: dict[str, Any], volume_ref: str, device: str | None
) -> tuple[int, str]:
    """Step 1 of an attach: the volume ``reserved`` for ``server`` with its attachment row on the
    device chosen; returns (the volume's row id, the device). Racing attaches: IntegrityError."""
    v = check_attach(session, ctx, server, volume_ref)
    chosen = choose_device(session, server, device)
    set_status(session, v.id, "reserve", name=v.name)
    session.add(
        VolumeAttachment(
            uuid=str(uuidlib.uuid4()),
            volume_id=v.id,
            instance_uuid=server["id"],
            device_name=chosen,
            boot_index=None,
            delete_on_termination=False,
            attach_status="attaching",
        )
    )
    session.flush()
    return v.id, chosen


def start_attach(session: Session, volume_row_id: int) -> None:
    """Step 2 of an attach, once its action is recorded: ``reserved -> attaching``."""
    set_status(session, volume_row_id, "attach")


def check_detach(session: Session, ctx: RequestContext, server: dict[str, Any], ref: str) -> Volume:
    """The volume can be detached from ``server``: attached to it, and not its root disk."""
    v = volumes.get(session, ctx, ref)
    att = next(
        (a for a in volumes.attachments_of(session, [v.id]).get(v.id, []) if a.instance_uuid == server["id"]),
        None,
    )
    if att is None:
        raise exceptions.InvalidVolume(reason=f"volume {v.name} is not attached to server {server['name']}")
    if att.boot_index == 0:
        raise exceptions.InvalidVolume(
            reason=f"volume {v.name} is the root disk of server {server['name']} (boot index 0); "
            "a root volume cannot be detached"
        )
    return v


def begin_detach(session: Session, ctx: RequestContext, server: dict[str, Any], volume_ref: str) -> int:
    """Step 1 of a detach: ``in-use -> detaching``; returns the volume's row id."""
    v = check_detach(session, ctx, server, volume_ref)
    set_status(session, v.id, "detach", name=v.name)
    _set_attach_status(session, v.id, "detaching")
    return v.id


# --- where an attach or a detach ends (its caller's, or heal's once its caller is gone) ---------


def unreserve(session: Session, volume_row_id: int, *, unchanged_since: dt.datetime | None = None) -> None:
    """A reservation whose attach never started: the volume ``available``, the attachment gone
    (as if never made). ``unchanged_since``: only over the volume as read (``set_status``)."""
    set_status(session, volume_row_id, "unreserve", unchanged_since=unchanged_since)
    session.execute(
        delete(VolumeAttachment).where(
            VolumeAttachment.volume_id == volume_row_id, VolumeAttachment.deleted == 0
        )
    )


def end_attach(
    session: Session, volume_row_id: int, attached: bool, *, unchanged_since: dt.datetime | None = None
) -> None:
    """An ``attaching`` volume: ``in-use`` if the guest has it, else ``available`` with its
    attachment removed."""
    _settle(session, volume_row_id, "attached" if attached else "attach_failed", attached, unchanged_since)


def end_detach(
    session: Session,
    volume_row_id: int,
    *,
    still_attached: bool,
    unchanged_since: dt.datetime | None = None,
) -> None:
    """A ``detaching`` volume: ``in-use`` again if the guest still has it, else ``available``
    with its attachment removed."""
    step = "detach_failed" if still_attached else "detached"
    _settle(session, volume_row_id, step, still_attached, unchanged_since)


def _settle(
    session: Session, volume_row_id: int, step: str, attached: bool, unchanged_since: dt.datetime | None
) -> None:
    """The volume's ``step`` (``volume.states``) taken; its attachment kept, as attached, while
    the guest has it, else removed."""
    set_status(session, volume_row_id, step, unchanged_since=unchanged_since)
    if attached:
        _set_attach_status(session, volume_row_id, "attached")
    else:
        _soft_delete_attachments(session, volume_row_id)


def _set_attach_status(session: Session, volume_row_id: int, status: str) -> None:
    session.execute(
        update(VolumeAttachment)
        .where(VolumeAttachment.volume_id == volume_row_id, VolumeAttachment.deleted == 0)
        .values(attach_status=status, updated_at=utcnow())
    )


def _soft_delete_attachments(session: Session, volume_row_id: int) -> None:
    session.execute(
        update(VolumeAttachment)
        .where(VolumeAttachment.volume_id == volume_row_id, VolumeAttachment.deleted == 0)
        .values(deleted=VolumeAttachment.id, deleted_at=utcnow(), updated_at=utcnow())
    )


# --- servers that are gone -------------------------------------------------------------


def release_server(svc: volumes.Services, ctx: RequestContext, instance_uuid: str) -> list[str]:
    """A deleted server's volumes, detached in the records: its attachments soft-deleted and the
    volumes ``available``; those with ``delete_on_termination`` are then deleted. Returns the ids
    of the volumes released. Idempotent (a server with no attachments releases nothing)."""

    def write(session: Session) -> list[tuple[str, bool]]:
        rows = session.execute(
            select(Volume, VolumeAttachment)
            .join(Volume, Volume.id == VolumeAttachment.volume_id)
            .where(VolumeAttachment.instance_uuid == instance_uuid, VolumeAttachment.deleted == 0)
        ).all()
        for v, _ in rows:
            _soft_delete_attachments(session, v.id)
            set_status(session, v.id, "released", name=v.name)
        return [(v.uuid, bool(a.delete_on_termination)) for v, a in rows]

    released = svc.db.run_in_transaction(write)
    admin = RequestContext.admin(ctx.request_id)
    for volume_uuid, delete_it in released:
        if delete_it:
            volumes.delete(svc, admin, volume_uuid)
    return [u for u, _ in released]


def attached_to_gone_servers(svc: volumes.Services) -> list[tuple[str, str]]:
    """(volume uuid, server uuid) of every live attachment whose server no longer exists (heal)."""
    from novakit.cells import instances as cell_instances

    with svc.db.reader() as session:
        rows = session.execute(
            select(Volume.uuid, VolumeAttachment.instance_uuid)
            .join(Volume, Volume.id == VolumeAttachment.volume_id)
            .where(VolumeAttachment.deleted == 0)
        ).all()
    if not rows:
        return []
    live = {i.uuid for i in cell_instances.get_many(svc.db, RequestContext.admin(), [s for _, s in rows])}
    return [(v, s) for v, s in rows if s not in live]
