"""The boot flow as the playbooks run it: the controller's steps between plays.

``playbooks/boot.yml`` calls these through the ``novakit.cloud.conductor``
module; they are plain functions so that tests and other callers (AWX
workflows, the CLI) reach the same behaviour without Ansible.
Requests travel between plays as JSON (``ComputeRequest.to_wire``), results
come back as the ``compute`` module returns them.

The lifecycle playbooks (``delete.yml``, ``server_action.yml``) take the same
round trip: ``start_actions`` makes the API's guarded write and returns one
compute request per server (``API.<action>(..., defer=True)``); the hosts run
them; ``record_actions`` records what they did.

What the hosts' compute tasks registered is paired with the requests and
recorded by ``novakit.compute.rounds``, as every other way of reaching hosts
is; this module only reads it out of Ansible's shape (``parse_results``).

``run_step`` is the one entry of the ``novakit.cloud.conductor`` task, whichever
way it runs: its action plugin calls it inside Ansible's worker process on the
controller, the module (kept for hosts where the action plugin cannot run it)
calls it in a process of its own. Both hand it the task's validated options.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from novakit import exceptions, policy
from novakit.cells import instances as cell_instances
from novakit.cells.registry import grouped
from novakit.compute import rounds
from novakit.compute.api import API, server_view
from novakit.compute.states import POWER_STATE_NAMES, VmState, resolve, status_from_state
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.host.messages import ComputeRequest, ComputeResult, split_secrets


def _wire(requests: list[ComputeRequest]) -> list[dict[str, Any]]:
    return [r.to_wire() for r in requests]


def schedule(
    api: API, ctx: RequestContext, server: dict[str, Any], *, dry_run: bool = False
) -> dict[str, Any]:
    """Play 1: record, check quota, schedule and claim; declarative.

    ``count`` is the wanted number of servers ``name-1`` ... ``name-N`` (without
    it, the one server ``name``): the create is the API's (``create_servers``,
    declarative), which records the missing ones and leaves alone those that
    exist, except those recorded and never scheduled whose owner is gone, which are taken over
    and scheduled now.
    The servers numbered above the count are deleted, the highest first, by the
    lifecycle playbooks' own delete (``start_actions``): their destroy requests
    join the first round's builds (``delete``), and the record step records them.

    ``dry_run`` (check mode) runs the same checks, the scheduler's dry run and
    the delete's, and says where each new server would go (``would_schedule_to``),
    which servers would be created (``would_create``) and which deleted
    (``would_delete``).

    ``round_hosts`` are the hosts any round of this boot may send work to: the
    chosen hosts, the alternates the conductor keeps for a reschedule (it
    reschedules to nothing else) and the hosts of the deletes, so that the
    playbook can set up its build loop once.
    """
    try:
        outcome = api.create_servers(ctx, _create_request(server), dry_run=dry_run, declarative=True)
    except exceptions.ValidationError as exc:
        # The playbook's variable is count: the error names it so.
        errors = [("count" if f == "max_count" else f, r) for f, r in exc.errors]
        raise exceptions.ValidationError(errors[0][0], errors[0][1], errors) from None
    surplus = [s["name"] for s in outcome.surplus]
    deletes = start_actions(api, ctx, "delete", surplus, check_mode=dry_run) if surplus else None
    deleting = deletes["instances"] if deletes else []
    # As they were before this step: the servers it recorded did not exist.
    before = states_of([s for s in [*outcome.servers, *outcome.surplus] if s["id"] not in outcome.created])
    if dry_run:
        return _scheduled_in_check_mode(ctx, outcome, deletes, before)
    requests = _schedule_unbuilt(api, ctx, outcome.unbuilt, picked_up=outcome.records is None)
    destroys = [ComputeRequest.model_validate(r) for r in deletes["requests"]] if deletes else []
    everything = [*outcome.uuids, *deleting]
    return {
        "before": before,
        "changed": outcome.changed or bool(deleting),
        "request_id": ctx.request_id,
        "instances": everything,
        "requests": _wire([*requests, *destroys]),
        "hosts": sorted({r.host for r in [*requests, *destroys]}),
        "round_hosts": sorted(set(_round_hosts(api, requests)) | {r.host for r in destroys}),
        **{
            k: v
            for k, v in summary(api, ctx, everything).items()
            if k in ("servers", "report", "failed_servers")
        },
    }


def _create_request(server: dict[str, Any]) -> dict[str, Any]:
    """The boot play's server as ``create_servers`` takes it: ``count`` is ``max_count``, the
    server module's ``nics`` (openstack.cloud's) and the playbook's ``networks`` one list."""
    data = {k: v for k, v in server.items() if v is not None}
    if "count" in data:
        data["max_count"] = data.pop("count")
    if "nics" in data or "networks" in data:
        from novakit.network.allocation import nic_requests

        data["networks"] = nic_requests(data.pop("networks", None), "networks") + nic_requests(
            data.pop("nics", None)
        )
    return data


