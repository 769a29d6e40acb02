"""Compute v2.1 (Nova's API), the read side, under ``/compute``: thin handlers over the library.

- ``GET /compute``: the versions (v2.0 and v2.1, as nova-api's root), ``GET /compute/v2.1``:
  v2.1's document with the microversion range; keystoneauth's and openstacksdk's discovery
  read them.
- servers (``/servers``, ``/servers/detail``, ``/servers/{id}``), their actions and events
  (``/servers/{id}/os-instance-actions[/{request_id}]``), flavors (with ``os-extra_specs``),
  ``/limits``, ``/os-hypervisors``, ``/os-availability-zone``, ``/os-services``.

Every handler takes its caller from ``novakit.service.auth.caller`` (401 first) and calls the
library with the caller's context: what a member may see is the library's policy (another
project's server is "not found", an admin-only listing answers 403 from ``novakit.policy``).
The views are Nova's keys over the library's views: renames and shapes (``_server``,
``_flavor``, ...), nothing decided here.

Microversions (``novakit.service.microversion``): 2.1 up to ``MAX_VERSION``, 2.79, the newest
whose behaviour changes for the resources served here are all implemented:

- 2.3 the admin's extra ``OS-EXT-SRV-ATTR:*`` keys; 2.9 ``locked``; 2.11 a service's
  ``forced_down``; 2.16 ``host_status`` (for a caller allowed ``host:list``); 2.19 a server's
  ``description`` (novakit records none: null, as Nova's for a server given none); 2.21 the
  actions of a deleted server; 2.26 ``tags`` (novakit records none: ``[]``; the ``tags`` and
  ``tags-any`` filters match no server, ``not-tags`` and ``not-tags-any`` every one); 2.28 a
  hypervisor's ``cpu_info`` as an object; 2.33 hypervisors in pages; 2.36, 2.39 and 2.57
  the limits Nova dropped (networks, security groups, image metadata, personality files);
  2.38 an unknown status filter answers 400 (novakit answers 400 at every version); 2.47 a
  server's flavor embedded, not linked; 2.51 an action's events shown to its project's
  members (before it only to a caller allowed ``server:fault_details``); 2.53 services and
  hypervisors named by uuid; 2.55 a flavor's ``description``.
- 2.58 the actions in pages (``limit``, ``marker``, ``links``), ``changes-since`` and
  ``updated_at``; 2.61 a flavor's ``extra_specs``; 2.62 an event's ``hostId`` (and ``host`` for
  a caller allowed ``host:show``); 2.63 ``trusted_image_certificates`` (null); 2.66
  ``changes-before`` of servers and actions; 2.71 ``server_groups`` in show, update and
  rebuild; 2.73 ``locked_reason`` and the ``locked`` filter; 2.75 an unknown listing parameter
  answers 400, a flavor with no swap shows ``0``.
- The server writes (``novakit.service.servers``) and the other resources
  (``novakit.service.compute_extras``) keep the changes that concern them: 2.37's required
  ``networks``; the key pairs' 2.2 and 2.10, the server groups' 2.13, 2.15 and 2.64 (``policy``
  and ``rules``), the quota sets' 2.36 and 2.57; a rebuild's ``key_name`` (2.54) and
  ``user_data`` (2.57), a migration's ``host`` (2.56), a lock's ``locked_reason`` (2.73) only
  from their version, evacuate's and live migration's ``force`` only before 2.68, a rebuild
  answered with the server; 2.78's topology (empty: novakit pins no guest to NUMA nodes). The
  others only widen what a body may hold (a NIC's ``tag`` of 2.32 is taken and unused; 2.63's
  certificates and 2.74's ``host`` are refused when given, as novakit verifies no certificate
  and its scheduler picks the host); ``personality`` is refused at every version (novakit
  writes no files into a guest).
- Migrations, volume attachments and interfaces (``novakit.service.server_resources``) keep
  theirs: 2.23's migration types and a server's live migrations, 2.59's migrations in pages
  with their ``uuid``, 2.66's ``changes-before``, 2.49's and 2.70's device ``tag`` (novakit
  keeps none: null, a tag given is refused), 2.79's ``delete_on_termination`` of an attachment.
- Resources not served yet (quota classes, diagnostics, forcing a live migration to complete) answer
  404 at every version (an action, 400). An interface's attach and detach are served
  (``server_resources``: its tag of 2.49 is refused when given, and shown null from 2.70).

Project ids are Keystone's (the token's project): servers created by the operator path under
a project *name* belong to no token's project (README, "OpenStack clients").
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from novakit import exceptions, policy, quota
from novakit.catalog import flavors
from novakit.compute import listing, server_groups
from novakit.compute.api import API
from novakit.compute.views import security_groups_view
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.fleet import aggregates, hosts
from novakit.network import security_groups
from novakit.service import paging
from novakit.service.auth import Caller, caller
from novakit.service.microversion import Service, Version

MIN_VERSION = Version(2, 1)
MAX_VERSION = Version(2, 79)
COMPUTE = Service("compute", "X-OpenStack-Nova-API-Version", MIN_VERSION, MAX_VERSION)

router = APIRouter(prefix="/compute")


@dataclass(frozen=True)
class ComputeService:
    """What the compute handlers use, made once per worker (``novakit.service.app``)."""

    api: API
    db: Database
    conf: Config


def _service(request: Request) -> ComputeService:
    service: ComputeService = request.app.state.compute
    return service


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/") + "/compute"


def _links(request: Request, kind: str, ident: str) -> list[dict[str, str]]:
    base = _base(request)
    return [
        {"rel": "self", "href": f"{base}/v2.1/{kind}/{ident}"},
        {"rel": "bookmark", "href": f"{base}/{kind}/{ident}"},
    ]


def _time(value: dt.datetime | None) -> str | None:
    """Nova's timestamps: UTC, to the second, ``Z``."""
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def _action_time(value: dt.datetime | None) -> str | None:
    """Nova's instance action and event times: microseconds, no zone."""
    return value.strftime("%Y-%m-%dT%H:%M:%S.%f") if value is not None else None


