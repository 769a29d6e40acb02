"""Volumes (Cinder's API): create, list, show, delete, and what a host needs to know of one.

A volume lives in one host's storage pool, so its size is a claim of ``DISK_GB`` on that host's
resource provider, held by the volume (consumer = its uuid), written in the transaction that
inserts its row: a size beyond the host's free space is refused with nothing written. The quota
(``volumes``, ``gigabytes``) is checked before and rechecked in that transaction. The host then
makes it (``volume_create`` through ``novakit.compute.rpc``) and the status goes ``available``, or
``error`` with the host's reason and the claim freed. Deleting asks the host to remove it, then
soft-deletes the row and frees the claim in one transaction. A volume's zone is its host's
(``novakit.fleet.aggregates``): a create may ask for one, and only its hosts are chosen from.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import or_, select
from sqlalchemy import update as update_stmt
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy, quota
from novakit.catalog import images
from novakit.compute import schemas
from novakit.compute.views import host_shown
from novakit.context import RequestContext
from novakit.db.models import (
    Inventory,
    ResourceProvider,
    Service,
    Volume,
    VolumeAttachment,
    utcnow,
)
from novakit.fleet import aggregates, hosts
from novakit.host.messages import ComputeRequest, ComputeResult, Fault, VolumeSpec
from novakit.placement.allocations import claim_in_session, remove_allocations_in_session
from novakit.volume.states import ATTACHED, STEPS, VolumeStatus, set_status

if TYPE_CHECKING:
    from novakit.compute.rpc import ComputeRPC
    from novakit.config import Config
    from novakit.db.engine import Database


class Services(Protocol):
    """What the volume API works with: the conductor (``API.conductor``) has all three."""

    db: Database
    conf: Config
    rpc: ComputeRPC


GiB = 1024**3
FORMATS = ("qcow2", "raw")


# --- look-ups and views ------------------------------------------------------------------


def get(session: Session, ctx: RequestContext, ref: str) -> Volume:
    """A live volume of the caller's project (any project for an admin) by uuid or name."""
    stmt = select(Volume).where(Volume.deleted == 0, or_(Volume.uuid == ref, Volume.name == ref))
    stmt = policy.scope(ctx, stmt, Volume.project_id)
    rows = list(session.execute(stmt.order_by((Volume.uuid == ref).desc()).limit(2)).scalars())
    if not rows:
        raise exceptions.VolumeNotFound(volume=ref)
    if len(rows) > 1 and rows[0].uuid != ref:
        raise exceptions.Invalid(reason=f"more than one volume is named {ref!r}; use its id")
    return rows[0]


def attachments_of(session: Session, volume_ids: list[int]) -> dict[int, list[VolumeAttachment]]:
    """The live attachments of the volumes, by volume row id."""
    out: dict[int, list[VolumeAttachment]] = {}
    if volume_ids:
        stmt = select(VolumeAttachment).where(
            VolumeAttachment.volume_id.in_(volume_ids), VolumeAttachment.deleted == 0
        )
        for a in session.execute(stmt).scalars():
            out.setdefault(a.volume_id, []).append(a)
    return out


def view(
    v: Volume,
    ctx: RequestContext,
    attachments: list[VolumeAttachment] | None = None,
    zone: str | None = None,
) -> dict[str, Any]:
    """A volume as ``ctx`` may see it, as Cinder shows it (``attachments`` with server_id and
    device; ``zone``: its host's availability zone, ``zone_of``).

    Its host and pool are the operator's business, as a server's are (Cinder's
    ``os-vol-host-attr:host`` is an admin's): they are shown to a caller allowed ``host:show``
    only, and are None for anyone else. Its zone is what a member chooses by, and is shown.
    """
    operator = policy.allowed(ctx, "host:show")
    return {
        "id": v.uuid,
        "name": None if v.name == v.uuid else v.name,  # an unnamed volume (``create``)
        "description": v.description,
        "size": v.size,
        "status": v.status,
        "status_reason": v.status_reason,
        "host": v.host if operator else None,
        "pool": v.pool if operator else None,
        "format": v.format,
        "availability_zone": zone,
        "bootable": bool(v.bootable),
        "image_id": v.image_id,
        "project_id": v.project_id,
        "user_id": v.user_id,
        "created_at": v.created_at.isoformat() if v.created_at else None,
        "updated_at": v.updated_at.isoformat() if v.updated_at else None,
        "attachments": [
            {
                "attachment_id": a.uuid,
                "server_id": a.instance_uuid,
                "device": f"/dev/{a.device_name}",
                "boot_index": a.boot_index,
                "delete_on_termination": bool(a.delete_on_termination),
                "attach_status": a.attach_status,
            }
            for a in attachments or []
        ],
    }


