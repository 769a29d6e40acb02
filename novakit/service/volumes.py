"""Block Storage v3 (Cinder's API), a subset, under ``/volume``: thin handlers over
``novakit.volume``.

- ``GET /volume`` (300, Cinder's root) and ``GET /volume/v3``: the versions, v3.0 with the
  microversion range; keystoneauth's and openstacksdk's discovery read them.
- ``/v3[/{project_id}]/volumes``: create (202, the volume ``creating``; its host makes it in the
  service's pool, then ``available``), list (``name``, ``status``, ``availability_zone``,
  ``bootable``, ``size`` filters; ``all_tenants`` for an admin, ignored for anyone else as Cinder
  does; ``limit`` and ``marker``), ``/volumes/detail``, show, update (name, description) and
  delete (202: the library's checks in the request, refused 400 while attached, as Cinder's; the
  host's part in the pool). ``/volumes/{id}/action``: novakit's hosts cannot resize, retype or
  otherwise act on a volume, so every action answers 400 naming it.
- ``/types`` (the one default type, ``novakit.volume.types``), ``/os-availability-zone`` (the
  hosts' zones: a volume's zone is its host's), ``/limits`` and ``/os-quota-sets/{project_id}``
  (the library's ``volumes`` and ``gigabytes`` quotas; an admin sets them).

Since Cinder's 3.67 the project id in the URL is optional; novakit serves both forms at every
version (the catalog names the shorter), and a project id that is not the token's answers 400,
as Cinder's. Microversions: 3.0 to ``MAX_VERSION``, in ``OpenStack-API-Version: volume 3.x``
(Cinder has no legacy header); the view keeps 3.13's ``group_id``, 3.21's ``provider_id``,
3.48's ``service_uuid`` and ``shared_targets``, 3.61's ``cluster_name``, 3.63's
``volume_type_id`` and 3.65's ``consumes_quota``; from 3.31 an unknown listing filter and from
3.53 an unknown key of a body answer 400 (before, they are ignored).

What novakit does not keep is shown empty and refused when given: a volume's metadata,
snapshots, backups, clones, groups, multi-attach and encryption.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from novakit import exceptions, policy, quota
from novakit.fleet import aggregates
from novakit.service import paging
from novakit.service.auth import Caller, caller
from novakit.service.body import read_json
from novakit.service.compute import ComputeService
from novakit.service.microversion import Service, Version
from novakit.volume import types, volumes

MIN_VERSION = Version(3, 0)
MAX_VERSION = Version(3, 71)
VOLUME = Service("volume", "", MIN_VERSION, MAX_VERSION)

router = APIRouter(prefix="/volume")


def _route(method: str, path: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Serve a handler at ``/v3/{project_id}<path>`` and at ``/v3<path>`` (Cinder's 3.67 form)."""

    def register(handler: Callable[..., Any]) -> Callable[..., Any]:
        router.add_api_route(f"/v3/{{project_id}}{path}", handler, methods=[method], **kwargs)
        router.add_api_route(f"/v3{path}", handler, methods=[method], **kwargs)
        return handler

    return register


async def volume_caller(request: Request, who: Caller = Depends(caller)) -> Caller:
    """The caller (401 first), whose project must be the URL's when the URL names one."""
    given = request.path_params.get("project_id")
    if given is not None and given != who.ctx.project_id:
        raise exceptions.Invalid(
            reason=f"Malformed request URL: URL's project_id {given} does not match the token's project"
        )
    return who


def _service(request: Request) -> ComputeService:
    service: ComputeService = request.app.state.compute
    return service


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/") + "/volume"


def _project_base(request: Request) -> str:
    """The URL the request named its resources under (with its project id, if it gave one)."""
    given = request.path_params.get("project_id")
    return f"{_base(request)}/v3" + (f"/{given}" if given else "")


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "t", "true", "on", "y", "yes"):
        return True
    if lowered in ("", "0", "f", "false", "off", "n", "no"):
        return False
    raise exceptions.ValidationError(name, "is not a boolean")


# ---------------------------------------------------------------- versions