def _bool(name: str, value: str) -> bool:
    """A query's boolean as Nova reads it (oslo's strict ``bool_from_string``; empty is true)."""
    lowered = value.strip().lower()
    if lowered in ("", "1", "t", "true", "on", "y", "yes"):
        return True
    if lowered in ("0", "f", "false", "off", "n", "no"):
        return False
    raise exceptions.ValidationError(name, "is not a boolean")


def _int(name: str, value: str, minimum: int = 0) -> int:
    try:
        number = int(value)
    except ValueError:
        raise exceptions.ValidationError(name, "is not an integer") from None
    if number < minimum:
        raise exceptions.ValidationError(name, f"must be at least {minimum}")
    return number


# ---------------------------------------------------------------- versions


def _version(request: Request, ident: str) -> dict[str, Any]:
    current = ident == "v2.1"
    return {
        "id": ident,
        "status": "CURRENT" if current else "SUPPORTED",
        "version": str(MAX_VERSION) if current else "",
        "min_version": str(MIN_VERSION) if current else "",
        "updated": "2013-07-23T11:33:21Z" if current else "2011-01-21T11:33:21Z",
        "links": [{"rel": "self", "href": f"{_base(request)}/{ident.removesuffix('.0')}/"}],
    }


def _version_document(request: Request, ident: str) -> dict[str, Any]:
    doc = _version(request, ident)
    doc["links"].append({"rel": "describedby", "type": "text/html", "href": "https://docs.openstack.org/"})
    doc["media-types"] = [
        {"base": "application/json", "type": f"application/vnd.openstack.compute+json;version={ident[1:]}"}
    ]
    return {"version": doc}


@router.get("")
@router.get("/")
async def versions(request: Request) -> JSONResponse:
    return JSONResponse({"versions": [_version(request, "v2.0"), _version(request, "v2.1")]})


@router.get("/v2")
@router.get("/v2/")
async def version_v2(request: Request) -> JSONResponse:
    return JSONResponse(_version_document(request, "v2.0"))


@router.get("/v2.1")
@router.get("/v2.1/")
async def version_v21(request: Request) -> JSONResponse:
    return COMPUTE.respond(_version_document(request, "v2.1"), COMPUTE.requested(request))


# ---------------------------------------------------------------- servers

