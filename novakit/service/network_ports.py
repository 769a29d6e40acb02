"""Network v2.0's ports (Neutron's ``/v2.0/ports``), thin over ``novakit.network.ports``.

A listing takes Neutron's filters (``ports.FILTERS``; ``fixed_ips=ip_address=...`` and
``subnet_id=...``), ``sort_key``/``sort_dir`` pairs, ``limit``/``marker``/``page_reverse``, all
done in the database by the library, with the next and previous pages in ``ports_links``; a marker
that is no port the caller may see is 404 (PortNotFound), as in Neutron.

A port is its project's: a member lists, shows, changes and deletes its own (another project's
is not found, 404) and creates one on a network it may see (its project's or a shared one).
A fixed IP is asked as Neutron asks it (``subnet_id``, ``ip_address``, or both; one per port);
an address held already is 409 (IpAddressAlreadyAllocated), a subnet with none left 409
(IpAddressGenerationFailure); a port a server uses is not deleted (409, PortInUse).

``binding:host_id`` (and Neutron's other admin-only binding attributes) are shown to those
who may see hosts (``host:show``, an admin's) only; members never see host names. The library's
view decides it (``ports.view`` has ``binding_host`` for them only): this router follows it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from novakit import exceptions, policy
from novakit.context import RequestContext
from novakit.network import ports
from novakit.service.auth import Caller, caller
from novakit.service.network_common import (
    db_of,
    fixed,
    links,
    only,
    own_project,
    owner,
    page_of,
    pick,
    push_of,
    resource_body,
    selected,
    sorts_of,
)

router = APIRouter()

_CREATE = {
    "name",
    "network_id",
    "fixed_ips",
    "mac_address",
    "security_groups",
    "port_security_enabled",
    "admin_state_up",
    "description",
    "binding:vnic_type",
    "tenant_id",
    "project_id",
}
_UPDATE = {"name", "security_groups", "admin_state_up", "description"}


def _port(port: dict[str, Any]) -> dict[str, Any]:
    """Neutron's port for the library's; the binding attributes where the library's view shows
    the host (``ports.view``: to those who may see hosts)."""
    out: dict[str, Any] = {
        "id": port["id"],
        "name": port["name"] or "",
        "network_id": port["network_id"],
        **owner(port["project_id"]),
        "mac_address": port["mac_address"],
        "admin_state_up": True,
        "status": port["status"],
        "device_id": port["device_id"] or "",
        "device_owner": port["device_owner"] or "",
        "fixed_ips": [
            {"subnet_id": f["subnet_id"], "ip_address": f["ip_address"]} for f in port["fixed_ips"]
        ],
        "security_groups": port["security_group_ids"],
        "port_security_enabled": port["port_security_enabled"],
        "allowed_address_pairs": [],
        "extra_dhcp_opts": [],
        "binding:vnic_type": "normal",
        "description": "",
        "tags": [],
        "revision_number": 0,
    }
    if "binding_host" in port:
        host = port["binding_host"]
        out.update(
            {
                "binding:host_id": host or "",
                "binding:profile": {},
                "binding:vif_type": "bridge" if host else "unbound",
                "binding:vif_details": {},
            }
        )
    return out


def _fixed_ips(given: Any) -> list[dict[str, Any]]:
    """Neutron's ``fixed_ips`` as the library asks them (``subnet``, ``ip_address``)."""
    if not isinstance(given, list) or not all(isinstance(f, dict) for f in given):
        raise exceptions.ValidationError("fixed_ips", "must be a list of objects (subnet_id, ip_address)")
    out = []
    for i, asked in enumerate(given):
        only(asked, {"subnet_id", "ip_address"})
        for key in ("subnet_id", "ip_address"):
            if key in asked and not isinstance(asked[key], str):
                raise exceptions.ValidationError(f"fixed_ips[{i}].{key}", "must be a string")
        if not asked:
            raise exceptions.ValidationError(f"fixed_ips[{i}]", "needs a subnet_id or an ip_address")
        out.append(
            {
                k: v
                for k, v in (("subnet", asked.get("subnet_id")), ("ip_address", asked.get("ip_address")))
                if v
            }
        )
    return out


#: query parameters that filter the ports as the library's filter of that name (``fixed_ips``
#: is read apart); ``binding:host_id`` is read for those who may see hosts only
_FILTERS = [name for name in ports.FILTERS if name not in ("ip_address", "subnet_id", "binding_host")]


def _filters(request: Request, ctx: RequestContext) -> dict[str, list[str]]:
    """The library's filters for the query; a parameter that filters nothing here is not read, as
    Neutron without filter validation does, and an empty value filters nothing (Neutron's)."""
    params = request.query_params
    found = {name: [v for v in params.getlist(name) if v] for name in _FILTERS if name in params}
    if "binding:host_id" in params and policy.allowed(ctx, "host:show"):
        found["binding_host"] = [v for v in params.getlist("binding:host_id") if v]
    for given in params.getlist("fixed_ips"):
        key, _, value = given.partition("=")
        if key not in ("ip_address", "subnet_id") or not value:
            raise exceptions.ValidationError("fixed_ips", "filters as ip_address=<address> or subnet_id=<id>")
        found.setdefault(key, []).append(value)
    return found


@router.get("/v2.0/ports")
def list_ports(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """Filtered, sorted and paged by the library, in the database: a page reads its ports only."""
    asked = page_of(request)
    found = ports.list_ports(
        db_of(request),
        who.ctx,
        filters=_filters(request, who.ctx),
        sort=sorts_of(request),
        limit=asked.limit,
        marker=asked.marker,
        reverse=asked.reverse,
    )
    shown = [_port(p) for p in found]
    body = {"ports": [selected(request, p) for p in shown], **links(request, "ports", shown, asked)}
    return JSONResponse(body)


@router.post("/v2.0/ports")
async def create_port(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    given = await resource_body(request, "port")
    only(given, _CREATE)
    own_project(given, who.ctx.project_id)
    fixed(given, "admin_state_up", True)
    fixed(given, "description", "", None)
    fixed(given, "binding:vnic_type", "normal")
    if not isinstance(given.get("network_id"), str):
        raise exceptions.ValidationError("network_id", "is required: the id of the port's network")
    data: dict[str, Any] = {
        k: given[k] for k in ("name", "mac_address", "security_groups", "port_security_enabled") if k in given
    }
    data["network"] = given["network_id"]
    if "fixed_ips" in given:
        data["fixed_ips"] = _fixed_ips(given["fixed_ips"])
    made = await run_in_threadpool(ports.create, db_of(request), who.ctx, data)
    assert made is not None
    return JSONResponse({"port": _port(made)}, status_code=201)


@router.get("/v2.0/ports/{port_id}")
def show_port(port_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    found = ports.show(db_of(request), who.ctx, port_id)
    return JSONResponse({"port": selected(request, _port(found))})


@router.put("/v2.0/ports/{port_id}")
async def update_port(port_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    given = await resource_body(request, "port")
    only(given, _UPDATE)
    fixed(given, "admin_state_up", True)
    fixed(given, "description", "", None)
    data = pick(given, "name", "security_groups")
    made = await run_in_threadpool(
        lambda: ports.update_port(db_of(request), who.ctx, port_id, data, on_change=push_of(request, who.ctx))
    )
    return JSONResponse({"port": _port(made)})


@router.delete("/v2.0/ports/{port_id}")
async def delete_port(port_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    await run_in_threadpool(
        lambda: ports.delete_port(db_of(request), who.ctx, port_id, on_change=push_of(request, who.ctx))
    )
    return Response(status_code=204)