def spec(session: Session, v: Volume, attachment: VolumeAttachment | None = None) -> VolumeSpec:
    """What the volume's host needs of it; with ``attachment``, where it goes in the guest."""
    image = images.by_uuid(session, v.image_id) if v.image_id else None
    return VolumeSpec(
        id=v.uuid,
        name=v.name,
        size_gb=v.size,
        format=v.format,  # type: ignore[arg-type]
        pool=v.pool,
        # Only while it is being made: the host fills it from the image then, never again.
        image=images.spec(image) if image is not None and v.status == VolumeStatus.CREATING.value else None,
        device_name=attachment.device_name if attachment else None,
        boot_index=attachment.boot_index if attachment else None,
    )


def specs_of_server(session: Session, instance_uuid: str, volume_uuid: str | None = None) -> list[VolumeSpec]:
    """The volumes attached to a server (or being attached: they are in its definition from
    then on), root first; ``volume_uuid``: only that one."""
    stmt = (
        select(Volume, VolumeAttachment)
        .join(Volume, Volume.id == VolumeAttachment.volume_id)
        .where(VolumeAttachment.instance_uuid == instance_uuid, VolumeAttachment.deleted == 0)
        .order_by(VolumeAttachment.boot_index.is_(None), VolumeAttachment.device_name)
    )
    if volume_uuid is not None:
        stmt = stmt.where(Volume.uuid == volume_uuid)
    return [spec(session, v, a) for v, a in session.execute(stmt).all()]


# --- create --------------------------------------------------------------------------------


def _check_request(
    session: Session, name: Any, size: Any, fmt: Any, description: Any
) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    if (name_rule := schemas.name_error(name)) is not None:  # every name's rule
        errors.append(("name", name_rule))
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        errors.append(("size", f"must be a whole number of GiB, at least 1, got {size!r}"))
    if fmt not in FORMATS:
        errors.append(("format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}"))
    if description is not None and (not isinstance(description, str) or len(description) > 255):
        errors.append(("description", "must be a string of at most 255 characters"))
    return errors


