"""Compute v2.1, a server's sub-resources: its migrations, its volume attachments and its
interfaces (Nova's ``os-migrations``, ``server migrations``, ``os-volume_attachments`` and
``os-interface`` controllers), thin over the library.

- ``GET /os-migrations``: every move the library records (``novakit.moves.migrations``), for an
  admin only (the library's ``migration:list`` policy, Nova's too); filtered by ``host``,
  ``status``, ``instance_uuid``, ``migration_type`` and ``source_compute``; from 2.59 in pages
  (``limit``, ``marker``: a migration's uuid) and narrowed by ``changes-since`` (and from 2.66
  ``changes-before``), where an unknown query parameter answers 400, as Nova's schema of 2.59.
- ``GET /servers/{id}/migrations[/{migration_id}]`` (2.23): the server's live migrations under way
  (admin only). ``DELETE`` of one (2.24, ``openstack server migration abort``): the library's
  ``novakit.moves.abort.abort_live_migration`` (admin only; a migration ``running``, from 2.65
  ``queued`` and ``preparing`` too, else 400; not this server's, 404), the abort recorded and the
  source host asked to stop it before the answer (202); the migration then ends ``cancelled``,
  the server on its source. novakit cannot force one to complete: its ``action`` is not served.
- ``/servers/{id}/os-volume_attachments``: list, show, attach (200 with the attachment, the
  library's ``novakit.compute.volume_attach.attach``: the volume reserved, the action recorded and
  the host's attach done before the answer, so that the device shown is the one given) and detach
  (202: checked in the request by the library's dry run, done in the service's pool).
- ``/servers/{id}/os-interface``: the server's ports (``novakit.network.ports``) as Nova shows
  them: list, show, attach (200 with the interface, the library's
  ``novakit.compute.interfaces.attach``: a port given by ``port_id``, or a new one on ``net_id``
  with its ``fixed_ips`` address, bound, the action recorded and the host's attach done before
  the answer) and detach (202: checked in the request by the library's dry run, done in the
  service's pool; a port the attach or the boot made is deleted, one the user gave is kept).

A migration is named by its uuid (``id`` and, from 2.59, ``uuid``): novakit's records have no
other public id. Flavor ids of a migration (``old_instance_type_id``...) and a live migration's
progress counters are null: the library records neither.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from novakit import exceptions
from novakit.compute import interfaces, volume_attach
from novakit.moves import abort, migrations
from novakit.network import ports
from novakit.service import paging
from novakit.service.auth import Caller, caller
from novakit.service.body import read_json
from novakit.service.compute import COMPUTE, _action_time, _base, _service
from novakit.service.microversion import Version
from novakit.volume import volumes

router = APIRouter(prefix="/compute")


def _server_uuid(request: Request, who: Caller, server_id: str) -> str:
    """The server's uuid, as the caller may see it: another project's server is not found."""
    return str(_service(request).api.get(who.ctx, server_id)["id"])


# ---------------------------------------------------------------- migrations

#: Nova's ``os-migrations`` query parameters of 2.59 (another one answers 400 from there)
MIGRATION_PARAMS = frozenset(
    {"hidden", "host", "instance_uuid", "source_compute", "status", "migration_type", "limit", "marker",
     "changes-since", "changes-before"}
)  # fmt: skip
LIVE = "live-migration"


def _in_progress_live(m: dict[str, Any]) -> bool:
    return m["type"] == LIVE and m["status"] in migrations.IN_PROGRESS


def _migration(request: Request, m: dict[str, Any], version: Version) -> dict[str, Any]:
    """Nova's view of a migration (``os-migrations``) from the library's ``migrations.view``."""
    out: dict[str, Any] = {
        "id": m["id"],
        "instance_uuid": m["server"],
        "status": m["status"],
        "source_compute": m["source_compute"],
        "source_node": m["source_compute"],
        "dest_compute": m["dest_compute"],
        "dest_node": m["dest_compute"],
        "dest_host": None,
        "old_instance_type_id": None,
        "new_instance_type_id": None,
        "created_at": _action_time(m["created_at"]),
        "updated_at": _action_time(m["updated_at"]),
    }
    if version.at_least(2, 23):
        out["migration_type"] = m["type"]
        if _in_progress_live(m):
            path = f"servers/{m['server']}/migrations/{m['id']}"
            out["links"] = [
                {"rel": "self", "href": f"{_base(request)}/v2.1/{path}"},
                {"rel": "bookmark", "href": f"{_base(request)}/{path}"},
            ]
    if version.at_least(2, 59):
        out["uuid"] = m["id"]
    return out


def _changed(m: dict[str, Any]) -> dt.datetime:
    """When a migration last changed: its update, else its creation."""
    when: dt.datetime = m["updated_at"] or m["created_at"]
    return when


@router.get("/v2.1/os-migrations")
def list_migrations(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """Every server's migrations, newest first (admin only)."""
    version = COMPUTE.requested(request)
    params = request.query_params
    if version.at_least(2, 59):
        unknown = sorted(set(params) - MIGRATION_PARAMS)
        if unknown:
            raise exceptions.ValidationError(unknown[0], "is not a query parameter of os-migrations")
    found = migrations.list_migrations(
        _service(request).db,
        who.ctx,
        server=params.get("instance_uuid"),
        host=params.get("host"),
        status=params.get("status"),
    )
    found = [
        m
        for m in found
        if params.get("migration_type") in (None, m["type"])
        and params.get("source_compute") in (None, m["source_compute"])
    ]
    body: dict[str, Any] = {}
    if version.at_least(2, 59):
        found = paging.changed_between(request, found, _changed, since=True, before=version.at_least(2, 66))
        if "limit" in params or "marker" in params:
            found, following = paging.page(request, found)
            if following is not None:
                href = f"{_base(request)}/v2.1/os-migrations?{following}"
                body["migrations_links"] = [{"rel": "next", "href": href}]
    body["migrations"] = [_migration(request, m, version) for m in found]
    return COMPUTE.respond(body, version)