def _version(request: Request) -> dict[str, Any]:
    return {
        "id": "v3.0",
        "status": "CURRENT",
        "version": str(MAX_VERSION),
        "min_version": str(MIN_VERSION),
        "updated": "2023-08-31T00:00:00Z",
        "links": [
            {"rel": "describedby", "type": "text/html", "href": "https://docs.openstack.org/"},
            {"rel": "self", "href": f"{_base(request)}/v3/"},
        ],
        "media-types": [
            {"base": "application/json", "type": "application/vnd.openstack.volume+json;version=3"}
        ],
    }


@router.get("")
@router.get("/")
async def versions(request: Request) -> JSONResponse:
    return JSONResponse({"versions": [_version(request)]}, status_code=300)


@router.get("/v3")
@router.get("/v3/")
async def version_v3(request: Request) -> JSONResponse:
    return VOLUME.respond({"versions": [_version(request)]}, VOLUME.requested(request))


# ---------------------------------------------------------------- the view


def _volume(request: Request, who: Caller, v: dict[str, Any], version: Version) -> dict[str, Any]:
    """Cinder's detailed view of a volume, from the library's ``volumes.view``."""
    admin = policy.allowed(who.ctx, "host:show")
    path = f"volumes/{v['id']}"
    out: dict[str, Any] = {
        "id": v["id"],
        "name": v["name"],
        "description": v["description"],
        "status": v["status"],
        "size": v["size"],
        "availability_zone": v["availability_zone"],
        "created_at": v["created_at"],
        "updated_at": v["updated_at"],
        "user_id": v["user_id"],
        "os-vol-tenant-attr:tenant_id": v["project_id"],
        "volume_type": types.DEFAULT_NAME,
        "bootable": "true" if v["bootable"] else "false",
        "encrypted": False,
        "multiattach": False,
        "metadata": {},
        "snapshot_id": None,
        "source_volid": None,
        "consistencygroup_id": None,
        "replication_status": None,
        "attachments": [
            {
                "id": v["id"],
                "attachment_id": a["attachment_id"],
                "volume_id": v["id"],
                "server_id": a["server_id"],
                "host_name": v["host"] if admin else None,
                "device": a["device"],
                "attached_at": None,
            }
            for a in v["attachments"]
        ],
        "links": [
            {"rel": "self", "href": f"{_project_base(request)}/{path}"},
            {"rel": "bookmark", "href": f"{_base(request)}/{path}"},
        ],
    }
    if v["image_id"]:
        out["volume_image_metadata"] = {"image_id": v["image_id"]}
    if admin:
        out["os-vol-host-attr:host"] = v["host"]
        out["os-vol-mig-status-attr:migstat"] = None
        out["os-vol-mig-status-attr:name_id"] = None
    if version.at_least(3, 13):
        out["group_id"] = None
    if version.at_least(3, 21) and admin:
        out["provider_id"] = None
    if version.at_least(3, 48):
        out["service_uuid"] = None
        out["shared_targets"] = False
    if version.at_least(3, 61) and admin:
        out["cluster_name"] = None
    if version.at_least(3, 63):
        out["volume_type_id"] = types.DEFAULT_ID
    if version.at_least(3, 65):
        out["consumes_quota"] = True
    return out


def _summary(request: Request, v: dict[str, Any]) -> dict[str, Any]:
    path = f"volumes/{v['id']}"
    return {
        "id": v["id"],
        "name": v["name"],
        "links": [
            {"rel": "self", "href": f"{_project_base(request)}/{path}"},
            {"rel": "bookmark", "href": f"{_base(request)}/{path}"},
        ],
    }


# ---------------------------------------------------------------- volumes: reads

#: Cinder's volume filters that novakit answers (its default ``resource_filters``' that apply)
FILTERS = frozenset({"name", "status", "availability_zone", "bootable", "size", "metadata"})
#: the other query parameters of a volume listing
LISTING_PARAMS = frozenset({"all_tenants", "project_id", "limit", "marker"})