#: Nova's server list filters -> the library's ``listing.ServerQuery`` fields (the same meaning)
SERVER_FILTERS = {
    "name": "name",
    "status": "status",
    "host": "host",
    "flavor": "flavor",
    "image": "image",
    "changes-since": "changes_since",
    "ip": "ip",
    "ip6": "ip6",
    "user_id": "user",
    "reservation_id": "reservation_id",
    "marker": "marker",
    "sort_dir": "sort_dir",
}
#: Nova's sort keys the library sorts by, as the library names them
SORT_KEYS = {"created_at": "created_at", "display_name": "name", "vm_state": "vm_state", "uuid": "uuid"}
#: novakit records no server tags: these filters match no server, the ``not-`` ones every server
TAG_FILTERS = ("tags", "tags-any")


#: Nova's query parameters of a server listing, which 2.75 holds to (another one answers 400)
NOVA_SERVER_PARAMS = frozenset(
    {
        "user_id", "project_id", "tenant_id", "launch_index", "image_ref", "image", "kernel_id",
        "ramdisk_id", "hostname", "key_name", "power_state", "vm_state", "task_state", "host", "node",
        "flavor", "reservation_id", "launched_at", "terminated_at", "availability_zone", "name",
        "display_name", "description", "display_description", "locked_by", "uuid", "root_device_name",
        "config_drive", "access_ip_v4", "access_ip_v6", "auto_disk_config", "progress", "sort_key",
        "sort_dir", "all_tenants", "soft_deleted", "deleted", "status", "changes-since",
        "changes-before", "ip", "ip6", "created_at", "block_device_mapping", "services",
        "metadata", "system_metadata", "info_cache", "security_groups", "pci_devices", "tags",
        "tags-any", "not-tags", "not-tags-any", "limit", "marker", "locked",
    }
)  # fmt: skip


def _server_query(request: Request) -> tuple[dict[str, Any] | None, int]:
    """A listing's query in the library's terms and its page size (None: no server can match)."""
    params = request.query_params
    version = COMPUTE.requested(request)
    if version.at_least(2, 75):
        unknown = sorted(set(params) - NOVA_SERVER_PARAMS)
        if unknown:
            raise exceptions.ValidationError(unknown[0], "is not a query parameter of a server listing")
    query: dict[str, Any] = {
        field: params[name] for name, field in SERVER_FILTERS.items() if params.get(name) is not None
    }
    limit = listing.MAX_LIMIT
    if params.get("limit") is not None:
        limit = min(_int("limit", params["limit"]), listing.MAX_LIMIT)
    if params.get("sort_key") is not None:
        key = params.getlist("sort_key")[0]
        if key not in SORT_KEYS:
            raise exceptions.ValidationError("sort_key", f"is not one of {', '.join(SORT_KEYS)}")
        query["sort_key"] = SORT_KEYS[key]
    if "sort_dir" in query:
        query["sort_dir"] = params.getlist("sort_dir")[0]
    if params.get("deleted") is not None:
        query["deleted"] = _bool("deleted", params["deleted"])
    if version.at_least(2, 66) and params.get("changes-before") is not None:
        query["changes_before"] = params["changes-before"]
    if version.at_least(2, 73) and params.get("locked") is not None:
        query["locked"] = _bool("locked", params["locked"])
    if params.get("all_tenants") is not None and _bool("all_tenants", params["all_tenants"]):
        query["all_projects"] = True
        # Nova honours a project filter only with all_tenants (else it is the caller's own)
        project = params.get("project_id") or params.get("tenant_id")
        if project:
            query["project"] = project
    if any(params.get(name) for name in TAG_FILTERS):
        return None, limit
    query["limit"] = limit
    return query, limit


def _next_link(
    request: Request, path: str, servers: list[dict[str, Any]], limit: int
) -> list[dict[str, str]]:
    """Nova's ``servers_links``: the next page, when this one is full."""
    if not servers or len(servers) < limit:
        return []
    query = paging.next_query(request, servers[-1]["id"])
    return [{"rel": "next", "href": f"{_base(request)}/v2.1/{path}?{query}"}]


def _flavor_of_server(request: Request, snap: dict[str, Any], version: Version) -> dict[str, Any]:
    if not version.at_least(2, 47):
        ident = str(snap.get("flavorid") or "")
        return {"id": ident, "links": _links(request, "flavors", ident)[1:]}
    return {
        "vcpus": snap.get("vcpus"),
        "ram": snap.get("memory_mb"),
        "disk": snap.get("root_gb"),
        "ephemeral": snap.get("ephemeral_gb") or 0,
        "swap": snap.get("swap") or 0,
        "original_name": snap.get("name"),
        "extra_specs": dict(snap.get("extra_specs") or {}),
    }