def _server_migration(m: dict[str, Any], version: Version) -> dict[str, Any]:
    """Nova's view of a server's live migration under way (novakit counts no bytes: null)."""
    out: dict[str, Any] = {
        "id": m["id"],
        "server_uuid": m["server"],
        "status": m["status"],
        "source_compute": m["source_compute"],
        "source_node": m["source_compute"],
        "dest_compute": m["dest_compute"],
        "dest_node": m["dest_compute"],
        "dest_host": None,
        "memory_total_bytes": None,
        "memory_processed_bytes": None,
        "memory_remaining_bytes": None,
        "disk_total_bytes": None,
        "disk_processed_bytes": None,
        "disk_remaining_bytes": None,
        "created_at": _action_time(m["created_at"]),
        "updated_at": _action_time(m["updated_at"]),
    }
    if version.at_least(2, 59):
        out["uuid"] = m["id"]
    return out


def _live_migrations(request: Request, who: Caller, server_id: str) -> tuple[Version, list[dict[str, Any]]]:
    """The server's live migrations under way; the route is Nova's from 2.23 (404 before)."""
    version = COMPUTE.requested(request)
    if not version.at_least(2, 23):
        raise exceptions.NotFound()
    uuid = _server_uuid(request, who, server_id)
    found = migrations.list_migrations(_service(request).db, who.ctx, server=uuid)
    return version, [m for m in found if _in_progress_live(m)]