def _matches(v: dict[str, Any], key: str, value: str) -> bool:
    if key == "bootable":
        return bool(v["bootable"]) == _bool("bootable", value)
    if key == "size":
        return str(v["size"]) == value
    if key == "metadata":
        return value.strip() in ("", "{}")  # novakit keeps no volume metadata: only none matches
    return str(v[key]) == value


def _list(request: Request, who: Caller, detail: bool) -> JSONResponse:
    version = VOLUME.requested(request)
    params = request.query_params
    unknown = sorted(set(params) - FILTERS - LISTING_PARAMS)
    if unknown and version.at_least(3, 31):
        raise exceptions.ValidationError(unknown[0], "is not a filter of a volume listing")
    asked_all = "all_tenants" in params and _bool("all_tenants", params["all_tenants"])
    # Cinder ignores all_tenants of a caller who may not list every project's volumes.
    every = asked_all and policy.allowed(who.ctx, "servers:all_projects")
    found = volumes.list_volumes(_service(request).api.conductor, who.ctx, all_projects=every)
    if every and "project_id" in params:
        found = [v for v in found if v["project_id"] == params["project_id"]]
    for key in FILTERS & set(params):
        found = [v for v in found if _matches(v, key, params[key])]
    body: dict[str, Any] = {}
    page, following = paging.page(request, found)
    if following is not None:
        kind = "volumes/detail" if detail else "volumes"
        body["volumes_links"] = [{"rel": "next", "href": f"{_project_base(request)}/{kind}?{following}"}]
    shown = [_volume(request, who, v, version) if detail else _summary(request, v) for v in page]
    return VOLUME.respond({"volumes": shown, **body}, version)


@_route("GET", "/volumes")
def list_volumes(request: Request, who: Caller = Depends(volume_caller)) -> JSONResponse:
    return _list(request, who, detail=False)


@_route("GET", "/volumes/detail")
def list_volumes_detail(request: Request, who: Caller = Depends(volume_caller)) -> JSONResponse:
    return _list(request, who, detail=True)


@_route("GET", "/volumes/{volume_id}")
def show_volume(volume_id: str, request: Request, who: Caller = Depends(volume_caller)) -> JSONResponse:
    version = VOLUME.requested(request)
    found = volumes.show(_service(request).api.conductor, who.ctx, volume_id)
    return VOLUME.respond({"volume": _volume(request, who, found, version)}, version)


# ---------------------------------------------------------------- volumes: writes

#: the keys of Cinder's create body (its schema of 3.53), and what novakit does with each:
#: taken, or refused unless null/empty (what novakit does not keep or cannot do)
CREATE_TAKEN = frozenset(
    {"name", "description", "size", "availability_zone", "volume_type", "imageRef", "image_id"}
)
CREATE_EMPTY = frozenset(
    {"metadata", "snapshot_id", "source_volid", "consistencygroup_id", "backup_id", "group_id",
     "multiattach", "OS-SCH-HNT:scheduler_hints", "display_name", "display_description"}
)  # fmt: skip
UPDATE_TAKEN = frozenset({"name", "description"})
UPDATE_EMPTY = frozenset({"metadata", "display_name", "display_description"})


def _volume_body(
    body: dict[str, Any], version: Version, taken: frozenset[str], empty: frozenset[str]
) -> dict[str, Any]:
    """The ``volume`` object of a body: its keys novakit takes; 400 for one it cannot honour."""
    given = body.get("volume")
    if not isinstance(given, dict):
        raise exceptions.ValidationError("volume", "is required: an object")
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key in taken:
            out[key] = value
        elif key in empty:
            if value not in (None, {}, False, ""):
                raise exceptions.ValidationError(f"volume.{key}", "is not something novakit keeps or does")
        elif version.at_least(3, 53):
            raise exceptions.ValidationError(f"volume.{key}", "is not an attribute of a volume")
    return out


