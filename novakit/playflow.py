"""The boot flow as the playbooks run it: the controller's steps between plays.

``playbooks/boot.yml`` calls these through the ``novakit.cloud.conductor``
module; they are plain functions so that tests and other callers (AWX
workflows, the CLI) reach the same behaviour without Ansible.
Requests travel between plays as JSON (``ComputeRequest.to_wire``), results
come back as the ``compute`` module returns them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from novakit import exceptions
from novakit.compute import schemas
from novakit.compute.api import API, server_view
from novakit.compute.messages import ComputeRequest, ComputeResult
from novakit.compute.states import VmState
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import Instance


def _names(req: schemas.ServerCreate) -> list[str]:
    count = int(req.max_count or req.min_count)
    return [req.name] if count == 1 else [f"{req.name}-{i + 1}" for i in range(count)]


def _wire(requests: list[ComputeRequest]) -> list[dict[str, Any]]:
    return [r.to_wire() for r in requests]


def schedule(api: API, ctx: RequestContext, server: dict[str, Any]) -> dict[str, Any]:
    """Play 1: record, check quota, schedule and claim. Idempotent by name."""
    data = {k: v for k, v in server.items() if v is not None}
    if "count" in data:
        data["max_count"] = data.pop("count")
    req = schemas.parse(schemas.ServerCreate, data)
    names = _names(req)
    with api.db.reader() as session:
        existing = list(
            session.execute(
                select(Instance).where(
                    Instance.project_id == ctx.project_id, Instance.deleted == 0, Instance.display_name.in_(names)
                )
            ).scalars()
        )
        if existing:
            if len(existing) == len(names):
                views = [server_view(i, ctx) for i in existing]
                return {"changed": False, "request_id": ctx.request_id, "instances": [v["id"] for v in views],
                        "requests": [], "hosts": [], "servers": views}
            raise exceptions.DuplicateName(name=existing[0].display_name, project_id=ctx.project_id)
    uuids = api.create_records(ctx, req)
    requests = api.conductor.schedule_instances(ctx, uuids)
    return {
        "changed": True,
        "request_id": ctx.request_id,
        "instances": uuids,
        "requests": _wire(requests),
        "hosts": sorted({r.host for r in requests}),
        "servers": summary(api, ctx, uuids)["servers"],
    }


def record_round(
    api: API,
    ctx: RequestContext,
    requests: list[ComputeRequest],
    results: dict[str, list[ComputeResult]],
    unreachable: set[str],
) -> dict[str, Any]:
    """Play 3: record each host's results; unreachable or silent hosts fail there. Returns reschedules."""
    follow_up: list[ComputeRequest] = []
    per_host_index: dict[str, int] = {}
    for request in requests:
        host_results = results.get(request.host)
        index = per_host_index.get(request.host, 0)
        per_host_index[request.host] = index + 1
        if request.operation != "build":
            continue  # clean-ups (a guest built for a server deleted meanwhile) need no record
        if request.host in unreachable or not host_results or index >= len(host_results):
            reason = "unreachable" if request.host in unreachable else "returned no result"
            follow_up.extend(api.conductor.record_unreachable(ctx, request, f"Ansible: host {reason}"))
            continue
        follow_up.extend(api.conductor.record_build_result(ctx, request, host_results[index]))
    uuids = [i.uuid for r in requests for i in r.instances]
    return {
        "changed": True,
        "request_id": ctx.request_id,
        "instances": uuids,
        "requests": _wire(follow_up),
        "hosts": sorted({r.host for r in follow_up}),
        "servers": summary(api, ctx, uuids)["servers"],
    }


def summary(api: API, ctx: RequestContext, uuids: list[str]) -> dict[str, Any]:
    with api.db.reader() as session:
        rows = db_api.instance_get_all(session, ctx, uuids=uuids, include_deleted=True)
        servers = [server_view(i, ctx) for i in rows]
    return {
        "changed": False,
        "request_id": ctx.request_id,
        "instances": uuids,
        "servers": servers,
        "active": sum(1 for s in servers if s["vm_state"] == VmState.ACTIVE.value),
        "error": sum(1 for s in servers if s["vm_state"] == VmState.ERROR.value),
    }