def _scheduled_in_check_mode(
    ctx: RequestContext, outcome: Any, deletes: dict[str, Any] | None, before: dict[str, Any]
) -> dict[str, Any]:
    """Play 1's answer in check mode: where each new server would go, which would be created
    and which deleted, and the servers after."""
    deleting = deletes["instances"] if deletes else []
    chosen = outcome.would_schedule_to
    known = {s["name"] for s in outcome.servers}
    gone = {s["name"] for s in (deletes["servers"] if deletes else []) if s["id"] in deleting}
    planned = {n: {"status": "ACTIVE", "host": h} for n, h in chosen.items() if n not in known}
    return {
        "before": before,
        "after": {**{n: v for n, v in before.items() if n not in gone}, **planned},
        "changed": outcome.changed or bool(deleting),
        "request_id": ctx.request_id,
        "instances": outcome.uuids,
        "servers": outcome.servers,
        "requests": [],
        "would_schedule_to": chosen,
        "would_create": [n for n in chosen if n not in known],
        "would_delete": sorted(gone, key=[s["name"] for s in outcome.surplus].index),
        "hosts": sorted({h for h in chosen.values() if h}),
        "round_hosts": [],
    }


def _schedule_unbuilt(
    api: API, ctx: RequestContext, uuids: list[str], *, picked_up: bool
) -> list[ComputeRequest]:
    """Schedule and claim ``uuids``, each under the request that recorded it.

    Servers this call recorded belong to ``ctx``'s request. Servers picked up
    (recorded earlier and never scheduled by an owner now gone: ``API.create(...,
    build=False)`` without a build after it, a run killed before this step) belong to the
    request of their ``create`` action:
    their build is recorded there, and their compute requests carry that
    request id to the record step (``record_round``).
    """
    if not uuids:
        return []
    if not picked_up:
        return api.conductor.schedule_instances(ctx, uuids)
    owners: dict[str, str] = {}
    for _cell, group in grouped(api.db, uuids):
        with api.db.reader() as session:
            owners.update(db_api.create_request_ids(session, group))
    by_request: dict[str, list[str]] = defaultdict(list)
    for uuid in uuids:
        by_request[owners.get(uuid, ctx.request_id)].append(uuid)
    return [
        request
        for request_id, group in by_request.items()
        for request in api.conductor.schedule_instances(ctx.with_request_id(request_id), group)
    ]


def _round_hosts(api: API, requests: list[ComputeRequest]) -> list[str]:
    """The hosts of ``requests`` and of the alternates kept for their instances (``request_specs``)."""
    hosts = {r.host for r in requests}
    uuids = [i.uuid for r in requests for i in r.instances]
    if uuids:
        with api.db.reader() as session:
            hosts |= db_api.alternate_hosts(session, uuids)
    return sorted(hosts)


