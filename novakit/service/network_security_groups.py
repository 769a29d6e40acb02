"""Network v2.0's security groups and their rules (Neutron's ``/v2.0/security-groups`` and
``/v2.0/security-group-rules``), thin over ``novakit.network.security_groups``.

A group is its project's (an admin may make one in another project with ``project_id``); its
rules are checked and spelt as Neutron checks them by the library (``security_group_rules``),
an equal rule of the group is 409 (SecurityGroupRuleExists), a group a port carries is not
deleted (409, SecurityGroupInUse), and neither is a project's default group (409) but by an
admin. The quotas ``security_group`` and ``security_group_rule`` are the library's (409 when
over). A change of rules is sent to the hosts of the ports it touches once it committed.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from novakit import exceptions
from novakit.network import security_groups
from novakit.service.auth import Caller, caller
from novakit.service.network_common import (
    conf_of,
    db_of,
    fixed,
    listing,
    only,
    owner,
    pick,
    push_of,
    resource_body,
    selected,
)

router = APIRouter()

_RULE_KEYS = (
    "direction",
    "ethertype",
    "protocol",
    "port_range_min",
    "port_range_max",
    "remote_ip_prefix",
    "description",
)


def _rule(rule: dict[str, Any]) -> dict[str, Any]:
    """Neutron's security group rule for the library's."""
    return {
        "id": rule["id"],
        "security_group_id": rule["security_group_id"],
        **{k: rule[k] for k in _RULE_KEYS},
        "description": rule["description"] or "",
        "remote_group_id": rule["remote_group_id"],
        "remote_address_group_id": None,
        **owner(rule["project_id"]),
        "revision_number": 0,
    }


def _group(group: dict[str, Any]) -> dict[str, Any]:
    """Neutron's security group for the library's."""
    return {
        "id": group["id"],
        "name": group["name"],
        "description": group["description"] or "",
        **owner(group["project_id"]),
        "security_group_rules": [_rule(r) for r in group["security_group_rules"]],
        "stateful": True,
        "shared": False,
        "tags": [],
        "revision_number": 0,
    }


def _project(given: dict[str, Any]) -> str | None:
    """The project a create names (``tenant_id`` or ``project_id``, one value)."""
    named = {given[k] for k in ("tenant_id", "project_id") if k in given}
    if len(named) > 1:
        raise exceptions.ValidationError("project_id", "must be the same as tenant_id when both are given")
    return named.pop() if named else None


# ---------------------------------------------------------------- groups


@router.get("/v2.0/security-groups")
def list_groups(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    found = security_groups.list_groups(db_of(request), who.ctx)
    return JSONResponse(listing(request, "security_groups", [_group(g) for g in found]))


@router.post("/v2.0/security-groups")
async def create_group(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    given = await resource_body(request, "security_group")
    only(given, {"name", "description", "stateful", "tenant_id", "project_id"})
    fixed(given, "stateful", True)
    data = pick(given, "name", "description")
    project = _project(given)
    if project is not None:
        data["project_id"] = project
    made = await run_in_threadpool(
        security_groups.create_group, db_of(request), conf_of(request), who.ctx, data
    )
    assert made is not None
    return JSONResponse({"security_group": _group(made)}, status_code=201)


@router.get("/v2.0/security-groups/{group_id}")
def show_group(group_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    found = security_groups.show_group(db_of(request), who.ctx, group_id)
    return JSONResponse({"security_group": selected(request, _group(found))})


@router.put("/v2.0/security-groups/{group_id}")
async def update_group(group_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    given = await resource_body(request, "security_group")
    only(given, {"name", "description", "stateful"})
    fixed(given, "stateful", True)
    data = pick(given, "name", "description")
    made = await run_in_threadpool(security_groups.update_group, db_of(request), who.ctx, group_id, data)
    return JSONResponse({"security_group": _group(made)})


@router.delete("/v2.0/security-groups/{group_id}")
async def delete_group(group_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    push = push_of(request, who.ctx)
    await run_in_threadpool(
        lambda: security_groups.delete_group(db_of(request), who.ctx, group_id, on_change=push)
    )
    return Response(status_code=204)


# ---------------------------------------------------------------- rules


@router.get("/v2.0/security-group-rules")
def list_rules(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    found = security_groups.list_rules(db_of(request), who.ctx)
    return JSONResponse(listing(request, "security_group_rules", [_rule(r) for r in found]))


@router.post("/v2.0/security-group-rules")
async def create_rule(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    given = await resource_body(request, "security_group_rule")
    only(given, {"security_group_id", "remote_group_id", "tenant_id", "project_id", *_RULE_KEYS})
    if not isinstance(given.get("security_group_id"), str):
        raise exceptions.ValidationError("security_group_id", "is required: the id of the rule's group")
    for key in ("remote_group_id", "remote_ip_prefix"):
        if given.get(key) is not None and not isinstance(given[key], str):
            raise exceptions.ValidationError(key, "must be a string")
    data: dict[str, Any] = {k: given[k] for k in _RULE_KEYS if given.get(k) is not None}
    data["security_group"] = given["security_group_id"]
    if given.get("remote_group_id") is not None:
        data["remote_group"] = given["remote_group_id"]
    db, conf, push = db_of(request), conf_of(request), push_of(request, who.ctx)
    # The rule's group as the caller may see it: another project's is not found (404).
    group = await run_in_threadpool(security_groups.show_group, db, who.ctx, given["security_group_id"])
    project = _project(given)
    if project is not None and project != group["project_id"]:
        raise exceptions.ValidationError("project_id", "must be the project of the rule's security group")
    made = await run_in_threadpool(
        lambda: security_groups.create_rule(db, conf, who.ctx, data, on_change=push)
    )
    assert made is not None
    return JSONResponse({"security_group_rule": _rule(made)}, status_code=201)


@router.get("/v2.0/security-group-rules/{rule_id}")
def show_rule(rule_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    found = security_groups.show_rule(db_of(request), who.ctx, rule_id)
    return JSONResponse({"security_group_rule": selected(request, _rule(found))})


@router.delete("/v2.0/security-group-rules/{rule_id}")
async def delete_rule(rule_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    push = push_of(request, who.ctx)
    await run_in_threadpool(
        lambda: security_groups.delete_rule(db_of(request), who.ctx, rule_id, on_change=push)
    )
    return Response(status_code=204)