def image_min_gb(image_row: Any) -> int:
    """The fewest GiB a volume made from the image may have: its min_disk, and its size."""
    return max(int(image_row.min_disk or 0), -(-int(image_row.size or 0) // GiB))


def _hosts_by_free_disk(session: Session, conf: Any, zone: str | None = None) -> list[tuple[str, int, int]]:
    """(host, provider id, free DISK_GB) of every up, enabled host (of ``zone``, when given), the
    most free first."""
    rows = session.execute(
        select(Service, ResourceProvider.id, Inventory.free)
        .join(ResourceProvider, ResourceProvider.name == Service.host)
        .join(Inventory, Inventory.resource_provider_id == ResourceProvider.id)
        .where(Service.deleted == 0, Inventory.resource_class == "DISK_GB")
        .order_by(Inventory.free.desc(), Service.host)
    ).all()
    return [
        (svc.host, rp_id, int(free))
        for svc, rp_id, free in rows
        if hosts.takes_work(svc.disabled, svc.disabled_reason, svc, conf)
        and (zone is None or aggregates.zone_of_host(session, conf, svc.host) == zone)
    ]


def _provider_of(session: Session, conf: Any, host: str) -> int:
    """The provider of ``host``, which must be registered, enabled and up (``host`` names the rule)."""
    svc = session.execute(
        select(Service).where(Service.host == host, Service.deleted == 0)
    ).scalar_one_or_none()
    rp_id = session.execute(
        select(ResourceProvider.id).where(ResourceProvider.name == host)
    ).scalar_one_or_none()
    if svc is None or rp_id is None:
        raise exceptions.ValidationError("host", f"{host!r} is not a registered compute host")
    state = hosts.takes_work(svc.disabled, svc.disabled_reason, svc, conf)
    if not state:
        raise exceptions.ValidationError("host", f"{host} takes no new volumes: {state.reason}")
    return int(rp_id)


def create(
    svc: Services,
    ctx: RequestContext,
    name: str | None,
    size: int,
    *,
    image: str | None = None,
    host: str | None = None,
    description: str | None = None,
    fmt: str = "qcow2",
    zone: str | None = None,
    dry_run: bool = False,
    later: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """Create a volume and have its host make it; returns it as ``show`` does.

    ``name``: None makes an unnamed volume (Cinder's): its row keeps its id as its name, since
    names are unique among a project's live volumes, and ``view`` shows none.
    ``zone``: an availability zone its host is chosen in (refused with ``host``: a host has one
    zone). ``later`` (``novakit serve``'s pool, ``later(fn, *args)``): the host makes it there,
    and the volume is returned ``creating`` once its row and claim are written (Cinder's 202).

    ``dry_run`` (check mode): the same checks and the same transaction (row, quota recheck, claim),
    rolled back, and no host asked; returns the volume as it would be once made.

    Every refusal (a bad field, a taken name, an image bigger than the size, a host that is down
    or has too little free disk, the quota) happens before or inside the one transaction that
    writes the row and the claim: a refused request leaves no row and no claim.
    """
    db, conf = svc.db, svc.conf
    volume_uuid = str(uuidlib.uuid4())
    row_name = volume_uuid if name is None else name
    with db.reader() as session:
        errors = _check_request(session, row_name, size, fmt, description)
        if zone is not None:
            errors += _check_zone(session, conf, zone, host)
        if errors:
            raise exceptions.ValidationError(errors[0][0], errors[0][1], errors)
        image_row = _source_image(session, ctx, image, size) if image else None
    quota.check_quota(db, conf, ctx.project_id, {"volumes": 1, "gigabytes": size})

    def write(session: Session) -> tuple[Volume, str]:
        chosen, rp_id = _volume_host(session, conf, host, zone)
        row = Volume(
            uuid=volume_uuid,
            name=row_name,
            description=description,
            project_id=ctx.project_id,
            user_id=ctx.user_id,
            size=size,
            status=VolumeStatus.CREATING.value,
            host=chosen,
            format=fmt,
            **_made_from(image_row),
        )
        session.add(row)
        session.flush()
        quota.recheck(session, conf, ctx.project_id, {"volumes": 1, "gigabytes": size})
        _claim_disk(session, ctx, row, rp_id)
        if dry_run:
            raise _Rehearsed({**view(row, ctx), "status": VolumeStatus.AVAILABLE.value})
        return row, chosen

    try:
        row, chosen = db.run_in_transaction(write)
    except _Rehearsed as rehearsal:
        return rehearsal.made
    except IntegrityError:
        raise _name_taken(row_name, ctx.project_id) from None
    if later is not None:
        later(_make_on_host, svc, ctx, row, chosen)
    else:
        _make_on_host(svc, ctx, row, chosen)
    return show(svc, ctx, volume_uuid)


def _check_zone(session: Session, conf: Any, zone: Any, host: str | None) -> list[tuple[str, str]]:
    if not isinstance(zone, str) or not zone:
        return [("availability_zone", "must be the name of an availability zone")]
    if host is not None:
        return [("availability_zone", "is chosen by the host named; give one of them only")]
    known = {aggregates.zone_of_host(session, conf, h) for h, _, _ in _hosts_by_free_disk(session, conf)}
    if zone not in known:
        return [("availability_zone", f"{zone!r} is no zone with a host up and enabled to hold the volume")]
    return []


def _source_image(session: Session, ctx: RequestContext, image: str, size: int) -> Any:
    """The image a volume is made from: one the caller may use, and no bigger than ``size``."""
    image_row = images.usable(session, ctx, image)
    needed = image_min_gb(image_row)
    if size < needed:
        raise exceptions.ValidationError(
            "size",
            f"{size} GiB is smaller than image {image_row.name}'s {needed} GiB (its min_disk/size)",
        )
    return image_row


def _made_from(image_row: Any) -> dict[str, Any]:
    """A volume's columns that its source image sets (none: an empty volume, not bootable)."""
    return {"image_id": image_row.uuid if image_row is not None else None, "bootable": image_row is not None}


def _volume_host(session: Session, conf: Any, host: str | None, zone: str | None = None) -> tuple[str, int]:
    """The host a new volume goes to and its provider: the one asked for, else the up and
    enabled host (of ``zone``) with the most free disk."""
    if host is not None:
        return host, _provider_of(session, conf, host)
    candidates = _hosts_by_free_disk(session, conf, zone)
    if not candidates:
        raise exceptions.ValidationError("host", "no compute host is up and enabled to hold the volume")
    return candidates[0][0], candidates[0][1]


def _claim_disk(session: Session, ctx: RequestContext, row: Volume, rp_id: int) -> None:
    """The volume's DISK_GB claimed on its host; refused when it does not fit there."""
    claimed = claim_in_session(session, row.uuid, rp_id, {"DISK_GB": row.size}, ctx.project_id, ctx.user_id)
    if not claimed.claimed:
        where = host_shown(ctx, row.project_id, row.host or "")  # a member gets its host_id
        raise exceptions.ValidationError(
            "size", f"{row.size} GiB does not fit host {where}: {claimed.reason}"
        )


def _name_taken(name: str, project_id: str) -> exceptions.ValidationError:
    return exceptions.ValidationError(
        "name", f"a volume named {name!r} exists in project {project_id}; names are unique among live volumes"
    )


def _make_on_host(svc: Services, ctx: RequestContext, row: Volume, chosen: str) -> None:
    """The host makes the volume: ``available`` once it did; otherwise ``error`` with its
    reason, and its claim freed."""
    with svc.db.reader() as session:
        request = ComputeRequest(
            request_id=ctx.request_id, host=chosen, operation="volume_create", volumes=[spec(session, row)]
        )
    fault = outcome(svc.rpc.send(request), row.uuid)
    if fault is None:
        svc.db.run_in_transaction(lambda s: set_status(s, row.id, "created", name=row.name))
        return

    def failed(session: Session) -> None:
        set_status(session, row.id, "create_failed", name=row.name, reason=fault.message[:255])
        remove_allocations_in_session(session, row.uuid)

    svc.db.run_in_transaction(failed)


class _Rehearsed(Exception):  # noqa: N818 - not an error: it ends a dry run's transaction
    """Rolls a dry run's transaction back, carrying the volume it would have made."""

    def __init__(self, made: dict[str, Any]) -> None:
        super().__init__("dry run")
        self.made = made


def outcome(result: ComputeResult, volume_uuid: str) -> Fault | None:
    """None if the host did what it was asked to the volume, else the fault that says why."""
    res = next((r for r in result.results if r.uuid == volume_uuid), None)
    if res is not None and res.ok:
        return None
    fault = (res.fault if res is not None else None) or result.error
    return fault or Fault(message="the host returned no result", exception_class="VolumeBackendError")


# --- reads ---------------------------------------------------------------------------------


def zone_of(session: Session, conf: Any, v: Volume) -> str | None:
    """A volume's availability zone: its host's (none while it has no host)."""
    return aggregates.zone_of_host(session, conf, v.host) if v.host else None


def show(svc: Services, ctx: RequestContext, ref: str) -> dict[str, Any]:
    with svc.db.reader() as session:
        v = get(session, ctx, ref)
        return view(v, ctx, attachments_of(session, [v.id]).get(v.id, []), zone_of(session, svc.conf, v))


def list_volumes(svc: Services, ctx: RequestContext, *, all_projects: bool = False) -> list[dict[str, Any]]:
    """The caller's live volumes (every project's for an admin who asks, as for servers), by name."""
    if all_projects:
        policy.authorize(ctx, "servers:all_projects")
    with svc.db.reader() as session:
        stmt = select(Volume).where(Volume.deleted == 0).order_by(Volume.name, Volume.id)
        if not all_projects:
            stmt = stmt.where(Volume.project_id == ctx.project_id)
        rows = list(session.execute(stmt).scalars())
        attached = attachments_of(session, [v.id for v in rows])
        zones = {h: aggregates.zone_of_host(session, svc.conf, h) for h in {v.host for v in rows if v.host}}
        return [view(v, ctx, attached.get(v.id, []), zones.get(v.host or "")) for v in rows]


# --- update --------------------------------------------------------------------------------

#: what ``update`` may change
UPDATABLE = ("name", "description")


def update(svc: Services, ctx: RequestContext, ref: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Rename a volume (None: unnamed) or change its description (Cinder's ``PUT /volumes/{id}``),
    in any status: neither is seen by its host. Every field is checked before anything is written; a name
    taken by another live volume of the project is refused. Returns the volume as ``show`` does."""
    unknown = sorted(set(changes) - set(UPDATABLE))
    if unknown:
        raise exceptions.ValidationError(unknown[0], "cannot be changed (only name and description)")
    errors: list[tuple[str, str]] = []
    named = changes.get("name") is not None
    if named and (rule := schemas.name_error(changes["name"])) is not None:
        errors.append(("name", rule))
    description = changes.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > 255):
        errors.append(("description", "must be a string of at most 255 characters"))
    if errors:
        raise exceptions.ValidationError(errors[0][0], errors[0][1], errors)

    def write(session: Session) -> str:
        v = get(session, ctx, ref)
        values = {k: changes[k] for k in UPDATABLE if k in changes}
        if "name" in values and values["name"] is None:
            values["name"] = v.uuid  # unnamed, as ``create`` keeps it
        if values:
            session.execute(
                update_stmt(Volume)
                .where(Volume.id == v.id, Volume.deleted == 0)
                .values(**values, updated_at=utcnow())
            )
            session.flush()
        return v.uuid

    try:
        volume_uuid = svc.db.run_in_transaction(write)
    except IntegrityError:
        raise _name_taken(str(changes.get("name")), ctx.project_id) from None
    return show(svc, ctx, volume_uuid)


# --- delete --------------------------------------------------------------------------------


def delete(svc: Services, ctx: RequestContext, ref: str, *, dry_run: bool = False) -> dict[str, Any]:
    """Delete a volume: refused while it is attached or reserved (Cinder's rule); its host removes
    it, then the row is soft-deleted and its claim freed. A host that fails leaves error_deleting
    with the reason, and a second delete tries again. ``dry_run``: the checks, nothing changed."""
    db = svc.db

    def start(session: Session) -> Volume:
        v = get(session, ctx, ref)
        can_start = STEPS["delete"].from_
        if dry_run and v.status not in can_start and v.status not in ATTACHED:
            # what the real run's guarded step would refuse, said before anything is done
            raise exceptions.InvalidVolume(
                reason=f"volume {v.name} is {v.status}; "
                f"to be deleted it must be {' or '.join(sorted(can_start))}"
            )
        if v.status in ATTACHED:
            servers = [a.instance_uuid for a in attachments_of(session, [v.id]).get(v.id, [])]
            raise exceptions.InvalidVolume(
                reason=f"volume {v.name} is {v.status} (attached to server {', '.join(servers) or '-'}); "
                "detach it before deleting it"
            )
        if not dry_run:
            set_status(session, v.id, "delete", name=v.name)
        return v

    if dry_run:
        with db.reader() as session:
            gone = view(start(session), ctx)
        return {**gone, "status": "deleted"}
    v = db.run_in_transaction(start)
    fault = None
    if v.host:
        fault = outcome(delete_on_host(svc, ctx.request_id, v), v.uuid)
    if fault is not None:
        db.run_in_transaction(
            lambda s: set_status(s, v.id, "delete_failed", name=v.name, reason=fault.message[:255])
        )
        return show(svc, ctx, v.uuid)
    db.run_in_transaction(lambda s: finish_delete(s, v))
    out = view(v, ctx)
    out["status"] = "deleted"
    return out


def delete_on_host(svc: Services, request_id: str, v: Volume) -> ComputeResult:
    """The host's ``volume_delete`` of ``v`` (which is ``deleting``), as the host answered it."""
    with svc.db.reader() as session:
        request = ComputeRequest(
            request_id=request_id, host=v.host or "", operation="volume_delete", volumes=[spec(session, v)]
        )
    return svc.rpc.send(request)


def finish_delete(session: Session, v: Volume) -> None:
    """A ``deleting`` volume its host has removed: its row soft-deleted, its claim freed."""
    session.execute(
        update_stmt(Volume)
        .where(Volume.id == v.id, Volume.deleted == 0, Volume.status == VolumeStatus.DELETING.value)
        .values(deleted=Volume.id, deleted_at=utcnow(), updated_at=utcnow())
    )
    remove_allocations_in_session(session, v.uuid)
