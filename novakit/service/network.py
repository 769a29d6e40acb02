"""Network v2.0 (Neutron's API, a subset) under ``/network``: the versions, the extensions, the
networks, the subnets and the quotas here; the ports (``network_ports``) and the security
groups and their rules (``network_security_groups``) in routers of their own, included here.

Thin over ``novakit.network``: each handler translates Neutron's body into the library's request
(names only), calls one library function and answers with Neutron's view of the library's. Who
may do what is the library's (``novakit.policy``): networks and subnets are the fleet's (an
admin's to create, change and delete, as Neutron's provider networks); a member sees its
project's networks and the shared ones, and another project's unshared network, its subnets and
its ports are not found (404). Neutron's codes: 201 on create, 204 on delete, 409 for what is in
use, an address taken or none left; errors in Neutron's shape (``novakit.service.errors``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from novakit import exceptions, quota
from novakit.network import networks, subnets
from novakit.service import network_ports, network_security_groups
from novakit.service.auth import Caller, caller
from novakit.service.network_common import (
    conf_of,
    db_of,
    fixed,
    listing,
    only,
    own_project,
    owner,
    pick,
    resource_body,
    selected,
)

router = APIRouter(prefix="/network")

#: the collections of v2.0 novakit serves (Neutron's resource names)
_RESOURCES = (
    ("network", "networks"),
    ("subnet", "subnets"),
    ("port", "ports"),
    ("security_group", "security-groups"),
    ("security_group_rule", "security-group-rules"),
    ("quota", "quotas"),
)

#: the extensions novakit implements: alias -> (name, description). What the clients probe for
#: (openstackclient's ``find_extension``, openstack.cloud's ``_has_neutron_extension``).
EXTENSIONS = {
    "security-group": ("security-group", "The security groups extension."),
    "quotas": ("Quota management support", "Expose functions for quotas management per project"),
    "quota_details": ("Quota details management support", "Expose functions for quotas usage statistics"),
    "port-security": ("Port Security", "Provides port security"),
    "binding": ("Port Binding", "Expose port bindings of a virtual port to external application"),
    "project-id": ("project_id field enabled", "Extension that indicates that project_id field is enabled."),
    "external-net": ("Neutron external network", "Adds external network attribute to network resource."),
    "net-mtu": ("Network MTU", "Provides MTU attribute for a network resource."),
}


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/") + "/network"


@router.get("")
@router.get("/")
async def versions(request: Request) -> JSONResponse:
    link = [{"rel": "self", "href": f"{_base(request)}/v2.0/"}]
    return JSONResponse({"versions": [{"id": "v2.0", "status": "CURRENT", "links": link}]})


@router.get("/v2.0")
@router.get("/v2.0/")
async def resources(request: Request) -> JSONResponse:
    return JSONResponse(
        {
            "resources": [
                {
                    "name": name,
                    "collection": coll,
                    "links": [{"rel": "self", "href": f"{_base(request)}/v2.0/{coll}"}],
                }
                for name, coll in _RESOURCES
            ]
        }
    )


def _extension(alias: str) -> dict[str, Any]:
    name, description = EXTENSIONS[alias]
    return {
        "alias": alias,
        "name": name,
        "description": description,
        "updated": "2013-02-03T10:00:00-00:00",
        "links": [],
    }


@router.get("/v2.0/extensions")
async def list_extensions(who: Caller = Depends(caller)) -> JSONResponse:
    return JSONResponse({"extensions": [_extension(a) for a in EXTENSIONS]})


@router.get("/v2.0/extensions/{alias}")
async def show_extension(alias: str, who: Caller = Depends(caller)) -> JSONResponse:
    if alias not in EXTENSIONS:
        raise exceptions.NotFound(f"Extension with alias {alias} does not exist")
    return JSONResponse({"extension": _extension(alias)})


# ---------------------------------------------------------------- networks


def _network(net: dict[str, Any]) -> dict[str, Any]:
    """Neutron's network for the library's."""
    return {
        "id": net["id"],
        "name": net["name"],
        **owner(net["project_id"]),
        "status": "ACTIVE",
        "admin_state_up": True,
        "shared": net["shared"],
        "subnets": net["subnet_ids"],
        "mtu": net["mtu"] or 1500,
        "port_security_enabled": True,
        "router:external": False,
        "availability_zone_hints": [],
        "availability_zones": [],
        "ipv4_address_scope": None,
        "ipv6_address_scope": None,
        "description": "",
        "tags": [],
        "revision_number": 0,
    }


def _network_request(given: dict[str, Any]) -> dict[str, Any]:
    fixed(given, "admin_state_up", True)
    fixed(given, "port_security_enabled", True)
    fixed(given, "router:external", False)
    fixed(given, "description", "", None)
    fixed(given, "availability_zone_hints", [])
    return pick(given, "name", "shared", "mtu")


@router.get("/v2.0/networks")
def list_networks(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    found = networks.list_networks(db_of(request), who.ctx)
    return JSONResponse(listing(request, "networks", [_network(n) for n in found]))


@router.post("/v2.0/networks")
async def create_network(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    given = await resource_body(request, "network")
    only(
        given,
        {
            "name",
            "shared",
            "mtu",
            "admin_state_up",
            "port_security_enabled",
            "router:external",
            "description",
            "availability_zone_hints",
            "tenant_id",
            "project_id",
        },
    )
    own_project(given, who.ctx.project_id)
    data = {"shared": False, **_network_request(given)}  # Neutron's default: not shared
    made = await run_in_threadpool(networks.create, db_of(request), who.ctx, data)
    assert made is not None
    return JSONResponse({"network": _network(made)}, status_code=201)


@router.get("/v2.0/networks/{network_id}")
def show_network(network_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    found = networks.show(db_of(request), network_id, who.ctx)
    return JSONResponse({"network": selected(request, _network(found))})


@router.put("/v2.0/networks/{network_id}")
async def update_network(network_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    given = await resource_body(request, "network")
    only(
        given, {"name", "shared", "admin_state_up", "port_security_enabled", "router:external", "description"}
    )
    made = await run_in_threadpool(
        networks.update, db_of(request), who.ctx, network_id, _network_request(given)
    )
    return JSONResponse({"network": _network(made)})


@router.delete("/v2.0/networks/{network_id}")
async def delete_network(network_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    db = db_of(request)
    # Found as the caller may see it first: another project's network is not found (404), not refused.
    await run_in_threadpool(networks.show, db, network_id, who.ctx)
    await run_in_threadpool(networks.delete, db, who.ctx, network_id)
    return Response(status_code=204)


# ---------------------------------------------------------------- subnets


def _subnet(sub: dict[str, Any]) -> dict[str, Any]:
    """Neutron's subnet for the library's."""
    return {
        "id": sub["id"],
        "name": sub["name"],
        "network_id": sub["network_id"],
        **owner(sub["project_id"]),
        "ip_version": sub["ip_version"],
        "cidr": sub["cidr"],
        "gateway_ip": sub["gateway_ip"],
        "allocation_pools": sub["allocation_pools"],
        "dns_nameservers": sub["dns_nameservers"],
        "host_routes": [],
        "enable_dhcp": sub["enable_dhcp"],
        "ipv6_ra_mode": None,
        "ipv6_address_mode": None,
        "subnetpool_id": None,
        "service_types": [],
        "description": "",
        "tags": [],
        "revision_number": 0,
    }


@router.get("/v2.0/subnets")
def list_subnets(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    found = subnets.list_subnets(db_of(request), ctx=who.ctx)
    return JSONResponse(listing(request, "subnets", [_subnet(s) for s in found]))


@router.post("/v2.0/subnets")
async def create_subnet(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    given = await resource_body(request, "subnet")
    only(
        given,
        {
            "name",
            "network_id",
            "ip_version",
            "cidr",
            "gateway_ip",
            "allocation_pools",
            "dns_nameservers",
            "enable_dhcp",
            "host_routes",
            "description",
            "tenant_id",
            "project_id",
        },
    )
    own_project(given, who.ctx.project_id)
    fixed(given, "ip_version", 4)
    fixed(given, "host_routes", [])
    fixed(given, "description", "", None)
    if not isinstance(given.get("network_id"), str):
        raise exceptions.ValidationError("network_id", "is required: the id of the subnet's network")
    data = pick(given, "name", "cidr", "gateway_ip", "allocation_pools", "dns_nameservers", "enable_dhcp")
    data["network"] = given["network_id"]
    db = db_of(request)
    # The network as the caller may see it: another project's is not found (404).
    await run_in_threadpool(networks.show, db, given["network_id"], who.ctx)
    made = await run_in_threadpool(subnets.create, db, who.ctx, data)
    assert made is not None
    return JSONResponse({"subnet": _subnet(made)}, status_code=201)


@router.get("/v2.0/subnets/{subnet_id}")
def show_subnet(subnet_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    return JSONResponse(
        {"subnet": selected(request, _subnet(subnets.show(db_of(request), subnet_id, who.ctx)))}
    )


@router.put("/v2.0/subnets/{subnet_id}")
async def update_subnet(subnet_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    given = await resource_body(request, "subnet")
    only(given, {"name", "dns_nameservers", "description"})
    fixed(given, "description", "", None)
    data = pick(given, "name", "dns_nameservers")
    made = await run_in_threadpool(subnets.update, db_of(request), who.ctx, subnet_id, data)
    return JSONResponse({"subnet": _subnet(made)})


@router.delete("/v2.0/subnets/{subnet_id}")
async def delete_subnet(subnet_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    db = db_of(request)
    await run_in_threadpool(subnets.show, db, subnet_id, who.ctx)
    await run_in_threadpool(subnets.delete, db, who.ctx, subnet_id)
    return Response(status_code=204)


# ---------------------------------------------------------------- quotas

#: Neutron's quota names of the limits novakit keeps (the library's names)
_KEPT = {"security_group": "security_groups", "security_group_rule": "security_group_rules"}
#: Neutron's quotas novakit does not enforce: shown unlimited (-1), refused when set
_NOT_KEPT = ("network", "subnet", "port", "router", "floatingip", "rbac_policy", "subnetpool")


def _quota(usage: dict[str, dict[str, int]], detail: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _NOT_KEPT:
        out[name] = {"limit": -1, "used": 0, "reserved": 0} if detail else -1
    for name, kept in _KEPT.items():
        limit, used = usage[kept]["limit"], usage[kept]["in_use"]
        out[name] = {"limit": limit, "used": used, "reserved": 0} if detail else limit
    return out


@router.get("/v2.0/quotas/{project_id}")
def show_quota(project_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    usage = quota.show_quota(db_of(request), conf_of(request), who.ctx, project_id)
    return JSONResponse({"quota": _quota(usage, False)})


@router.get("/v2.0/quotas/{project_id}/details")
def show_quota_details(project_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    usage = quota.show_quota(db_of(request), conf_of(request), who.ctx, project_id)
    return JSONResponse({"quota": _quota(usage, True)})


@router.get("/v2.0/quotas/{project_id}/default")
def show_quota_default(project_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    defaults = quota.default_limits(conf_of(request))
    return JSONResponse({"quota": _quota({k: {"limit": v, "in_use": 0} for k, v in defaults.items()}, False)})


@router.put("/v2.0/quotas/{project_id}")
async def update_quota(project_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """Set some of a project's limits (an admin's; ``novakit.quota``): novakit keeps the
    security groups' and their rules'; a quota it does not keep is refused (400)."""
    given = await resource_body(request, "quota")
    limits: dict[str, Any] = {}
    for key, value in given.items():
        if key in _KEPT:
            limits[_KEPT[key]] = value
        elif key in _NOT_KEPT:
            raise exceptions.ValidationError(f"quota.{key}", "is a quota novakit does not keep")
        else:
            raise exceptions.ValidationError(f"quota.{key}", "Unrecognized attribute(s): not a quota")
    db, conf = db_of(request), conf_of(request)
    await run_in_threadpool(quota.apply, db, conf, who.ctx, project_id, limits)
    usage = await run_in_threadpool(quota.show_quota, db, conf, who.ctx, project_id)
    return JSONResponse({"quota": _quota(usage, False)})


router.include_router(network_ports.router)
router.include_router(network_security_groups.router)
