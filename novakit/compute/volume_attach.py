"""Attaching a volume to a server and detaching it: the front door's side (``server add volume``).

The server's checks and its instance action are every action's (``API.act``: a dry run first,
then the deferred action); the volume's checks and guarded steps are the volume package's
(``novakit.volume.attachments``), called from here and never calling back. An attach:

1. the server's checks, a dry run of ``act`` (it exists in the caller's project, its lock, the
   state table's ``attach_volume`` row, it has a host). The volume is not reserved yet, so that
   dry run ends in the action's own step refusing it for that (VolumeNotReserved): being
   ``act``'s last check, that refusal alone says the server passed all of its own;
2. the reservation (``attachments.reserve``);
3. the action, ``act(..., defer=True)``: its instance action is recorded, and a server that
   changed meanwhile refuses it (the reservation is then undone);
4. ``attaching``, the host's ``attach_volume`` with its result recorded as every action's, and
   ``in-use`` or, when the host failed, ``available`` again and the host's fault raised.

A detach is the mirror. A dry run (check mode) is steps 1 and 2's checks, with nothing written.

``ensure`` is the declarative form (the ``volume_attachment`` module's ``state``): whether the
volume is already where it is asked to be is decided there, once, for every face that asks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.context import RequestContext
from novakit.volume import attachments, volumes

if TYPE_CHECKING:
    from novakit.compute.api import API


def _server(
    api: API, ctx: RequestContext, ref: str, action: str, volume_ref: str
) -> tuple[str, dict[str, Any]]:
    """The volume's id; the server's checks of ``action`` (a dry run of ``act``), and what the
    volume's steps need of the server. (A volume already reserved for this server passes the
    dry run; the reservation then refuses it as not ``available``.)"""
    from novakit.cells import instances as cell_instances

    with api.db.reader() as session:
        volume_id = volumes.get(session, ctx, volume_ref).uuid

    try:
        outcome = api.act(ctx, ref, action, {"volume_id": volume_id}, dry_run=True)
        assert outcome.server is not None
        uuid = outcome.server["id"]
    except exceptions.VolumeNotReserved as exc:
        uuid = exc.instance_uuid
    found = cell_instances.get_many(api.db, RequestContext.admin(ctx.request_id), [uuid])
    if not found:
        raise exceptions.InstanceNotFound(instance_id=ref)
    inst = found[0]
    return volume_id, {
        "id": inst.uuid,
        "name": inst.display_name,
        "host": inst.host,
        "flavor": dict(inst.flavor or {}),
        "config_drive": bool(inst.config_drive),
    }


def attach(
    api: API,
    ctx: RequestContext,
    server_ref: str,
    volume_ref: str,
    device: str | None = None,
    *,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Attach a volume to a server (``server add volume``); returns the volume as ``show`` does."""
    db = api.db
    volume_id, server = _server(api, ctx, server_ref, "attach_volume", volume_ref)
    if dry_run:

        def check(session: Session) -> None:
            attachments.check_attach(session, ctx, server, volume_ref)
            attachments.choose_device(session, server, device)

        return _checked(api, ctx, volume_id, check)
    try:
        row_id, chosen = db.run_in_transaction(
            lambda s: attachments.reserve(s, ctx, server, volume_ref, device)
        )
    except IntegrityError:
        raise exceptions.InvalidVolume(
            reason=f"volume {volume_ref} or device {device or '(next free)'} of server {server['name']} "
            "was taken by another attach meanwhile; try again"
        ) from None
    try:
        outcome = api.act(ctx, server["id"], "attach_volume", {"volume_id": volume_id}, defer=True)
    except Exception:
        db.run_in_transaction(lambda s: attachments.unreserve(s, row_id))
        raise
    db.run_in_transaction(lambda s: attachments.start_attach(s, row_id))
    ok, fault = run_on_host(api, ctx, outcome.request)
    db.run_in_transaction(lambda s: attachments.end_attach(s, row_id, ok))
    if not ok:
        raise exceptions.VolumeBackendError(
            volume=volume_ref, reason=f"attaching as {chosen} failed: {fault}"
        )
    return volumes.show(api.conductor, ctx, volume_id)