def _size(value: Any) -> Any:
    """Cinder's size: a whole number, or a string of one (the library then checks it)."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


@_route("POST", "/volumes", status_code=202)
async def create_volume(request: Request, who: Caller = Depends(volume_caller)) -> JSONResponse:
    """Create a volume: checked, quota counted and claimed in the request, made in the pool."""
    version = VOLUME.requested(request)
    given = _volume_body(await read_json(request), version, CREATE_TAKEN, CREATE_EMPTY)
    if "size" not in given:
        raise exceptions.ValidationError("volume.size", "is required: a whole number of GiB")
    if not isinstance(given.get("volume_type"), str | None):
        raise exceptions.ValidationError("volume.volume_type", "must be a volume type's name or id")
    types.find(given.get("volume_type"))
    image = given.get("imageRef", given.get("image_id"))
    if image is not None and not isinstance(image, str):
        raise exceptions.ValidationError("volume.imageRef", "must be an image's id")
    api = _service(request).api
    made = await run_in_threadpool(
        lambda: volumes.create(
            api.conductor,
            who.ctx,
            given.get("name"),  # the library checks it (None: unnamed)
            _size(given["size"]),
            image=image,
            description=given.get("description"),
            zone=given.get("availability_zone"),
            later=api.later,
        )
    )
    return VOLUME.respond({"volume": _volume(request, who, made, version)}, version, status_code=202)


@_route("PUT", "/volumes/{volume_id}")
async def update_volume(
    volume_id: str, request: Request, who: Caller = Depends(volume_caller)
) -> JSONResponse:
    version = VOLUME.requested(request)
    given = _volume_body(await read_json(request), version, UPDATE_TAKEN, UPDATE_EMPTY)
    conductor = _service(request).api.conductor
    found = await run_in_threadpool(volumes.update, conductor, who.ctx, volume_id, given)
    return VOLUME.respond({"volume": _volume(request, who, found, version)}, version)


@_route("DELETE", "/volumes/{volume_id}", status_code=202)
async def delete_volume(volume_id: str, request: Request, who: Caller = Depends(volume_caller)) -> Response:
    """Delete a volume: the library's checks in the request (its dry run: 400 while attached),
    the host's removal in the service's pool (202, as Cinder's)."""
    version = VOLUME.requested(request)
    api = _service(request).api
    conductor = api.conductor
    checked = await run_in_threadpool(lambda: volumes.delete(conductor, who.ctx, volume_id, dry_run=True))
    if api.later is None:
        await run_in_threadpool(volumes.delete, conductor, who.ctx, checked["id"])
    else:
        api.later(volumes.delete, conductor, who.ctx, checked["id"])
    return VOLUME.accepted(version)


@_route("POST", "/volumes/{volume_id}/action")
async def volume_action(volume_id: str, request: Request, who: Caller = Depends(volume_caller)) -> Response:
    """novakit's hosts do no volume action (extend, retype, ...): each answers 400 naming it,
    once the volume is found (another project's is not)."""
    body = await read_json(request)
    await run_in_threadpool(volumes.show, _service(request).api.conductor, who.ctx, volume_id)
    action = next(iter(body), "(none)")
    raise exceptions.ValidationError(action, "is not a volume action novakit can do")


# ---------------------------------------------------------------- types, zones


def _type(t: dict[str, Any]) -> dict[str, Any]:
    return {**t, "os-volume-type-access:is_public": t["is_public"], "qos_specs_id": None}


@_route("GET", "/types")
def list_types(request: Request, who: Caller = Depends(volume_caller)) -> JSONResponse:
    version = VOLUME.requested(request)
    return VOLUME.respond({"volume_types": [_type(t) for t in types.list_types()]}, version)


@_route("GET", "/types/{type_id}")
def show_type(type_id: str, request: Request, who: Caller = Depends(volume_caller)) -> JSONResponse:
    version = VOLUME.requested(request)
    return VOLUME.respond({"volume_type": _type(types.find(type_id))}, version)


@_route("GET", "/os-availability-zone")
def list_zones(request: Request, who: Caller = Depends(volume_caller)) -> JSONResponse:
    version = VOLUME.requested(request)
    service = _service(request)
    zones = aggregates.list_zones(service.db, who.ctx, service.conf)
    info = [{"zoneName": z["zone"], "zoneState": {"available": z["available"]}} for z in zones]
    return VOLUME.respond({"availabilityZoneInfo": info}, version)


# ---------------------------------------------------------------- limits and quotas

#: Cinder's quotas that novakit keeps (the library's resources of the same names)
KEPT = ("volumes", "gigabytes")
#: Cinder's quotas novakit does not keep, and the limit shown: 0 for what novakit never makes
#: (snapshots, backups, groups), -1 for a limit it does not enforce
NOT_KEPT = {
    "snapshots": 0,
    "backups": 0,
    "backup_gigabytes": 0,
    "groups": 0,
    "per_volume_gigabytes": -1,
    f"volumes_{types.DEFAULT_NAME}": -1,
    f"gigabytes_{types.DEFAULT_NAME}": -1,
    f"snapshots_{types.DEFAULT_NAME}": 0,
}


@_route("GET", "/limits")
def limits(request: Request, who: Caller = Depends(volume_caller)) -> JSONResponse:
    version = VOLUME.requested(request)
    service = _service(request)
    usage = quota.get_quota_usage(service.db, service.conf, who.ctx.project_id)
    absolute = {
        "maxTotalVolumes": usage["volumes"]["limit"],
        "maxTotalVolumeGigabytes": usage["gigabytes"]["limit"],
        "maxTotalSnapshots": 0,
        "maxTotalBackups": 0,
        "maxTotalBackupGigabytes": 0,
        "totalVolumesUsed": usage["volumes"]["in_use"],
        "totalGigabytesUsed": usage["gigabytes"]["in_use"],
        "totalSnapshotsUsed": 0,
        "totalBackupsUsed": 0,
        "totalBackupGigabytesUsed": 0,
    }
    return VOLUME.respond({"limits": {"rate": [], "absolute": absolute}}, version)


def _quota_set(usage: dict[str, dict[str, int]], detail: bool, project_id: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": project_id} if project_id is not None else {}
    rows = [(k, usage[k]["limit"], usage[k]["in_use"]) for k in KEPT]
    rows += [(k, limit, 0) for k, limit in NOT_KEPT.items()]
    for key, limit, in_use in rows:
        out[key] = {"limit": limit, "in_use": in_use, "reserved": 0} if detail else limit
    return out


@_route("GET", "/os-quota-sets/{target_project}")
def show_quota_set(
    target_project: str, request: Request, who: Caller = Depends(volume_caller)
) -> JSONResponse:
    """A project's volume quotas (its members' and an admin's); ``usage=true``: with their use."""
    version = VOLUME.requested(request)
    detail = "usage" in request.query_params and _bool("usage", request.query_params["usage"])
    service = _service(request)
    usage = quota.show_quota(service.db, service.conf, who.ctx, target_project)
    return VOLUME.respond({"quota_set": _quota_set(usage, detail, target_project)}, version)


@_route("PUT", "/os-quota-sets/{target_project}")
async def update_quota_set(
    target_project: str, request: Request, who: Caller = Depends(volume_caller)
) -> JSONResponse:
    """Set a project's volume quotas (an admin's, ``quota:update``); every limit is checked
    before any is written."""
    version = VOLUME.requested(request)
    policy.authorize(who.ctx, "quota:update")
    given = (await read_json(request)).get("quota_set")
    if not isinstance(given, dict):
        raise exceptions.ValidationError("quota_set", "is required: an object of the quotas to set")
    for key in given:
        if key in NOT_KEPT:
            raise exceptions.ValidationError(f"quota_set.{key}", "is a quota novakit does not keep")
        if key not in KEPT:
            raise exceptions.ValidationError(f"quota_set.{key}", "is not a quota of Block Storage")
    service = _service(request)
    await run_in_threadpool(quota.apply, service.db, service.conf, who.ctx, target_project, dict(given))
    usage = await run_in_threadpool(quota.show_quota, service.db, service.conf, who.ctx, target_project)
    return VOLUME.respond({"quota_set": _quota_set(usage, False, None)}, version)