@router.get("/v2.1/servers/{server_id}/migrations")
def list_server_migrations(server_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version, found = _live_migrations(request, who, server_id)
    return COMPUTE.respond({"migrations": [_server_migration(m, version) for m in found]}, version)


@router.get("/v2.1/servers/{server_id}/migrations/{migration_id}")
def show_server_migration(
    server_id: str, migration_id: str, request: Request, who: Caller = Depends(caller)
) -> JSONResponse:
    version, found = _live_migrations(request, who, server_id)
    match = [m for m in found if m["id"] == migration_id]
    if not match:
        raise exceptions.NotFound(
            f"Migration {migration_id} is not a live migration under way of this server."
        )
    return COMPUTE.respond({"migration": _server_migration(match[0], version)}, version)


@router.delete("/v2.1/servers/{server_id}/migrations/{migration_id}", status_code=202)
async def abort_server_migration(
    server_id: str, migration_id: str, request: Request, who: Caller = Depends(caller)
) -> Response:
    """Abort a live migration under way (2.24, 404 before; from 2.65 one not running yet too)."""
    version = COMPUTE.requested(request)
    if not version.at_least(2, 24):
        raise exceptions.NotFound()
    api = _service(request).api
    queued = version.at_least(2, 65)
    await run_in_threadpool(
        lambda: abort.abort_live_migration(api, who.ctx, server_id, migration_id, queued=queued)
    )
    return COMPUTE.accepted(version)


# ---------------------------------------------------------------- volume attachments


def _attachment(volume: dict[str, Any], server_uuid: str, version: Version) -> dict[str, Any]:
    """Nova's view of a volume attachment, from the volume as the library shows it."""
    attached = next(a for a in volume["attachments"] if a["server_id"] == server_uuid)
    out: dict[str, Any] = {
        "id": volume["id"],
        "volumeId": volume["id"],
        "serverId": server_uuid,
        "device": attached["device"],
    }
    if version.at_least(2, 70):
        out["tag"] = None  # novakit keeps no attachment tags
    if version.at_least(2, 79):
        out["delete_on_termination"] = attached["delete_on_termination"]
    return out


def _attached(request: Request, who: Caller, server_id: str) -> tuple[str, list[dict[str, Any]]]:
    """The server's uuid and its attached volumes (root first), as the library shows them."""
    uuid = _server_uuid(request, who, server_id)
    service = _service(request)
    with service.db.reader() as session:
        specs = volumes.specs_of_server(session, uuid)
    return uuid, [volumes.show(service.api.conductor, who.ctx, s.id) for s in specs]


@router.get("/v2.1/servers/{server_id}/os-volume_attachments")
def list_volume_attachments(server_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    uuid, found = _attached(request, who, server_id)
    return COMPUTE.respond({"volumeAttachments": [_attachment(v, uuid, version) for v in found]}, version)


def _one_attached(
    request: Request, who: Caller, server_id: str, volume_id: str
) -> tuple[str, dict[str, Any]]:
    uuid, found = _attached(request, who, server_id)
    match = [v for v in found if v["id"] == volume_id]
    if not match:
        raise exceptions.NotFound(f"Volume {volume_id} is not attached to server {uuid}.")
    return uuid, match[0]


@router.get("/v2.1/servers/{server_id}/os-volume_attachments/{volume_id}")
def show_volume_attachment(
    server_id: str, volume_id: str, request: Request, who: Caller = Depends(caller)
) -> JSONResponse:
    version = COMPUTE.requested(request)
    uuid, volume = _one_attached(request, who, server_id, volume_id)
    return COMPUTE.respond({"volumeAttachment": _attachment(volume, uuid, version)}, version)


#: keys of an attach's body taken only from a microversion on (Nova's schema of that version)
_ATTACH_SINCE = {"volumeId": (2, 1), "device": (2, 1), "tag": (2, 49), "delete_on_termination": (2, 79)}


def _attach_request(body: dict[str, Any], version: Version) -> tuple[str, str | None]:
    """The volume and the device of Nova's attach body; 400 naming what novakit cannot take."""
    given = body.get("volumeAttachment")
    if not isinstance(given, dict):
        raise exceptions.ValidationError("volumeAttachment", "is required: an object with volumeId")
    for key in given:
        if key not in _ATTACH_SINCE:
            raise exceptions.ValidationError(
                f"volumeAttachment.{key}", "is not an attribute of an attachment"
            )
        if not version.at_least(*_ATTACH_SINCE[key]):
            at = ".".join(map(str, _ATTACH_SINCE[key]))
            raise exceptions.ValidationError(f"volumeAttachment.{key}", f"is taken from microversion {at}")
    volume_id = given.get("volumeId")
    if not isinstance(volume_id, str) or not volume_id:
        raise exceptions.ValidationError("volumeAttachment.volumeId", "is required: a volume's id")
    device = given.get("device")
    if device is not None and not isinstance(device, str):
        raise exceptions.ValidationError("volumeAttachment.device", "must be a device name or null")
    if given.get("tag") is not None:
        raise exceptions.ValidationError("volumeAttachment.tag", "novakit keeps no attachment tags")
    keep = given.get("delete_on_termination", False)
    if not isinstance(keep, bool):
        raise exceptions.ValidationError("volumeAttachment.delete_on_termination", "must be true or false")
    if keep:
        raise exceptions.ValidationError(
            "volumeAttachment.delete_on_termination", "novakit keeps an attached volume when its server goes"
        )
    return volume_id, device or None


@router.post("/v2.1/servers/{server_id}/os-volume_attachments")
async def attach_volume(server_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """Attach a volume; answered once the host attached it, with the device it has."""
    version = COMPUTE.requested(request)
    volume_id, device = _attach_request(await read_json(request), version)
    api = _service(request).api
    uuid = await run_in_threadpool(_server_uuid, request, who, server_id)
    volume = await run_in_threadpool(volume_attach.attach, api, who.ctx, uuid, volume_id, device)
    return COMPUTE.respond({"volumeAttachment": _attachment(volume, uuid, version)}, version)


@router.delete("/v2.1/servers/{server_id}/os-volume_attachments/{volume_id}", status_code=202)
async def detach_volume(
    server_id: str, volume_id: str, request: Request, who: Caller = Depends(caller)
) -> Response:
    """Detach a volume: the library's checks in the request (its dry run), the detach itself in
    the service's pool (202, as Nova's)."""
    version = COMPUTE.requested(request)
    api = _service(request).api
    uuid, _ = await run_in_threadpool(_one_attached, request, who, server_id, volume_id)
    await run_in_threadpool(lambda: volume_attach.detach(api, who.ctx, uuid, volume_id, dry_run=True))
    if api.later is None:
        await run_in_threadpool(volume_attach.detach, api, who.ctx, uuid, volume_id)
    else:
        api.later(volume_attach.detach, api, who.ctx, uuid, volume_id)
    return COMPUTE.accepted(version)


# ---------------------------------------------------------------- interfaces


def _interface(port: dict[str, Any], version: Version) -> dict[str, Any]:
    """Nova's view of an interface, from a port as the library shows it (subnets by id)."""
    one: dict[str, Any] = {
        "port_id": port["id"],
        "net_id": port["network_id"],
        "mac_addr": port["mac_address"],
        "port_state": port["status"],
        "fixed_ips": [
            {"subnet_id": ip["subnet_id"], "ip_address": ip["ip_address"]} for ip in port["fixed_ips"]
        ],
    }
    if version.at_least(2, 70):
        one["tag"] = None  # a NIC's tag is not kept
    return one


def _interfaces(request: Request, who: Caller, server_id: str) -> list[dict[str, Any]]:
    """Nova's ``interfaceAttachments`` of the server's ports."""
    version = COMPUTE.requested(request)
    uuid = _server_uuid(request, who, server_id)
    return [_interface(p, version) for p in ports.list_ports(_service(request).db, who.ctx, device_id=uuid)]


@router.get("/v2.1/servers/{server_id}/os-interface")
def list_interfaces(server_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    return COMPUTE.respond({"interfaceAttachments": _interfaces(request, who, server_id)}, version)


@router.get("/v2.1/servers/{server_id}/os-interface/{port_id}")
def show_interface(
    server_id: str, port_id: str, request: Request, who: Caller = Depends(caller)
) -> JSONResponse:
    version = COMPUTE.requested(request)
    match = [i for i in _interfaces(request, who, server_id) if i["port_id"] == port_id]
    if not match:
        raise exceptions.PortNotFound(port=port_id)
    return COMPUTE.respond({"interfaceAttachment": match[0]}, version)


#: keys of an interface attach's body taken only from a microversion on (Nova's schema)
_INTERFACE_SINCE = {"port_id": (2, 1), "net_id": (2, 1), "fixed_ips": (2, 1), "tag": (2, 49)}


def _interface_request(body: Any, version: Version) -> tuple[str | None, str | None, str | None]:
    """The port, the network and the fixed IP of Nova's attach body; 400 naming what is wrong."""
    if not isinstance(body, dict) or set(body) - {"interfaceAttachment"}:
        raise exceptions.ValidationError("body", "must be an object with interfaceAttachment only")
    given = body.get("interfaceAttachment")
    if not isinstance(given, dict):
        raise exceptions.ValidationError(
            "interfaceAttachment", "is required: an object with port_id, or net_id (and fixed_ips)"
        )
    for key in given:
        if key not in _INTERFACE_SINCE:
            raise exceptions.ValidationError(
                f"interfaceAttachment.{key}", "is not an attribute of an interface"
            )
        if not version.at_least(*_INTERFACE_SINCE[key]):
            at = ".".join(map(str, _INTERFACE_SINCE[key]))
            raise exceptions.ValidationError(f"interfaceAttachment.{key}", f"is taken from microversion {at}")
    found: dict[str, str | None] = {}
    for key in ("port_id", "net_id"):
        value = given.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise exceptions.ValidationError(f"interfaceAttachment.{key}", "must be an id (a string)")
        found[key] = value
    if given.get("tag") is not None:
        raise exceptions.ValidationError("interfaceAttachment.tag", "novakit keeps no interface tags")
    fixed = given.get("fixed_ips")
    address = None
    if fixed is not None:
        if not isinstance(fixed, list) or len(fixed) > 1:
            raise exceptions.ValidationError("interfaceAttachment.fixed_ips", "must be a list of one address")
        if fixed:
            one = fixed[0]
            if (
                not isinstance(one, dict)
                or set(one) != {"ip_address"}
                or not isinstance(one["ip_address"], str)
            ):
                raise exceptions.ValidationError(
                    "interfaceAttachment.fixed_ips[0]", "must be an object with ip_address only"
                )
            address = one["ip_address"]
    return found["port_id"], found["net_id"], address


@router.post("/v2.1/servers/{server_id}/os-interface")
async def attach_interface(server_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """Attach a port, or a new port on a network; answered once the host attached it."""
    version = COMPUTE.requested(request)
    port_id, net_id, address = _interface_request(await read_json(request), version)
    api = _service(request).api
    uuid = await run_in_threadpool(_server_uuid, request, who, server_id)
    port = await run_in_threadpool(
        lambda: interfaces.attach(api, who.ctx, uuid, port=port_id, network=net_id, fixed_ip=address)
    )
    return COMPUTE.respond({"interfaceAttachment": _interface(port, version)}, version)


@router.delete("/v2.1/servers/{server_id}/os-interface/{port_id}", status_code=202)
async def detach_interface(
    server_id: str, port_id: str, request: Request, who: Caller = Depends(caller)
) -> Response:
    """Detach a port: the library's checks in the request (its dry run), the detach itself in the
    service's pool (202, as Nova's)."""
    version = COMPUTE.requested(request)
    api = _service(request).api
    uuid = await run_in_threadpool(_server_uuid, request, who, server_id)
    await run_in_threadpool(lambda: interfaces.detach(api, who.ctx, uuid, port_id, dry_run=True))
    if api.later is None:
        await run_in_threadpool(interfaces.detach, api, who.ctx, uuid, port_id)
    else:
        api.later(interfaces.detach, api, who.ctx, uuid, port_id)
    return COMPUTE.accepted(version)