def detach(
    api: API, ctx: RequestContext, server_ref: str, volume_ref: str, *, dry_run: bool = False
) -> dict[str, Any]:
    """Detach a volume from a server (``server remove volume``); returns the volume."""
    db = api.db
    volume_id, server = _server(api, ctx, server_ref, "detach_volume", volume_ref)
    if dry_run:
        return _checked(api, ctx, volume_id, lambda s: attachments.check_detach(s, ctx, server, volume_ref))
    row_id = db.run_in_transaction(lambda s: attachments.begin_detach(s, ctx, server, volume_ref))
    try:
        outcome = api.act(ctx, server["id"], "detach_volume", {"volume_id": volume_id}, defer=True)
    except Exception:
        db.run_in_transaction(lambda s: attachments.end_detach(s, row_id, still_attached=True))
        raise
    ok, fault = run_on_host(api, ctx, outcome.request)
    db.run_in_transaction(lambda s: attachments.end_detach(s, row_id, still_attached=not ok))
    if not ok:
        raise exceptions.VolumeBackendError(volume=volume_ref, reason=f"detaching failed: {fault}")
    return volumes.show(api.conductor, ctx, volume_id)


def ensure(
    api: API,
    ctx: RequestContext,
    server_ref: str,
    volume_ref: str,
    device: str | None = None,
    *,
    attached: bool = True,
    dry_run: bool = False,
) -> dict[str, Any]:
    """The volume attached to the server (``attached``) or not; ``{"changed": ..., "volume": ...}``.

    A volume already attached to the server is left as it is, unless ``device`` names another
    device than the one it has (refused: a device does not change while attached); one not
    attached to it is attached (``attach``, which refuses a volume in use by another server).
    A volume not attached to the server is left as it is by ``attached=False``; one attached is
    detached. ``dry_run``: what the real run would change and every check it would run, nothing
    written; the volume as it is.
    """
    server = api.get(ctx, server_ref)
    vol = volumes.show(api.conductor, ctx, volume_ref)
    held = next((a for a in vol["attachments"] if a["server_id"] == server["id"]), None)
    if not attached:
        if held is None:
            return {"changed": False, "volume": vol}
        return {"changed": True, "volume": detach(api, ctx, server["id"], vol["id"], dry_run=dry_run)}
    if held is None:
        return {"changed": True, "volume": attach(api, ctx, server["id"], vol["id"], device, dry_run=dry_run)}
    if device is not None and _device_of(device) != _device_of(held["device"]):
        raise exceptions.ValidationError(
            "device",
            f"volume {vol['name'] or vol['id']} is attached to server {server['name']} as {held['device']}, "
            f"not {device}; a device does not change while attached: detach the volume first",
        )
    return {"changed": False, "volume": vol}


def _device_of(given: str) -> str:
    """A device as the guest names it (``vdb``), given with or without ``/dev/``."""
    return given.rsplit("/", 1)[-1]


def _checked(
    api: API, ctx: RequestContext, volume_id: str, check: Callable[[Session], object]
) -> dict[str, Any]:
    """Check mode: the real run's checks, nothing written; the volume as it is."""
    with api.db.reader() as session:
        check(session)
    return volumes.show(api.conductor, ctx, volume_id)


def run_on_host(api: API, ctx: RequestContext, request: Any) -> tuple[bool, str]:
    """Send the action's request to its host and record the result as every action's is: the
    one round trip of an action its front door started with ``act(..., defer=True)`` (a volume's
    here, an interface's in ``novakit.compute.interfaces``). Whether the host did it, and its
    fault's message when not."""
    if request is None:
        return False, "no host holds the server"
    result = api.conductor.rpc.send(request)
    api.conductor.record_action_result(ctx, request, result)
    res = next((r for r in result.results if r.uuid == request.instances[0].uuid), None)
    if res is not None and res.ok:
        return True, ""
    fault = (res.fault if res is not None else None) or result.error
    return False, fault.message if fault else "the host returned no result"
