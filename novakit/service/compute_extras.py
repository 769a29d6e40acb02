"""Compute v2.1's key pairs, server groups, quota sets and the flavors' write side (Nova's
``os-keypairs``, ``os-server-groups``, ``os-quota-sets``, ``flavor-manage``,
``os-flavor-extra-specs`` and ``os-flavor-access`` controllers), thin over the library.

Each handler translates Nova's body into the library's request (names only) and answers with
Nova's view of the library's; every decision is the library's: the name rules and the key
checks (``novakit.keypairs``), the policies (``novakit.server_groups``), the limits' bounds and
who may set them (``novakit.quota``), who may create or delete a flavor and its sizes'
bounds, its extra specs' keys and values, which projects may use a private flavor
(``novakit.catalog.flavors``), a quota set below the project's use without ``force``
(``novakit.quota``). A refusal is the library's exception, answered by the error table
(``novakit.service.errors``): 400 for a bad body (naming the field), 403 for a caller the
policy refuses, 404 for what the caller may not see (another user's key pair, another
project's group, a private flavor its project has no access to), 409 for a name taken or an
access given already; nothing is written.

Whose records: key pairs are the caller's own (an admin names another user's with
``user_id``, from 2.10); server groups the caller's project's; a quota set is read by the
project's members and the admins, and set by the admins; a flavor's extra specs are read by
whoever sees the flavor, and set, like its access list, by the admins.

Microversions: key pairs' ``type``, 201 on create and 204 on delete from 2.2 (200 and 202
before), ``user_id`` from 2.10, pages (``limit``, ``marker``: a name) and ``keypairs_links``
from 2.35; server groups' ``project_id`` and
``user_id`` from 2.13 and the soft policies from 2.15; the quota sets drop the network
quotas at 2.36 and the personality file quotas at 2.57; a flavor's ``description`` from 2.55.
What Nova keeps and novakit does not (a server group's metadata, quotas of metadata items,
server groups and their members) is shown as Nova shows a limit it does not enforce (-1),
or empty; setting such a quota is refused with 400 naming it.
"""

from __future__ import annotations

import functools
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from novakit import exceptions, quota
from novakit.catalog import flavors
from novakit.compute import server_groups
from novakit.identity import projects
from novakit.keypairs import registry as keypairs
from novakit.service import paging
from novakit.service.auth import Caller, caller
from novakit.service.body import read_json
from novakit.service.compute import COMPUTE, _action_time, _base, _bool, _flavor, _service
from novakit.service.microversion import Version

router = APIRouter(prefix="/compute")


def _object(body: dict[str, Any], key: str, what: str) -> dict[str, Any]:
    value = body.get(key)
    if not isinstance(value, dict):
        raise exceptions.ValidationError(key, f"is required: an object with {what}")
    extra = sorted(set(body) - {key})
    if extra:
        raise exceptions.ValidationError(extra[0], f"is not taken here (the body is one {key!r} object)")
    return value


