"""The boot flow as the playbooks run it: the controller's steps between plays.

``playbooks/boot.yml`` calls these through the ``novakit.cloud.conductor``
module; they are plain functions so that tests and other callers (AWX
workflows, the CLI) reach the same behaviour without Ansible.
Requests travel between plays as JSON (``ComputeRequest.to_wire``), results
come back as the ``compute`` module returns them.

The lifecycle playbooks (``delete.yml``, ``server_action.yml``) take the same
round trip: ``start_actions`` makes the API's guarded write and returns one
compute request per server (``API.<action>(..., defer=True)``); the hosts run
them; ``record_actions`` hands each result to ``Conductor.record_action_result``.

``run_step`` is the one entry of the ``novakit.cloud.conductor`` task, whichever
way it runs: its action plugin calls it inside Ansible's worker process on the
controller, the module (kept for hosts where the action plugin cannot run it)
calls it in a process of its own. Both hand it the task's validated options.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from novakit import exceptions
from novakit.compute import schemas
from novakit.compute.api import API, server_view
from novakit.compute.messages import ComputeRequest, ComputeResult
from novakit.compute.states import ACTIONS as STATE_ACTIONS
from novakit.compute.states import VmState
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import Instance


def _names(req: schemas.ServerCreate) -> list[str]:
    count = int(req.max_count or req.min_count)
    return [req.name] if count == 1 else [f"{req.name}-{i + 1}" for i in range(count)]


def _wire(requests: list[ComputeRequest]) -> list[dict[str, Any]]:
    return [r.to_wire() for r in requests]


def _parse_server(server: dict[str, Any]) -> tuple[schemas.ServerCreate, list[str]]:
    """The playbook's server variables as a validated create request, and the names it makes."""
    data = {k: v for k, v in server.items() if v is not None}
    if "count" in data:
        data["max_count"] = data.pop("count")
    req = schemas.parse(schemas.ServerCreate, data)
    return req, _names(req)


def schedule(api: API, ctx: RequestContext, server: dict[str, Any]) -> dict[str, Any]:
    """Play 1: record, check quota, schedule and claim. Idempotent by name."""
    req, names = _parse_server(server)
    with api.db.reader() as session:
        existing = list(
            session.execute(
                select(Instance).where(
                    Instance.project_id == ctx.project_id,
                    Instance.deleted == 0,
                    Instance.display_name.in_(names),
                )
            ).scalars()
        )
        if existing:
            if len(existing) == len(names):
                views = [server_view(i, ctx) for i in existing]
                return {
                    "changed": False,
                    "request_id": ctx.request_id,
                    "instances": [v["id"] for v in views],
                    "requests": [],
                    "hosts": [],
                    "servers": views,
                }
            raise exceptions.DuplicateName(name=existing[0].display_name, project_id=ctx.project_id)
    uuids = api.create_records(ctx, req)
    requests = api.conductor.schedule_instances(ctx, uuids)
    return {
        "changed": True,
        "request_id": ctx.request_id,
        "instances": uuids,
        "requests": _wire(requests),
        "hosts": sorted({r.host for r in requests}),
        **{k: v for k, v in summary(api, ctx, uuids).items() if k in ("servers", "report")},
    }