def _addresses(view: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Nova's ``addresses``: per network, each fixed IP with its version and its port's MAC;
    a server without ports (a fake or legacy NIC) lists what its guest reported under
    ``"default"``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for nic in view.get("nics") or []:
        for ip in nic["fixed_ips"]:
            out.setdefault(nic["network"] or "default", []).append(
                {
                    "version": 6 if ":" in ip else 4,
                    "addr": ip,
                    "OS-EXT-IPS:type": "fixed",
                    "OS-EXT-IPS-MAC:mac_addr": nic["mac"],
                }
            )
    if not out and view.get("addresses"):
        out["default"] = [{"version": 6 if ":" in ip else 4, "addr": ip} for ip in view["addresses"]]
    return out


def _host_status(row: dict[str, Any] | None, host: str | None) -> str:
    """Nova's ``host_status`` from ``hosts.list_hosts``'s row of the server's host."""
    if not host:
        return ""
    if row is None:
        return "UNKNOWN"
    if row["forced_down"]:
        return "DOWN"
    if row["status"] == "disabled":
        return "MAINTENANCE"
    return "UP" if row["state"] == "up" else "UNKNOWN"


def _server(
    request: Request,
    view: dict[str, Any],
    version: Version,
    ctx: RequestContext,
    host_rows: dict[str, dict[str, Any]] | None,
) -> dict[str, Any]:
    """Nova's server view (show and detail) of the library's ``server_view``.

    ``host_rows``: ``hosts.list_hosts`` by host, for a caller allowed ``host:list`` (2.16's
    ``host_status``), else None."""
    image = view.get("image")
    server: dict[str, Any] = {
        "id": view["id"],
        "name": view["name"],
        "status": view["status"],
        "tenant_id": view["project_id"],
        "user_id": view["user_id"],
        "metadata": view.get("metadata") or {},
        "hostId": view.get("host_id") or "",
        "image": {"id": image, "links": _links(request, "images", image)[1:]} if image else "",
        "flavor": _flavor_of_server(request, view.get("flavor") or {}, version),
        "created": _time(view.get("created")),
        "updated": _time(view.get("updated") or view.get("created")),
        "addresses": _addresses(view),
        "accessIPv4": "",
        "accessIPv6": "",
        "links": _links(request, "servers", view["id"]),
        "OS-DCF:diskConfig": "MANUAL",
        "OS-EXT-AZ:availability_zone": view.get("availability_zone") or "",
        "config_drive": "",
        "key_name": view.get("key_name"),
        "OS-SRV-USG:launched_at": _action_time(view.get("launched_at")),
        "OS-SRV-USG:terminated_at": _action_time(view.get("terminated_at")),
        "OS-EXT-STS:vm_state": view.get("vm_state"),
        "OS-EXT-STS:task_state": view.get("task_state"),
        "OS-EXT-STS:power_state": view.get("power_state"),
        "progress": 0,
    }
    if view.get("security_groups"):  # Nova's view has the key only for a server with groups
        server["security_groups"] = view["security_groups"]
    if view.get("fault"):
        fault = view["fault"]
        server["fault"] = {
            "code": fault["code"],
            "message": fault["message"],
            "created": _time(fault.get("created")),
            **({"details": fault["details"]} if fault.get("details") else {}),
        }
    if policy.allowed(ctx, "host:show"):
        server["OS-EXT-SRV-ATTR:host"] = view.get("host")
        server["OS-EXT-SRV-ATTR:hypervisor_hostname"] = view.get("node")
        if version.at_least(2, 3):
            server["OS-EXT-SRV-ATTR:reservation_id"] = view.get("reservation_id")
            server["OS-EXT-SRV-ATTR:hostname"] = view.get("hostname")
            # novakit keeps no kernel or ramdisk images and shows no user data (a secret)
            server["OS-EXT-SRV-ATTR:launch_index"] = 0
            for key in ("kernel_id", "ramdisk_id", "root_device_name", "user_data"):
                server[f"OS-EXT-SRV-ATTR:{key}"] = None
    if version.at_least(2, 9):
        server["locked"] = bool(view.get("locked"))
    if version.at_least(2, 16) and host_rows is not None:
        server["host_status"] = _host_status(host_rows.get(view.get("host") or ""), view.get("host"))
    if version.at_least(2, 19):
        server["description"] = None
    if version.at_least(2, 26):
        server["tags"] = []
    if version.at_least(2, 63):
        server["trusted_image_certificates"] = None  # novakit verifies no image certificates
    if version.at_least(2, 73):
        server["locked_reason"] = view.get("locked_reason") if view.get("locked") else None
    return server


def _host_rows(service: ComputeService, ctx: RequestContext, version: Version) -> dict[str, Any] | None:
    """The hosts by name, when the caller may see their status (2.16's ``host_status``)."""
    if not version.at_least(2, 16) or not policy.allowed(ctx, "host:list"):
        return None
    return {row["host"]: row for row in hosts.list_hosts(service.db, service.conf, ctx=ctx)}


def _list_servers(request: Request, who: Caller, detail: bool) -> JSONResponse:
    version = COMPUTE.requested(request)
    service = _service(request)
    query, limit = _server_query(request)
    views = service.api.list_servers(who.ctx, query) if query is not None else []
    if detail:
        rows = _host_rows(service, who.ctx, version)
        # a show's view has them (its ports are the API database's); a page reads them at once
        groups = security_groups.instances_groups(service.db, [v["id"] for v in views])
        servers = [
            _server(
                request,
                {**v, "security_groups": security_groups_view(groups[v["id"]])},
                version,
                who.ctx,
                rows,
            )
            for v in views
        ]
    else:
        servers = [
            {"id": v["id"], "name": v["name"], "links": _links(request, "servers", v["id"])} for v in views
        ]
    body: dict[str, Any] = {"servers": servers}
    links = _next_link(request, "servers/detail" if detail else "servers", servers, limit)
    if links:
        body["servers_links"] = links
    return COMPUTE.respond(body, version)


@router.get("/v2.1/servers")
def list_servers(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    return _list_servers(request, who, detail=False)


@router.get("/v2.1/servers/detail")
def list_servers_detail(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    return _list_servers(request, who, detail=True)


@router.get("/v2.1/servers/{server_id}")
def show_server(server_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    service = _service(request)
    view = service.api.get(who.ctx, server_id)
    rows = _host_rows(service, who.ctx, version)
    return COMPUTE.respond({"server": shown_server(request, view, version, who.ctx, rows)}, version)


def shown_server(
    request: Request,
    view: dict[str, Any],
    version: Version,
    ctx: RequestContext,
    host_rows: dict[str, dict[str, Any]] | None,
) -> dict[str, Any]:
    """``_server`` as show, update and rebuild answer it: from 2.71 with ``server_groups``, the
    groups it is a member of (a listing has no such key)."""
    server = _server(request, view, version, ctx, host_rows)
    if version.at_least(2, 71):
        server["server_groups"] = server_groups.of_server(_service(request).db, view["id"])
    return server


class InstanceActionNotFound(exceptions.NotFound):
    msg_fmt = "Action for request_id %(request_id)s on instance %(instance_uuid)s not found"


def _actions(request: Request, who: Caller, server_id: str, version: Version) -> list[dict[str, Any]]:
    """The server's actions, newest first as Nova lists them; a deleted server's from 2.21 (the
    library lists them; before 2.21 a deleted server is not found, as its show)."""
    api = _service(request).api
    if not version.at_least(2, 21):
        api.get(who.ctx, server_id)
    return list(reversed(api.list_actions(who.ctx, server_id)))


def _action(server_id: str, action: dict[str, Any], version: Version) -> dict[str, Any]:
    out = {
        "action": action["action"],
        "instance_uuid": server_id,
        "request_id": action["request_id"],
        "user_id": action["user_id"],
        "project_id": action["project_id"],
        "start_time": _action_time(action["start_time"]),
        "message": action["message"],
    }
    if version.at_least(2, 58):
        out["updated_at"] = _action_time(action["updated_at"])
    return out


def _updated_at(action: dict[str, Any]) -> dt.datetime:
    when: dt.datetime = action["updated_at"]
    return when


@router.get("/v2.1/servers/{server_id}/os-instance-actions")
def list_instance_actions(server_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """A server's actions, newest first; from 2.58 in pages (``limit``, ``marker``: a request id,
    the next page in ``links``) and narrowed by the time each was last updated."""
    version = COMPUTE.requested(request)
    found = _actions(request, who, server_id, version)
    body: dict[str, Any] = {}
    if version.at_least(2, 58):
        found = paging.changed_between(
            request, found, _updated_at, since=True, before=version.at_least(2, 66)
        )
        found, following = paging.page(request, found, "request_id")
        if following is not None:
            path = f"{_base(request)}/v2.1/servers/{server_id}/os-instance-actions"
            body["links"] = [{"rel": "next", "href": f"{path}?{following}"}]
    body["instanceActions"] = [_action(server_id, a, version) for a in found]
    return COMPUTE.respond(body, version)


@router.get("/v2.1/servers/{server_id}/os-instance-actions/{request_id}")
def show_instance_action(
    server_id: str, request_id: str, request: Request, who: Caller = Depends(caller)
) -> JSONResponse:
    version = COMPUTE.requested(request)
    found = [a for a in _actions(request, who, server_id, version) if a["request_id"] == request_id]
    if not found:
        raise InstanceActionNotFound(request_id=request_id, instance_uuid=server_id)
    action = _action(server_id, found[0], version)
    if version.at_least(2, 51) or policy.allowed(who.ctx, "server:fault_details"):
        action["events"] = [_event(e, version, who.ctx) for a in found for e in a["events"]]
    return COMPUTE.respond({"instanceAction": action}, version)


def _event(e: dict[str, Any], version: Version, ctx: RequestContext) -> dict[str, Any]:
    out = {
        "event": e["event"],
        "start_time": _action_time(e["start_time"]),
        "finish_time": _action_time(e["finish_time"]),
        "result": e["result"],
        # the library gives a traceback only to a caller allowed server:fault_details
        "traceback": e.get("traceback"),
    }
    if version.at_least(2, 62):
        out["hostId"] = e["host_id"]  # opaque, the same for the project's events on one host
        if policy.allowed(ctx, "host:show"):
            out["host"] = e["host"] or ""
    return out


# ---------------------------------------------------------------- flavors


def _flavor(request: Request, f: dict[str, Any], version: Version, detail: bool) -> dict[str, Any]:
    """Nova's flavor view of ``flavors.view``."""
    out: dict[str, Any] = {"id": f["id"], "name": f["name"], "links": _links(request, "flavors", f["id"])}
    if detail:
        out.update(
            {
                "vcpus": f["vcpus"],
                "ram": f["ram"],
                "disk": f["disk"],
                "OS-FLV-EXT-DATA:ephemeral": f["ephemeral"],
                # Nova's "" for no swap until 2.75, 0 from it
                "swap": f["swap"] or (0 if version.at_least(2, 75) else ""),
                "OS-FLV-DISABLED:disabled": False,
                "rxtx_factor": 1.0,
                "os-flavor-access:is_public": f["is_public"],
            }
        )
    if version.at_least(2, 55):
        out["description"] = f["description"]
    if detail and version.at_least(2, 61):
        out["extra_specs"] = dict(f["extra_specs"])
    return out


def _list_flavors(request: Request, who: Caller, detail: bool) -> JSONResponse:
    version = COMPUTE.requested(request)
    params = request.query_params
    # Nova's is_public: true (the default), false, or none (every flavor). Nova takes it from a
    # caller who may list private flavors only; another caller's listing is of the public ones,
    # whatever it asked (openstacksdk's cloud layer asks is_public=None of every caller).
    asked = (params.get("is_public") or "true").strip().lower()
    which = "all" if asked == "none" else ("public" if _bool("is_public", asked) else "private")
    if not policy.allowed(who.ctx, "flavor:list_private"):
        which = "public"
    found = flavors.list_flavors(
        _service(request).db,
        who.ctx,
        which=which,
        min_ram=_int("minRam", params["minRam"]) if "minRam" in params else 0,
        min_disk=_int("minDisk", params["minDisk"]) if "minDisk" in params else 0,
        limit=_int("limit", params["limit"]) if "limit" in params else None,
        marker=params.get("marker"),
    )
    body = {"flavors": [_flavor(request, f, version, detail) for f in found]}
    return COMPUTE.respond(body, version)


@router.get("/v2.1/flavors")
def list_flavors(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    return _list_flavors(request, who, detail=False)


@router.get("/v2.1/flavors/detail")
def list_flavors_detail(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    return _list_flavors(request, who, detail=True)


@router.get("/v2.1/flavors/{flavor_id}")
def show_flavor(flavor_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    found = flavors.show(_service(request).db, who.ctx, flavor_id)
    return COMPUTE.respond({"flavor": _flavor(request, found, version, detail=True)}, version)


@router.get("/v2.1/flavors/{flavor_id}/os-extra_specs")
def flavor_extra_specs(flavor_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    found = flavors.show(_service(request).db, who.ctx, flavor_id)
    return COMPUTE.respond({"extra_specs": found["extra_specs"]}, version)


# ---------------------------------------------------------------- limits


@router.get("/v2.1/limits")
def limits(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """The caller's project's absolute limits (-1: unlimited, or a limit novakit does not keep)."""
    version = COMPUTE.requested(request)
    service = _service(request)
    usage = quota.get_quota_usage(service.db, service.conf, who.ctx.project_id)
    absolute: dict[str, int] = {
        "maxTotalInstances": usage["instances"]["limit"],
        "maxTotalCores": usage["cores"]["limit"],
        "maxTotalRAMSize": usage["ram"]["limit"],
        "maxTotalKeypairs": usage["key_pairs"]["limit"],
        "maxServerMeta": -1,
        "maxServerGroups": -1,
        "maxServerGroupMembers": -1,
        "totalInstancesUsed": usage["instances"]["in_use"],
        "totalCoresUsed": usage["cores"]["in_use"],
        "totalRAMUsed": usage["ram"]["in_use"],
        "totalServerGroupsUsed": 0,
    }
    if not version.at_least(2, 36):
        absolute.update(
            maxSecurityGroups=usage["security_groups"]["limit"],
            maxSecurityGroupRules=usage["security_group_rules"]["limit"],
            totalSecurityGroupsUsed=usage["security_groups"]["in_use"],
            maxTotalFloatingIps=0,
            totalFloatingIpsUsed=0,
        )
    if not version.at_least(2, 39):
        absolute["maxImageMeta"] = -1
    if not version.at_least(2, 57):
        absolute.update(maxPersonality=0, maxPersonalitySize=0)
    return COMPUTE.respond({"limits": {"absolute": absolute, "rate": []}}, version)


# ---------------------------------------------------------------- hosts (an admin's)


def _updated(row: dict[str, Any]) -> str | None:
    """A host's last contact, as Nova's service ``updated_at``."""
    return _action_time(row["last_contact_at"] or row["last_seen_up"])


def _hypervisor_id(row: dict[str, Any], version: Version, position: int) -> str | int:
    """A node's uuid from 2.53; before, Nova's integer id (here its place in the listing)."""
    return row["node_uuid"] if version.at_least(2, 53) else position + 1


def _hypervisor(row: dict[str, Any], version: Version, position: int, detail: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": _hypervisor_id(row, version, position),
        "hypervisor_hostname": row["hypervisor_hostname"],
        "state": row["state"],
        "status": row["status"],
    }
    if not detail:
        return out
    capacity, used = row["capacity"], row["used"]
    cpu_info = row["cpu_info"]
    out.update(
        {
            "hypervisor_type": row["hypervisor_type"],
            "hypervisor_version": row["hypervisor_version"],
            "host_ip": None,
            "vcpus": capacity["VCPU"],
            "vcpus_used": used["VCPU"],
            "memory_mb": capacity["MEMORY_MB"],
            "memory_mb_used": used["MEMORY_MB"],
            "free_ram_mb": capacity["MEMORY_MB"] - used["MEMORY_MB"],
            "local_gb": capacity["DISK_GB"],
            "local_gb_used": used["DISK_GB"],
            "free_disk_gb": capacity["DISK_GB"] - used["DISK_GB"],
            "disk_available_least": capacity["DISK_GB"] - used["DISK_GB"],
            "running_vms": row["instances"],
            "current_workload": 0,
            "cpu_info": cpu_info if version.at_least(2, 28) else str(cpu_info),
            "service": {
                "host": row["host"],
                "id": row["service_uuid"] if version.at_least(2, 53) else position + 1,
                "disabled_reason": row["disabled_reason"],
            },
        }
    )
    return out


def _list_hypervisors(request: Request, who: Caller, detail: bool) -> JSONResponse:
    version = COMPUTE.requested(request)
    service = _service(request)
    rows = list(enumerate(hosts.list_hosts(service.db, service.conf, ctx=who.ctx)))
    params = request.query_params
    if version.at_least(2, 33) and params.get("marker") is not None:
        at = next((i for i, r in rows if str(_hypervisor_id(r, version, i)) == params["marker"]), None)
        if at is None:
            raise exceptions.MarkerNotFound(f"Invalid marker: {params['marker']} is not a hypervisor")
        rows = rows[at + 1 :]
    limit = _int("limit", params["limit"]) if version.at_least(2, 33) and "limit" in params else None
    page = rows[:limit] if limit is not None else rows
    body: dict[str, Any] = {"hypervisors": [_hypervisor(r, version, i, detail) for i, r in page]}
    if limit is not None and len(page) == limit and page:
        query = urlencode({"limit": limit, "marker": _hypervisor_id(page[-1][1], version, page[-1][0])})
        path = "os-hypervisors/detail" if detail else "os-hypervisors"
        body["hypervisors_links"] = [{"rel": "next", "href": f"{_base(request)}/v2.1/{path}?{query}"}]
    return COMPUTE.respond(body, version)


@router.get("/v2.1/os-hypervisors")
def list_hypervisors(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    return _list_hypervisors(request, who, detail=False)


@router.get("/v2.1/os-hypervisors/detail")
def list_hypervisors_detail(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    return _list_hypervisors(request, who, detail=True)


@router.get("/v2.1/os-services")
def list_services(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """The compute hosts' services (novakit runs no other: no conductor or scheduler service)."""
    version = COMPUTE.requested(request)
    service = _service(request)
    rows = hosts.list_hosts(service.db, service.conf, ctx=who.ctx)
    zones = aggregates.list_zones(service.db, who.ctx, service.conf, long=True)
    zone_of = {host: z["zone"] for z in zones for host in z["hosts"]}
    params = request.query_params
    services = []
    for i, row in enumerate(rows):
        if params.get("host") not in (None, row["host"]) or params.get("binary") not in (None, hosts.BINARY):
            continue
        entry: dict[str, Any] = {
            "id": row["service_uuid"] if version.at_least(2, 53) else i + 1,
            "binary": hosts.BINARY,
            "host": row["host"],
            "zone": zone_of.get(row["host"], service.conf.scheduler.default_availability_zone),
            "status": row["status"],
            "state": row["state"],
            "updated_at": _updated(row),
            "disabled_reason": row["disabled_reason"],
        }
        if version.at_least(2, 11):
            entry["forced_down"] = row["forced_down"]
        services.append(entry)
    return COMPUTE.respond({"services": services}, version)


# ---------------------------------------------------------------- availability zones


def _zones(request: Request, who: Caller, detail: bool) -> JSONResponse:
    version = COMPUTE.requested(request)
    service = _service(request)
    zones = aggregates.list_zones(service.db, who.ctx, service.conf, long=detail)
    rows = {r["host"]: r for r in hosts.list_hosts(service.db, service.conf, ctx=who.ctx)} if detail else {}
    info = []
    for zone in zones:
        entry: dict[str, Any] = {"zoneName": zone["zone"], "zoneState": {"available": zone["available"]}}
        entry["hosts"] = (
            {
                host: {
                    hosts.BINARY: {
                        "available": rows[host]["state"] == "up",
                        "active": rows[host]["status"] == "enabled",
                        "updated_at": _action_time(
                            rows[host]["last_contact_at"] or rows[host]["last_seen_up"]
                        ),
                    }
                }
                for host in zone["hosts"]
                if host in rows
            }
            if detail
            else None
        )
        info.append(entry)
    return COMPUTE.respond({"availabilityZoneInfo": info}, version)


@router.get("/v2.1/os-availability-zone")
def list_zones(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    return _zones(request, who, detail=False)


@router.get("/v2.1/os-availability-zone/detail")
def list_zones_detail(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    return _zones(request, who, detail=True)