def _only(given: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise exceptions.ValidationError(f"{where}.{unknown[0]}", "is not an attribute novakit takes here")


# ---------------------------------------------------------------- key pairs


def _keypair_user(request: Request, version: Version) -> str | None:
    """The ``user_id`` a request names (2.10); the library decides who may name another user."""
    asked = request.query_params.get("user_id")
    if asked is not None and not version.at_least(2, 10):
        raise exceptions.ValidationError("user_id", "is taken from microversion 2.10")
    return asked


def _keypair(pair: dict[str, Any], version: Version, full: bool) -> dict[str, Any]:
    """Nova's key pair: its name, public key and fingerprint (a listing's); ``full`` (a show's)
    with its owner and times. ``type`` from 2.2."""
    out: dict[str, Any] = {
        "name": pair["name"],
        "public_key": pair["public_key"],
        "fingerprint": pair["fingerprint"],
    }
    if full:
        out.update(
            user_id=pair["user_id"],
            created_at=_action_time(pair["created_at"]),
            updated_at=None,
            deleted=False,
            deleted_at=None,
        )
    if version.at_least(2, 2):
        out["type"] = pair["type"]
    return out


@router.get("/v2.1/os-keypairs")
def list_keypairs(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """The user's key pairs by name; from 2.35 a page of them (``limit``, after ``marker``)."""
    version = COMPUTE.requested(request)
    user = _keypair_user(request, version)
    found = keypairs.list_keypairs(_service(request).db, who.ctx, user_id=user)
    following = None
    if version.at_least(2, 35):
        found, following = paging.page(request, found, "name")
    body: dict[str, Any] = {"keypairs": [{"keypair": _keypair(p, version, False)} for p in found]}
    if following is not None:
        body["keypairs_links"] = [{"rel": "next", "href": f"{_base(request)}/v2.1/os-keypairs?{following}"}]
    return COMPUTE.respond(body, version)


@router.post("/v2.1/os-keypairs")
async def create_keypair(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """Import ``public_key``, or make a new pair whose private key is in this answer only."""
    version = COMPUTE.requested(request)
    given = _object(await read_json(request), "keypair", "name")
    allowed = {"name", "public_key"}
    if version.at_least(2, 2):
        allowed.add("type")
    if version.at_least(2, 10):
        allowed.add("user_id")
    _only(given, allowed, "keypair")
    service = _service(request)
    made = await run_in_threadpool(keypairs.create, service.db, service.conf, who.ctx, given)
    out = _keypair(made, version, False)
    out["user_id"] = made["user_id"]
    if "private_key" in made:
        out["private_key"] = made["private_key"]
    return COMPUTE.respond({"keypair": out}, version, status_code=201 if version.at_least(2, 2) else 200)


@router.get("/v2.1/os-keypairs/{name}")
def show_keypair(name: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    user = _keypair_user(request, version)
    found = keypairs.show(_service(request).db, who.ctx, name, user_id=user)
    return COMPUTE.respond({"keypair": _keypair(found, version, True)}, version)


@router.delete("/v2.1/os-keypairs/{name}")
async def delete_keypair(name: str, request: Request, who: Caller = Depends(caller)) -> Response:
    version = COMPUTE.requested(request)
    user = _keypair_user(request, version)
    await run_in_threadpool(keypairs.delete, _service(request).db, who.ctx, name, user_id=user)
    return COMPUTE.accepted(version, 204 if version.at_least(2, 2) else 202)


# ---------------------------------------------------------------- server groups

#: the policies a group may have before 2.15 (the soft ones came with it)
_POLICIES_BEFORE_2_15 = ("affinity", "anti-affinity")


def _server_group(group: dict[str, Any], version: Version) -> dict[str, Any]:
    """Nova's server group: before 2.64 its one policy as ``policies`` and an empty ``metadata``;
    from 2.64 ``policy`` and its ``rules``."""
    out: dict[str, Any] = {"id": group["id"], "name": group["name"], "members": list(group["members"])}
    if version.at_least(2, 64):
        out.update(policy=group["policy"], rules=dict(group["rules"]))
    else:
        out.update(policies=[group["policy"]], metadata={})
    if version.at_least(2, 13):
        out.update(project_id=group["project_id"], user_id=group["user_id"])
    return out


@router.get("/v2.1/os-server-groups")
def list_server_groups(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    asked = request.query_params.get("all_projects")
    every = asked is not None and _bool("all_projects", asked)
    found = server_groups.list_groups(_service(request).db, who.ctx, all_projects=every)
    return COMPUTE.respond({"server_groups": [_server_group(g, version) for g in found]}, version)


@router.post("/v2.1/os-server-groups")
async def create_server_group(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    rules: Any = None
    if version.at_least(2, 64):
        # 2.64: one ``policy`` and its ``rules`` (max_server_per_host, for anti-affinity)
        given = _object(await read_json(request), "server_group", "name and policy")
        _only(given, {"name", "policy", "rules"}, "server_group")
        chosen = given.get("policy")
        if not isinstance(chosen, str):
            raise exceptions.ValidationError("server_group.policy", "is required: a string")
        rules = given.get("rules")
        if rules is not None and not isinstance(rules, dict):
            raise exceptions.ValidationError("server_group.rules", "must be an object")
    else:
        given = _object(await read_json(request), "server_group", "name and policies")
        _only(given, {"name", "policies"}, "server_group")
        policies = given.get("policies")
        if not isinstance(policies, list) or len(policies) != 1 or not isinstance(policies[0], str):
            raise exceptions.ValidationError("server_group.policies", "is required: a list of one policy")
        chosen = policies[0]
        if not version.at_least(2, 15) and chosen not in _POLICIES_BEFORE_2_15:
            raise exceptions.ValidationError(
                "server_group.policies", f"must be one of {', '.join(_POLICIES_BEFORE_2_15)} before 2.15"
            )
    name = given.get("name")
    if not isinstance(name, str):
        raise exceptions.ValidationError("server_group.name", "is required: a string")
    db = _service(request).db
    made = await run_in_threadpool(server_groups.create, db, who.ctx, name, chosen, rules)
    return COMPUTE.respond({"server_group": _server_group(made, version)}, version)


@router.get("/v2.1/os-server-groups/{group_id}")
def show_server_group(group_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    found = server_groups.get(_service(request).db, who.ctx, group_id)
    return COMPUTE.respond({"server_group": _server_group(found, version)}, version)


@router.delete("/v2.1/os-server-groups/{group_id}")
async def delete_server_group(group_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    version = COMPUTE.requested(request)
    await run_in_threadpool(server_groups.delete_group, _service(request).db, who.ctx, group_id)
    return COMPUTE.accepted(version, 204)


# ---------------------------------------------------------------- quota sets

#: Nova's quotas that novakit keeps (the library's resources of the same names), by the version
#: that dropped them from the quota sets (None: every version)
_KEPT: dict[str, Version | None] = {
    "instances": None,
    "cores": None,
    "ram": None,
    "key_pairs": None,
    "security_groups": Version(2, 36),
    "security_group_rules": Version(2, 36),
}
#: Nova's quotas that novakit does not keep: the limit shown (-1, none enforced; 0 for what
#: novakit never does, as ``/limits`` shows them), and the version that dropped them
_NOT_KEPT: dict[str, tuple[int, Version | None]] = {
    "metadata_items": (-1, None),
    "server_groups": (-1, None),
    "server_group_members": (-1, None),
    "fixed_ips": (-1, Version(2, 36)),
    "floating_ips": (0, Version(2, 36)),
    "injected_files": (0, Version(2, 57)),
    "injected_file_content_bytes": (0, Version(2, 57)),
    "injected_file_path_bytes": (0, Version(2, 57)),
}


def _shown(dropped: Version | None, version: Version) -> bool:
    return dropped is None or version < dropped


def _quota_set(
    limits: dict[str, int], used: dict[str, int] | None, version: Version, project_id: str | None
) -> dict[str, Any]:
    """Nova's quota set: each quota's limit, or (``used`` given, the detail) its limit, use and
    reservation (novakit reserves nothing: 0); ``id`` the project's (not in an update's answer)."""
    out: dict[str, Any] = {"id": project_id} if project_id is not None else {}
    rows = [(k, limits[k], (used or {}).get(k, 0)) for k, v in _KEPT.items() if _shown(v, version)]
    rows += [(k, limit, 0) for k, (limit, v) in _NOT_KEPT.items() if _shown(v, version)]
    for key, limit, in_use in rows:
        out[key] = limit if used is None else {"limit": limit, "in_use": in_use, "reserved": 0}
    return out


def _no_user(request: Request) -> None:
    if request.query_params.get("user_id") is not None:
        raise exceptions.ValidationError("user_id", "novakit keeps a project's quotas only, none per user")


def _show_quota(request: Request, who: Caller, project_id: str, detail: bool) -> JSONResponse:
    version = COMPUTE.requested(request)
    _no_user(request)
    service = _service(request)
    usage = quota.show_quota(service.db, service.conf, who.ctx, project_id)
    limits = {k: v["limit"] for k, v in usage.items()}
    used = {k: v["in_use"] for k, v in usage.items()} if detail else None
    return COMPUTE.respond({"quota_set": _quota_set(limits, used, version, project_id)}, version)


@router.get("/v2.1/os-quota-sets/{project_id}")
def show_quota_set(project_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """A project's quotas; ``usage=true`` (openstacksdk's) answers the detail."""
    asked = request.query_params.get("usage")
    return _show_quota(request, who, project_id, asked is not None and _bool("usage", asked))


@router.get("/v2.1/os-quota-sets/{project_id}/detail")
def show_quota_set_detail(project_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    return _show_quota(request, who, project_id, detail=True)


@router.get("/v2.1/os-quota-sets/{project_id}/defaults")
def show_quota_defaults(project_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    defaults = quota.default_limits(_service(request).conf)
    return COMPUTE.respond({"quota_set": _quota_set(defaults, None, version, project_id)}, version)


@router.put("/v2.1/os-quota-sets/{project_id}")
async def update_quota_set(project_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """Set some of a project's quotas (an admin's); one below the project's use only with
    ``force`` (the library's check)."""
    version = COMPUTE.requested(request)
    _no_user(request)
    given = _object(await read_json(request), "quota_set", "the quotas to set")
    limits: dict[str, Any] = {}
    force = False
    for key, value in given.items():
        if key == "force":
            if not isinstance(value, bool):
                raise exceptions.ValidationError("quota_set.force", "must be true or false")
            force = value
        elif key in _KEPT and _shown(_KEPT[key], version):
            limits[key] = value
        elif key in _NOT_KEPT and _shown(_NOT_KEPT[key][1], version):
            raise exceptions.ValidationError(f"quota_set.{key}", "is a quota novakit does not keep")
        else:
            raise exceptions.ValidationError(f"quota_set.{key}", "is not a quota of this microversion")
    service = _service(request)
    applied = await run_in_threadpool(
        functools.partial(quota.apply, service.db, service.conf, who.ctx, project_id, limits, force=force)
    )
    return COMPUTE.respond({"quota_set": _quota_set(applied["after"], None, version, None)}, version)


# ---------------------------------------------------------------- flavors (an admin's)

#: the keys of Nova's flavor create body, and the library's name for each
_FLAVOR_KEYS = {
    "name": "name",
    "ram": "memory_mb",
    "vcpus": "vcpus",
    "disk": "root_gb",
    "id": "flavorid",
    "OS-FLV-EXT-DATA:ephemeral": "ephemeral_gb",
    "swap": "swap",
    "os-flavor-access:is_public": "is_public",
}


@router.post("/v2.1/flavors")
async def create_flavor(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    given = _object(await read_json(request), "flavor", "name, ram, vcpus and disk")
    data: dict[str, Any] = {}
    for key, value in given.items():
        if key in _FLAVOR_KEYS:
            data[_FLAVOR_KEYS[key]] = value
        elif key == "description" and version.at_least(2, 55):
            data["description"] = value
        elif key == "rxtx_factor":
            # novakit shapes no traffic: Nova's default factor, the one every flavor shows, only
            if isinstance(value, bool) or value not in (1, 1.0):
                raise exceptions.ValidationError(
                    "flavor.rxtx_factor", "must be 1.0: novakit shapes no traffic"
                )
        else:
            raise exceptions.ValidationError(
                f"flavor.{key}", "is not a flavor attribute of this microversion"
            )
    if data.get("flavorid") is None:  # Nova's null id: one is made
        data.pop("flavorid", None)
    made = await run_in_threadpool(flavors.create, _service(request).db, who.ctx, data)
    return COMPUTE.respond({"flavor": _flavor(request, made, version, detail=True)}, version)


@router.delete("/v2.1/flavors/{flavor_id}")
async def delete_flavor(flavor_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    version = COMPUTE.requested(request)
    await run_in_threadpool(flavors.delete, _service(request).db, who.ctx, flavor_id)
    return COMPUTE.accepted(version, 202)


# ---------------------------------------------------------------- a flavor's extra specs


def _extra_specs(specs: dict[str, Any]) -> dict[str, Any]:
    """Nova's answer of an extra specs write: the specs the request gave, as it gave them."""
    return {"extra_specs": specs}


@router.post("/v2.1/flavors/{flavor_id}/os-extra_specs")
async def create_flavor_extra_specs(
    flavor_id: str, request: Request, who: Caller = Depends(caller)
) -> JSONResponse:
    """Set some of a flavor's extra specs (an admin's): Nova answers 200 with the body given."""
    version = COMPUTE.requested(request)
    given = _object(await read_json(request), "extra_specs", "keys and values")
    await run_in_threadpool(flavors.set_extra_specs, _service(request).db, who.ctx, flavor_id, given)
    return COMPUTE.respond(_extra_specs(given), version)


@router.get("/v2.1/flavors/{flavor_id}/os-extra_specs/{key}")
def show_flavor_extra_spec(
    flavor_id: str, key: str, request: Request, who: Caller = Depends(caller)
) -> JSONResponse:
    version = COMPUTE.requested(request)
    value = flavors.show_extra_spec(_service(request).db, who.ctx, flavor_id, key)
    return COMPUTE.respond({key: value}, version)


@router.put("/v2.1/flavors/{flavor_id}/os-extra_specs/{key}")
async def update_flavor_extra_spec(
    flavor_id: str, key: str, request: Request, who: Caller = Depends(caller)
) -> JSONResponse:
    """Set the one extra spec the path names: the body is ``{key: value}`` of that key only."""
    version = COMPUTE.requested(request)
    given = await read_json(request)
    if list(given) != [key]:
        raise exceptions.ValidationError("body", "must be one object of the one key the path names")
    await run_in_threadpool(flavors.set_extra_specs, _service(request).db, who.ctx, flavor_id, given)
    return COMPUTE.respond(given, version)


@router.delete("/v2.1/flavors/{flavor_id}/os-extra_specs/{key}")
async def delete_flavor_extra_spec(
    flavor_id: str, key: str, request: Request, who: Caller = Depends(caller)
) -> Response:
    """Remove one extra spec: Nova answers 200 with no body."""
    version = COMPUTE.requested(request)
    await run_in_threadpool(flavors.unset_extra_spec, _service(request).db, who.ctx, flavor_id, key)
    return COMPUTE.accepted(version, 200)


# ---------------------------------------------------------------- access to a private flavor

#: the flavor actions (``POST /flavors/{id}/action``) and the library's call for each
_ACCESS_ACTIONS = {"addTenantAccess": flavors.add_access, "removeTenantAccess": flavors.remove_access}


def _flavor_access(access: list[dict[str, str]]) -> dict[str, Any]:
    """Nova's flavor access list: each project (``tenant_id``) given access to the flavor."""
    return {"flavor_access": [{"flavor_id": a["flavor_id"], "tenant_id": a["project_id"]} for a in access]}


@router.get("/v2.1/flavors/{flavor_id}/os-flavor-access")
def list_flavor_access(flavor_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    version = COMPUTE.requested(request)
    found = flavors.list_access(_service(request).db, who.ctx, flavor_id)
    return COMPUTE.respond(_flavor_access(found), version)


@router.post("/v2.1/flavors/{flavor_id}/action")
async def flavor_action(flavor_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    """``addTenantAccess`` or ``removeTenantAccess``: ``{"tenant": project id}``; the flavor's
    access list after it."""
    version = COMPUTE.requested(request)
    body = await read_json(request)
    if len(body) != 1 or next(iter(body)) not in _ACCESS_ACTIONS:
        raise exceptions.ValidationError("action", f"must be one of {', '.join(_ACCESS_ACTIONS)}")
    name = next(iter(body))
    given = _object(body, name, "tenant")
    _only(given, {"tenant"}, name)
    tenant = given.get("tenant")
    if not isinstance(tenant, str) or not 1 <= len(tenant) <= 255:
        raise exceptions.ValidationError(f"{name}.tenant", "is required: a project id of 1 to 255 characters")
    db = _service(request).db
    if name == "addTenantAccess":
        # A project to give access to must be one the identity knows (Nova's verify_project_id).
        known = functools.partial(projects.exists, db)
        call = functools.partial(flavors.add_access, db, who.ctx, flavor_id, tenant, known_project=known)
    else:
        call = functools.partial(flavors.remove_access, db, who.ctx, flavor_id, tenant)
    found = await run_in_threadpool(call)
    return COMPUTE.respond(_flavor_access(found), version)