def record_round(
    api: API, ctx: RequestContext, pairs: list[rounds.Pair], instances: list[str] | None = None
) -> dict[str, Any]:
    """One round's record: each request with what its host answered (``rounds.collect``).

    Returns the follow-ups for the next round (``requests``, ``hosts``:
    reschedules to alternates, clean-ups), none once every build has settled
    or run out of attempts (the conductor's ``max_attempts``). The playbook
    loops until there are none. ``servers``/``report`` describe ``instances``
    (every server of the boot; default: those of this round's requests), so
    that the last round's answer describes the whole boot.
    """
    follow_ups = rounds.record_all(api.conductor, ctx, pairs).follow_ups
    uuids = instances or [i.uuid for r, _ in pairs for i in r.instances]
    return {
        "changed": True,
        "request_id": ctx.request_id,
        "instances": uuids,
        "requests": _wire(follow_ups),
        "hosts": sorted({r.host for r in follow_ups}),
        **{k: v for k, v in summary(api, ctx, uuids).items() if k in ("servers", "report", "failed_servers")},
    }


def states_of(servers: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each live server's state by name, as ``--diff`` shows it before and after a run."""
    return {
        s["name"]: {"status": s["status"], "host": s["host"], "power_state": s["power_state_name"]}
        for s in servers
        if s["vm_state"] != VmState.DELETED.value
    }


def report(servers: list[dict[str, Any]]) -> list[str]:
    """One line per server, as the playbooks show them: ``name: STATUS on host - fault``."""
    return [
        f"{s['name']}: {s['status']} on {s['host'] or '-'}"
        + (f" - {s['fault']['message']}" if s.get("fault") else "")
        for s in servers
    ]


def failed(servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The servers in error, with their fault's message: what makes the playbooks' last play fail."""
    return [
        {"id": s["id"], "name": s["name"], "message": s["fault"]["message"] if s.get("fault") else "error"}
        for s in servers
        if s["status"] == "ERROR"
    ]


#: what the boot playbook publishes of each server with ``set_stats`` (for AWX and ``novakit.runner``)
PUBLISHED = ("id", "name", "host", "addresses", "status")


def published(servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each server as ``set_stats`` publishes it; shaped here, where it costs nothing next to Jinja.

    The servers a scale-down deleted are in the report, not among those published.
    """
    return [{k: s[k] for k in PUBLISHED if k in s} for s in servers if s["vm_state"] != VmState.DELETED.value]


def summary(api: API, ctx: RequestContext, uuids: list[str]) -> dict[str, Any]:
    rows = cell_instances.get_many(api.db, ctx, uuids, include_deleted=True)
    servers = [server_view(i, ctx) for i in rows]
    return {
        "changed": False,
        "request_id": ctx.request_id,
        "instances": uuids,
        "servers": servers,
        "report": report(servers),
        "failed_servers": failed(servers),
        "active": sum(1 for s in servers if s["vm_state"] == VmState.ACTIVE.value),
        "error": sum(1 for s in servers if s["vm_state"] == VmState.ERROR.value),
    }


# --------------------------------------------------------------- lifecycle actions


def start_actions(
    api: API,
    ctx: RequestContext,
    action: str,
    servers: list[str],
    options: dict[str, Any] | None = None,
    *,
    check_mode: bool = False,
) -> dict[str, Any]:
    """Controller play 1 of a lifecycle playbook: ``API.act`` on each server, declaratively.

    Returns the compute requests for the hosts (``requests``, ``hosts``) and
    the servers as they now are; a move (which runs here, host to host) that failed is in
    ``failed_servers`` with its error. An action already in effect changes nothing
    and deleting a server that does not exist is not an error, so a second run
    changes nothing. In check mode each server gets the API's dry run.
    """
    requests: list[ComputeRequest] = []
    changed: list[str] = []
    views: list[dict[str, Any]] = []
    before: list[dict[str, Any]] = []
    planned: dict[str, str] = {}  # a move's check mode: server -> the host it would go to
    failed: list[dict[str, Any]] = []  # a move runs here, not on the hosts: its failure is known now
    for ref in servers:
        with contextlib.suppress(exceptions.InstanceNotFound):
            before.append(api.get(ctx, ref))
        out = api.act(ctx, ref, action, options, dry_run=check_mode, defer=True, declarative=True)
        if out.server is None:
            continue
        if out.error is not None:
            failed.append({"id": out.server["id"], "name": out.server["name"], "message": out.error})
        if out.changed:
            changed.append(out.server["id"])
        if out.request is not None:
            requests.append(out.request)
        if out.would_move_to is not None:
            planned[out.server["id"]] = out.would_move_to
        views.append(out.server)
    result: dict[str, Any] = {
        "changed": bool(changed),
        "request_id": ctx.request_id,
        "action": action,
        "instances": changed,
        "requests": _wire(requests),
        "hosts": sorted({r.host for r in requests}),
        "servers": views,
        "before": states_of(before),
        "would_move_to": planned,
        # Not "failed": Ansible takes a result with a true "failed" for a failed task.
        "failed_servers": failed,
    }
    if check_mode:  # what --diff shows against "before": the servers as the real run would leave them
        result["after"] = planned_states(action, options, result)
    return result


def planned_states(action: str, options: dict[str, Any] | None, out: dict[str, Any]) -> dict[str, Any]:
    """Each server's state by name (as ``states_of``) as a real run of ``action`` would leave it:
    the state table's row says where it ends and its power state, a move's dry run its host."""
    row, values = resolve(action, options)
    after = dict(out["before"])
    for server in out["servers"]:
        now = after.pop(server["name"], None) if server["id"] in out["instances"] else None
        if now is None or row.action == "delete":
            continue
        vm_state = row.end_vm_state.value if row.end_vm_state is not None else server["vm_state"]
        power = now["power_state"] if row.end_power_state is None else POWER_STATE_NAMES[row.end_power_state]
        if row.keeps_stopped and server["vm_state"] == VmState.STOPPED.value:
            vm_state, power = VmState.STOPPED.value, now["power_state"]
        name = values.get("name") if row.action in ("rename", "rebuild") else None
        after[name or server["name"]] = {
            "status": status_from_state(vm_state),
            "host": out["would_move_to"].get(server["id"], server["host"]),
            "power_state": power,
        }
    return after


def record_actions(api: API, ctx: RequestContext, pairs: list[rounds.Pair]) -> dict[str, Any]:
    """Controller play 3 of a lifecycle playbook: record what each host did.

    A host that did not answer fails its actions with a fault naming the reason;
    the instance goes back to where it was (or to error, as Nova does for a failed
    delete or hard reboot). ``failed_servers`` carries each failed server's fault.
    """
    failed = rounds.record_all(api.conductor, ctx, pairs).failed
    out = summary(api, ctx, [i.uuid for r, _ in pairs for i in r.instances])
    out["changed"] = bool(pairs)
    # Not "failed": Ansible takes a result with a true "failed" for a failed task.
    out["failed_servers"] = [
        {"id": s["id"], "name": s["name"], "message": failed[s["id"]]}
        for s in out["servers"]
        if s["id"] in failed
    ]
    return out


def image_specs(api: API, names: list[str]) -> list[dict[str, Any]]:
    """What a compute host needs to fetch each image into its cache."""
    from novakit.catalog import images

    with api.db.reader() as session:
        return [images.spec(images.get(session, name)).model_dump(mode="json") for name in names]


# --------------------------------------------------------------- heartbeats


def heartbeat(
    api: API,
    ctx: RequestContext,
    raw: dict[str, Any] | None,
    host_failures: dict[str, str] | None = None,
    *,
    check_mode: bool = False,
) -> dict[str, Any]:
    """The controller half of ``playbooks/heartbeat.yml``: record each host's contact.

    ``raw`` is what each host's ``compute`` task registered (``get_available_resource``).
    A host that answered is up; one that Ansible could not reach, or whose task failed,
    is down with Ansible's message (or the callback plugin's, ``host_failures``); a host
    whose task did not run here (``--limit``) is left alone. What up and down mean is
    ``novakit.fleet.hosts``'s: this step only hands it the answers. Recording a
    contact is bookkeeping, as a Nova service's report is, so it reports no change.
    """
    from novakit.fleet import hosts

    policy.authorize(ctx, "host:heartbeat")
    results, failures = parse_results(raw)
    answers: list[ComputeResult] = []
    down: dict[str, str] = {}
    for host in raw or {}:
        why = failures.get(host) or (None if results.get(host) else (host_failures or {}).get(host))
        if why:
            down[host] = f"Ansible: {why}"
        elif results.get(host):
            answers.append(results[host][0])
    if not check_mode:
        hosts.record_contacts(api.db, answers, down)
    down.update({r.host: r.error.message for r in answers if r.error is not None})
    return {
        "changed": False,
        "up": sorted(r.host for r in answers if r.error is None),
        "down": dict(sorted(down.items())),
    }


# --------------------------------------------------------------- the conductor task

#: the steps of the ``novakit.cloud.conductor`` task
STEPS = ("schedule", "record", "summary", "action", "record_action", "images", "heartbeat")
#: the steps a caller asks of ``novakit serve`` (``run_step``'s ``deliver``)
DELIVERED_STEPS = ("schedule", "summary", "action")


def parse_results(
    raw: dict[str, Any] | None,
) -> tuple[dict[str, list[ComputeResult]], dict[str, str]]:
    """Each host's compute results, from what its ``compute`` task registered (or just its results).

    Returns the results by host, and the hosts whose task says it failed or was
    unreachable, with a reason worded as ``novakit.compute.rounds`` words it.
    """
    results: dict[str, list[ComputeResult]] = {}
    failures: dict[str, str] = {}
    for host, value in (raw or {}).items():
        if isinstance(value, dict):  # a registered task result
            if value.get("unreachable"):
                failures[host] = rounds.unreachable(host, value.get("msg"))
            elif value.get("failed"):
                failures[host] = rounds.task_failed(host, value.get("msg"))
            value = value.get("results")
        if isinstance(value, list) and value:
            results[host] = [ComputeResult.model_validate(v) for v in value if isinstance(v, dict)]
    return results, failures


def _check_visible(api: API, ctx: RequestContext, requests: list[ComputeRequest]) -> None:
    """The record steps write what a host answered for each request's servers: a caller records
    answers for servers it may see only (another project's server looks not found, as everywhere)."""
    if policy.allowed(ctx, "project:any"):
        return
    uuids = list(dict.fromkeys(i.uuid for r in requests for i in r.instances))
    if not uuids:
        return
    seen = {i.uuid for i in cell_instances.get_many(api.db, ctx, uuids, include_deleted=True)}
    missing = [u for u in uuids if u not in seen]
    if missing:
        raise exceptions.InstanceNotFound(instance_id=missing[0])


def run_step(
    api: API,
    ctx: RequestContext,
    params: dict[str, Any],
    *,
    check_mode: bool = False,
    host_failures: dict[str, str] | None = None,
    diff: bool = False,
    deliver: Callable[[RequestContext, list[ComputeRequest]], None] | None = None,
) -> dict[str, Any]:
    """One step of the ``novakit.cloud.conductor`` task, ``params`` being its options.

    ``deliver`` (``novakit serve``, the step asked through a cloud): the schedule and action
    steps hand their requests to it, which runs the rounds itself, and return none (no hosts,
    no secrets); the record steps, which take what hosts answered, are then not the caller's.

    ``diff`` (``--diff``): the steps that end a run say each server's state before
    it (the ``before`` the playbook kept from its first step) and after it, as
    Ansible's ``diff``: ``summary`` and ``record_action`` (and, in check mode,
    ``schedule``, whose after is its plan).

    ``host_failures`` are the hosts the novakit callback plugin saw fail in this
    run (``{host: reason}``): a host of the round without results fails with
    that reason as its fault.

    The compute requests it returns carry no secrets: those of the schedule and
    action steps come apart in ``secrets`` (``split_secrets``).
    """
    if deliver is not None and params["step"] not in DELIVERED_STEPS:
        raise exceptions.ValidationError(
            "step", f"is one of {', '.join(DELIVERED_STEPS)} through a cloud: the service runs the rounds"
        )
    out = _run_step(api, ctx, params, check_mode, host_failures)
    if deliver is not None and out.get("requests"):
        deliver(ctx, [ComputeRequest.model_validate(r) for r in out["requests"]])
        out.update(requests=[], hosts=[], round_hosts=[])
    if diff:
        _add_diff(api, ctx, params, out)
    if out.get("requests"):
        out["requests"], secrets = split_secrets(out["requests"])
        # A record step's follow-ups build the schedule step's servers again, whose secrets
        # the playbook kept: it returns none, so that its result needs no no_log.
        if params["step"] != "record":
            out["secrets"] = secrets
    elif params["step"] in ("schedule", "action"):
        out["secrets"] = {}
    return out


def _add_diff(api: API, ctx: RequestContext, params: dict[str, Any], out: dict[str, Any]) -> None:
    step = params["step"]
    if step == "schedule" and "after" in out:
        out["diff"] = {"before": out["before"], "after": out["after"]}
    elif step in ("summary", "record_action") and params.get("before") is not None:
        after = params.get("after")
        out["diff"] = {
            "before": params["before"],
            "after": after if after is not None else states_of(out.get("servers") or []),
        }
        if step == "summary":
            # Ansible shows a diff of a changed result only: the run changed what differs.
            out["changed"] = out["diff"]["before"] != out["diff"]["after"]


def _run_step(
    api: API,
    ctx: RequestContext,
    params: dict[str, Any],
    check_mode: bool,
    host_failures: dict[str, str] | None,
) -> dict[str, Any]:
    step = params["step"]
    if step not in STEPS:
        raise exceptions.ValidationError("step", f"{step!r} is not one of {', '.join(STEPS)}")
    if step == "images":
        return {"changed": False, "image_specs": image_specs(api, params["images"])}
    if step == "heartbeat":
        out = heartbeat(api, ctx, params.get("results"), host_failures, check_mode=check_mode)
        return {**out, "request_id": ctx.request_id}
    if step == "action":
        return start_actions(
            api, ctx, params["action"], params["servers"], params.get("options"), check_mode=check_mode
        )
    if step in ("schedule", "summary"):
        if step == "schedule":
            out = schedule(api, ctx, params["server"], dry_run=check_mode)
        else:
            out = summary(api, ctx, params.get("instances") or [])
        return {**out, "published": published(out["servers"])}
    requests = [ComputeRequest.model_validate(r) for r in params["requests"]]
    _check_visible(api, ctx, requests)
    if check_mode:  # the record steps record what a real round returned: nothing here
        out = {"changed": False, "request_id": ctx.request_id, "requests": [], "hosts": [], "servers": []}
        return {**out, "published": []} if step == "record" else out
    results, failures = parse_results(params.get("results"))
    failures.update({h: rounds.unreachable(h) for h in params.get("unreachable") or []})
    failures.update(host_failures or {})
    # What Ansible said about a host explains a result it did not return.
    pairs = rounds.collect(requests, results, failures, carrier="Ansible")
    if step == "record":
        out = record_round(api, ctx, pairs, params.get("instances"))
        return {**out, "published": published(out["servers"])}
    return record_actions(api, ctx, pairs)