def plan(api: API, ctx: RequestContext, server: dict[str, Any]) -> dict[str, Any]:
    """Check mode of play 1: what ``schedule`` would do, claiming and writing nothing.

    Validation, quota and the scheduler's filters and weighers run as in a real
    request (``select_destinations(dry_run=True)``), so a request that would be
    refused is refused here with the same error.
    """
    from novakit import quota
    from novakit.compute import flavors, images
    from novakit.scheduler.request_spec import InstanceGroupSpec
    from novakit.scheduler.request_spec import RequestSpec as SchedSpec

    req, names = _parse_server(server)
    with api.db.reader() as session:
        rows = session.execute(
            select(Instance).where(
                Instance.project_id == ctx.project_id, Instance.deleted == 0, Instance.display_name.in_(names)
            )
        ).scalars()
        existing = {i.display_name: i for i in rows}
        if existing:
            if len(existing) == len(names):
                views = [server_view(i, ctx) for i in existing.values()]
                return {
                    "changed": False,
                    "request_id": ctx.request_id,
                    "instances": [v["id"] for v in views],
                    "would_schedule_to": {},
                    "servers": views,
                    "requests": [],
                    "hosts": [],
                }
            raise exceptions.DuplicateName(name=next(iter(existing)), project_id=ctx.project_id)
        flavor = flavors.get(session, req.flavor)
        image = images.get(session, req.image)
        group = api._group(session, ctx, req.server_group or req.scheduler_hints.group)
        if req.availability_zone is not None:
            api._check_az(session, req.availability_zone)
        group_spec = (
            None
            if group is None
            else InstanceGroupSpec(
                uuid=group.uuid,
                policy=group.policy,  # type: ignore[arg-type]
                rules=dict(group.rules or {}),
            )
        )
    count = len(names)
    quota.check_quota(
        api.db,
        api.conf,
        ctx.project_id,
        {"instances": count, "cores": count * flavor.vcpus, "ram": count * flavor.memory_mb},
    )
    spec = SchedSpec(
        request_id=ctx.request_id,
        project_id=ctx.project_id,
        user_id=ctx.user_id,
        flavor=api._flavor_spec(flavors.snapshot(flavor)),
        image=images.spec(image),
        availability_zone=req.availability_zone,
        num_instances=count,
        min_count=req.min_count,
        instance_group=group_spec,
        scheduler_hints=req.scheduler_hints.model_dump(exclude_none=True),
    )
    # Placeholder consumers: nothing is written, they only keep the instances apart.
    uuids = [f"00000000-0000-4000-8000-{i:012d}" for i in range(count)]
    selections = api.conductor.scheduler.select_destinations(spec, uuids, dry_run=True)
    chosen = {name: (sel[0].host if sel else None) for name, sel in zip(names, selections, strict=True)}
    return {
        "changed": True,
        "request_id": ctx.request_id,
        "instances": [],
        "servers": [],
        "requests": [],
        "would_schedule_to": chosen,
        "hosts": sorted({h for h in chosen.values() if h}),
    }


def record_round(
    api: API,
    ctx: RequestContext,
    requests: list[ComputeRequest],
    results: dict[str, list[ComputeResult]],
    unreachable: set[str] | dict[str, str],
) -> dict[str, Any]:
    """Play 3: record each host's results; unreachable or silent hosts fail there. Returns reschedules.

    ``unreachable`` may map a host to what Ansible said about it (the callback
    plugin's record of the run), which then becomes the fault's message.
    """
    reasons = unreachable if isinstance(unreachable, dict) else dict.fromkeys(unreachable, "unreachable")
    follow_up: list[ComputeRequest] = []
    per_host_index: dict[str, int] = {}
    for request in requests:
        host_results = results.get(request.host)
        index = per_host_index.get(request.host, 0)
        per_host_index[request.host] = index + 1
        if request.operation != "build":
            continue  # clean-ups (a guest built for a server deleted meanwhile) need no record
        if request.host in reasons or not host_results or index >= len(host_results):
            reason = reasons.get(request.host) or "returned no result"
            follow_up.extend(api.conductor.record_unreachable(ctx, request, f"Ansible: {reason}"))
            continue
        follow_up.extend(api.conductor.record_build_result(ctx, request, host_results[index]))
    uuids = [i.uuid for r in requests for i in r.instances]
    return {
        "changed": True,
        "request_id": ctx.request_id,
        "instances": uuids,
        "requests": _wire(follow_up),
        "hosts": sorted({r.host for r in follow_up}),
        **{k: v for k, v in summary(api, ctx, uuids).items() if k in ("servers", "report")},
    }


def report(servers: list[dict[str, Any]]) -> list[str]:
    """One line per server, as the playbooks show them: ``name: STATUS on host - fault``."""
    return [
        f"{s['name']}: {s['status']} on {s['host'] or '-'}"
        + (f" - {s['fault']['message']}" if s.get("fault") else "")
        for s in servers
    ]


#: what the boot playbook publishes of each server with ``set_stats`` (for AWX and ``novakit.runner``)
PUBLISHED = ("id", "name", "host", "addresses", "status")


def published(servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each server as ``set_stats`` publishes it; shaped here, where it costs nothing next to Jinja."""
    return [{k: s[k] for k in PUBLISHED if k in s} for s in servers]


def summary(api: API, ctx: RequestContext, uuids: list[str]) -> dict[str, Any]:
    with api.db.reader() as session:
        rows = db_api.instance_get_all(session, ctx, uuids=uuids, include_deleted=True)
        servers = [server_view(i, ctx) for i in rows]
    return {
        "changed": False,
        "request_id": ctx.request_id,
        "instances": uuids,
        "servers": servers,
        "report": report(servers),
        "active": sum(1 for s in servers if s["vm_state"] == VmState.ACTIVE.value),
        "error": sum(1 for s in servers if s["vm_state"] == VmState.ERROR.value),
    }


# --------------------------------------------------------------- lifecycle actions

#: actions the lifecycle playbooks may start, with the API call that starts each one
#: (the state table's actions; a hard reboot is ``reboot`` with reboot_type HARD)
ACTIONS = tuple(a for a in STATE_ACTIONS if a not in ("create", "reboot_hard"))


def _start_one(api: API, ctx: RequestContext, ref: str, action: str, options: dict[str, Any]) -> Any:
    if action == "reboot":
        return api.reboot(ctx, ref, str(options.get("reboot_type") or "SOFT"), defer=True)
    if action == "stop":
        return api.stop(ctx, ref, timeout=options.get("timeout"), defer=True)
    if action == "rebuild":
        data = {
            k: options[k]
            for k in ("image", "name", "metadata", "user_data", "admin_password")
            if options.get(k) is not None
        }
        return api.rebuild(ctx, ref, data, defer=True)
    if action == "lock":
        return api.lock(ctx, ref, options.get("reason"))
    if action == "unlock":
        return api.unlock(ctx, ref)
    if action == "rename":
        return api.rename(ctx, ref, str(options.get("name") or ""))
    return getattr(api, action)(ctx, ref, defer=True)


def already_done(server: dict[str, Any], action: str, options: dict[str, Any]) -> bool:
    """Whether a declarative action is in effect already (a second run changes nothing)."""
    if action == "lock":
        return bool(server["locked"])
    if action == "unlock":
        return not server["locked"]
    if action == "rename":
        return server["name"] == options.get("name")
    wanted = {
        "stop": "stopped",
        "start": "active",
        "pause": "paused",
        "unpause": "active",
        "suspend": "suspended",
        "resume": "active",
    }.get(action)
    return wanted is not None and server["vm_state"] == wanted and server["task_state"] is None


def check_action(api: API, ctx: RequestContext, server: dict[str, Any], action: str) -> None:
    """Raise what the API would raise for ``action``, without writing (check mode)."""
    from novakit.compute.states import ACTIONS as TABLE

    if server["locked"] and not ctx.is_admin and action not in ("unlock", "delete", "lock"):
        raise exceptions.InstanceIsLocked(server["id"], server.get("locked_reason"))
    t = TABLE["reboot_hard" if action == "reboot" and server.get("_hard") else action]
    if not t.allows(server["vm_state"], server["task_state"]):
        raise exceptions.InstanceInvalidState(
            action=action,
            instance_uuid=server["id"],
            vm_state=server["vm_state"],
            task_state=server["task_state"],
        )


def start_actions(
    api: API,
    ctx: RequestContext,
    action: str,
    servers: list[str],
    options: dict[str, Any] | None = None,
    *,
    check_mode: bool = False,
) -> dict[str, Any]:
    """Controller play 1 of a lifecycle playbook: start ``action`` on each server.

    Returns the compute requests for the hosts (``requests``, ``hosts``) and the
    servers that need none (lock, unlock, rename; a server with no host).
    Declarative actions already in effect are skipped, and deleting a server
    that does not exist is not an error, so a second run changes nothing.
    """
    if action not in ACTIONS:
        raise exceptions.ValidationError("action", f"{action!r} is not one of {', '.join(ACTIONS)}")
    options = dict(options or {})
    requests: list[ComputeRequest] = []
    changed: list[str] = []
    views: list[dict[str, Any]] = []
    for ref in servers:
        try:
            server = api.get(ctx, ref)
        except exceptions.InstanceNotFound:
            if action == "delete":
                continue
            raise
        if action == "delete" and server["task_state"] == "deleting":
            views.append(server)
            continue
        if already_done(server, action, options):
            views.append(server)
            continue
        if check_mode:
            check_action(
                api, ctx, {**server, "_hard": str(options.get("reboot_type", "")).upper() == "HARD"}, action
            )
            changed.append(server["id"])
            views.append(server)
            continue
        out = _start_one(api, ctx, server["id"], action, options)
        changed.append(server["id"])
        if isinstance(out, ComputeRequest):
            requests.append(out)
            views.append(api.get(ctx, server["id"]))
        else:
            views.append(out)
    return {
        "changed": bool(changed),
        "request_id": ctx.request_id,
        "action": action,
        "instances": changed,
        "requests": _wire(requests),
        "hosts": sorted({r.host for r in requests}),
        "servers": views,
    }


def record_actions(
    api: API,
    ctx: RequestContext,
    requests: list[ComputeRequest],
    results: dict[str, list[ComputeResult]],
    unreachable: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Controller play 3 of a lifecycle playbook: record what each host did.

    A host that did not answer fails its actions with a fault naming the reason;
    the instance goes back to where it was (or to error, as Nova does for a failed
    delete or hard reboot).
    """
    reasons = unreachable or {}
    per_host_index: dict[str, int] = {}
    failed: dict[str, str] = {}
    for request in requests:
        host_results = results.get(request.host) or []
        index = per_host_index.get(request.host, 0)
        per_host_index[request.host] = index + 1
        if request.host in reasons or index >= len(host_results):
            reason = reasons.get(request.host) or f"host {request.host} returned no result"
            api.conductor.record_unreachable(ctx, request, f"Ansible: {reason}")
            failed.update({i.uuid: f"Ansible: {reason}" for i in request.instances})
        else:
            result = host_results[index]
            api.conductor.record_action_result(ctx, request, result)
            for spec in request.instances:
                res = next((r for r in result.results if r.uuid == spec.uuid), None)
                if res is None or not res.ok:
                    fault = (res.fault if res else None) or result.error
                    failed[spec.uuid] = fault.message if fault else "no result"
    uuids = [i.uuid for r in requests for i in r.instances]
    out = summary(api, ctx, uuids)
    out["changed"] = bool(requests)
    out["failed"] = [
        {"id": s["id"], "name": s["name"], "message": failed[s["id"]]}
        for s in out["servers"]
        if s["id"] in failed
    ]
    return out


def image_specs(api: API, names: list[str]) -> list[dict[str, Any]]:
    """What a compute host needs to fetch each image into its cache."""
    from novakit.compute import images

    with api.db.reader() as session:
        return [images.spec(images.get(session, name)).model_dump(mode="json") for name in names]


# --------------------------------------------------------------- the conductor task

#: the steps of the ``novakit.cloud.conductor`` task
STEPS = ("schedule", "record", "summary", "action", "record_action", "images")


def parse_results(
    raw: dict[str, Any] | None,
) -> tuple[dict[str, list[ComputeResult]], dict[str, str]]:
    """Each host's compute results, from what its ``compute`` task registered (or just its results).

    Returns the results by host, and the hosts whose task says it failed or was
    unreachable, with a reason.
    """
    results: dict[str, list[ComputeResult]] = {}
    failures: dict[str, str] = {}
    for host, value in (raw or {}).items():
        if isinstance(value, dict):  # a registered task result
            if value.get("unreachable") or value.get("failed"):
                what = "unreachable" if value.get("unreachable") else "compute task failed"
                failures[host] = f"host {host}: {what}"
            value = value.get("results")
        if isinstance(value, list) and value:
            results[host] = [ComputeResult.model_validate(v) for v in value if isinstance(v, dict)]
    return results, failures


def run_step(
    api: API,
    ctx: RequestContext,
    params: dict[str, Any],
    *,
    check_mode: bool = False,
    host_failures: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One step of the ``novakit.cloud.conductor`` task, ``params`` being its options.

    ``host_failures`` are the hosts the novakit callback plugin saw fail in this
    run (``{host: reason}``): a host of the round without results fails with
    that reason as its fault.
    """
    step = params["step"]
    if step not in STEPS:
        raise exceptions.ValidationError("step", f"{step!r} is not one of {', '.join(STEPS)}")
    if step == "images":
        return {"changed": False, "image_specs": image_specs(api, params["images"])}
    if step == "action":
        return start_actions(
            api, ctx, params["action"], params["servers"], params.get("options"), check_mode=check_mode
        )
    if step in ("schedule", "summary"):
        if step == "schedule":
            out = (plan if check_mode else schedule)(api, ctx, params["server"])
        else:
            out = summary(api, ctx, params.get("instances") or [])
        return {**out, "published": published(out["servers"])}
    requests = [ComputeRequest.model_validate(r) for r in params["requests"]]
    results, failures = parse_results(params.get("results"))
    if check_mode:  # the record steps record what a real round returned: nothing here
        out = {"changed": False, "request_id": ctx.request_id, "requests": [], "hosts": [], "servers": []}
        return {**out, "published": []} if step == "record" else out
    failures.update({h: f"host {h} unreachable" for h in params.get("unreachable") or []})
    failures.update(host_failures or {})
    # What Ansible said about a host explains a missing result; a host that answered speaks for itself.
    round_hosts = {r.host for r in requests}
    failures = {h: why for h, why in failures.items() if h in round_hosts and h not in results}
    if step == "record":
        out = record_round(api, ctx, requests, results, failures)
        return {**out, "published": published(out["servers"])}
    return record_actions(api, ctx, requests, results, failures)
