"""A server brought where a caller declares it should be: the library half of the server modules.

The ``server`` module says what a server should be (``state: stopped``, or
absent), the ``server_action`` module what should be done to it (``action:
lock``). Everything between that and the API is here, so that the modules are
an argument spec and one call:

* what takes a server to a power state: ``states.path`` over the state table
  (``actions_to``), refused with the reason when nothing does (a server in ERROR,
  one busy with a task);
* the start, through the API's one entry for each: ``API.create_servers`` for a
  server that does not exist, ``API.act(..., declarative=True, defer=True)`` for
  the rest, so that what is in effect already is no change, and a second
  identical run changes nothing;
* the part that takes time (the build, the host's part of an action, the later
  steps of a path) handed to a detached worker (``novakit.worker``), and, when
  the caller waits, the wait: ``worker.wait_for``, the one polling loop. A server
  that does not get there ends the wait with a ``ServerStateError`` that carries
  the server as it was last seen.

``dry_run`` (check mode) puts the same questions to the API's dry runs, which
refuse what the real calls refuse, with the same error, and write nothing.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, Unpack

from novakit import exceptions, worker
from novakit.client.api import CloudAPI
from novakit.compute import names, states
from novakit.compute.api import API as LibraryAPI
from novakit.compute.states import VmState
from novakit.context import RequestContext
from novakit.host.messages import ComputeRequest
from novakit.worker import steady

View = dict[str, Any]
#: the library's API in this process, or the same calls through ``novakit serve`` (a cloud)
API = LibraryAPI | CloudAPI
Settled = Callable[[View | None], bool]


@dataclass(frozen=True)
class _Goal:
    """What a call waits for when its caller waits: ``settled`` (the server reached it),
    ``wanted`` (its name, for a timeout's message) and ``failure`` (what a server that ends in
    ERROR fails the call as)."""

    settled: Settled
    wanted: str
    failure: str


#: the power states a caller may declare, and the vm_state each is
POWER_STATES: dict[str, VmState] = {
    "started": VmState.ACTIVE,
    "stopped": VmState.STOPPED,
    "paused": VmState.PAUSED,
    "suspended": VmState.SUSPENDED,
}
#: every state a caller may declare: ``present`` is "exists" (a new server starts), whatever its power
STATES: tuple[str, ...] = ("present", "absent", *POWER_STATES)
#: what a diff shows of a server
SHOWN = ("id", "name", "status", "host", "flavor", "image", "addresses", "power_state_name", "locked")


@dataclass(frozen=True)
class Background:
    """How the work a call starts goes on: in a detached worker, waited for or not.

    ``config`` and ``db_url`` are what the caller's configuration came from, so
    that the worker loads the same one.
    """

    wait: bool = True
    timeout: float = 180
    config: str | None = None
    db_url: str | None = None


@dataclass
class Outcome:
    """What a call did or, as a dry run, would do."""

    changed: bool
    actions: list[str]
    server: View | None = None  # as it now is; None once deleted, or not created yet (a dry run)
    before: View | None = None
    plan: dict[str, Any] | None = None  # a dry run's new server: its name and the host it would get
    worker_log: str | None = None

    def result(self) -> dict[str, Any]:
        """The outcome as the modules return it (their RETURN documents each key)."""
        out: dict[str, Any] = {"changed": self.changed, "actions": self.actions}
        known = self.server or self.before
        if known is not None:
            out["id"] = known["id"]
        if self.server is not None:
            out["server"] = self.server
        if self.plan is not None:
            out["would_schedule_to"] = self.plan["host"]
        if self.worker_log is not None:
            out["worker_log"] = self.worker_log
        return out

    def diff(self) -> tuple[View | None, View | None]:
        """The server before and after, as a diff shows them (``SHOWN``)."""
        after = _shown(self.server) if self.server is not None and not _gone(self.server) else self.plan
        return _shown(self.before), after


# --------------------------------------------------------------- what it takes


def actions_to(server: View, state: str) -> list[str]:
    """The actions that take ``server`` to ``state`` (``STATES``), in order; [] when it is there.

    Found in the state table (``states.path``). A server in ERROR is refused
    whatever state short of absent is asked for (the table would let a stop
    through, but what failed deserves a look first), and so is one busy with a
    task when something has to be done; the error says where the server is and
    what to do.
    """
    if state not in STATES:
        raise exceptions.ValidationError("state", f"{state!r} is not one of {', '.join(STATES)}")
    if state == "absent":
        return ["delete"]
    if server["vm_state"] == VmState.ERROR.value:
        fault = (server.get("fault") or {}).get("message")
        raise exceptions.StateUnreachable(
            server,
            state=state,
            remedy=(f" (fault: {fault})" if fault else "")
            + ": hard-reboot or rebuild it (novakit.cloud.server_action), or delete it",
        )
    wanted = POWER_STATES.get(state)
    if wanted is None:
        return []
    # A server still building (``wait: false``) is on its way to active.
    here = VmState.ACTIVE.value if server["vm_state"] == VmState.BUILDING.value else server["vm_state"]
    todo = states.path(here, wanted)
    if todo is None:
        raise exceptions.StateUnreachable(server, state=state, remedy=": no action leads there")
    if todo and server["task_state"] is not None:
        raise exceptions.StateUnreachable(server, state=state, remedy=": wait for its task to end")
    return todo


def options_for(action: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options of ``options`` that ``action`` takes (its schema in the state table), set ones only.

    A caller such as a module has one set of options for several actions
    (``timeout`` is the stop's, ``image`` the rebuild's); each action gets its own.
    """
    t = states.ACTIONS.get(action)
    fields = t.options.model_fields if t is not None and t.options is not None else {}
    return {k: v for k, v in (options or {}).items() if k in fields and v is not None}


def encode_user_data(text: str | None) -> str | None:
    """Plain-text user data, as the modules take it, the way the API takes it (base64)."""
    return base64.b64encode(text.encode()).decode() if text is not None else None


def check_unchanged(api: API, ctx: RequestContext, server: View, create: Mapping[str, Any] | None) -> None:
    """Refuse a flavor or image other than the existing server's: declaring neither resizes nor rebuilds."""
    flavor, image = (create or {}).get("flavor"), (create or {}).get("image")
    if flavor and flavor not in (server["flavor"].get("name"), server["flavor"].get("flavorid")):
        raise exceptions.ServerDiffers(
            name=server["name"],
            what="flavor",
            actual=server["flavor"].get("name"),
            wanted=flavor,
            remedy="resizing is not supported: delete it and create it again, or use another name",
        )
    if image and api.image_id(ctx, image) != server["image"]:
        raise exceptions.ServerDiffers(
            name=server["name"],
            what="image",
            actual=server["image"],
            wanted=image,
            remedy="rebuild it (novakit.cloud.server_action, action rebuild) to change its image",
        )


# --------------------------------------------------------------- the calls


class Wanted(TypedDict, total=False):
    """What ``ensure`` and ``ensure_count`` (the ``server`` module's calls) are told besides the
    server and its state, each optional.

    ``create``: what a server that does not exist is created with (the fields of
    ``schemas.ServerCreate`` but its name; unset ones None). ``options``: options of the
    actions a power state takes (``timeout`` of a stop). ``dry_run``: what a run would do, with
    nothing changed. ``background``: whether and how long to wait (``Background()``)."""

    create: Mapping[str, Any] | None
    options: Mapping[str, Any] | None
    dry_run: bool
    background: Background


def _check_state(state: str) -> None:
    if state not in STATES:
        raise exceptions.ValidationError("state", f"{state!r} is not one of {', '.join(STATES)}")


def ensure(api: API, ctx: RequestContext, ref: str, state: str = "present", **how: Unpack[Wanted]) -> Outcome:
    """Bring server ``ref`` (name or uuid) to ``state`` (``STATES``); the ``server`` module's call.

    A server that does not exist is created as ``how``'s ``create`` says, named ``ref``. An
    existing server keeps its flavor and image (``check_unchanged``). A server busy with a
    task when the call starts is waited for first when the caller waits.
    """
    _check_state(state)
    create, options = how.get("create"), how.get("options")
    dry_run, background = how.get("dry_run", False), how.get("background", Background())
    server = find(api, ctx, ref)
    if server is not None and background.wait and not steady(server):
        # Busy (a build or an action of an earlier task, say): decide once it has settled.
        server = wait_until(api, ctx, server, steady, "steady", background, changed=False)
    if state == "absent":
        return _delete(api, ctx, server["id"] if server else ref, server, dry_run, background)
    if server is None:
        return _create(api, ctx, ref, state, create or {}, options, dry_run, background)
    check_unchanged(api, ctx, server, create)
    todo = actions_to(server, state)
    if not todo:
        return Outcome(False, [], server, before=server)
    started = api.act(
        ctx,
        server["id"],
        todo[0],
        options_for(todo[0], options),
        dry_run=dry_run,
        defer=True,
        declarative=True,
    )
    out = Outcome(started.changed, todo, started.server, before=server)
    if dry_run:
        return out
    wanted = POWER_STATES[state]
    goal = _Goal(
        _reached(wanted), states.status_from_state(wanted.value), f"server {server['name']} is ERROR"
    )
    then = [worker.Step(action=a, options=options_for(a, options)) for a in todo[1:]]
    return _carry_on(api, ctx, out, background, goal, request=started.request, then=then)


@dataclass
class CountOutcome:
    """What ``ensure_count`` did or, as a dry run, would do, server by server."""

    changed: bool
    servers: list[View]  # the wanted ones as they now are (a dry run: those that exist)
    created: list[str]  # names, lowest first
    deleted: list[str]  # names, highest first
    actions: dict[str, list[str]]  # by name: the actions each wanted server took (or would)
    before: dict[str, View]
    plan: dict[str, str | None]  # a dry run's new servers and the host each would get

    def result(self) -> dict[str, Any]:
        """The outcome as the ``server`` module returns it with ``count``."""
        out: dict[str, Any] = {
            "changed": self.changed,
            "servers": self.servers,
            "created": self.created,
            "deleted": self.deleted,
            "actions": self.actions,
        }
        if self.plan:
            out["would_schedule_to"] = self.plan
        return out

    def diff(self) -> tuple[dict[str, View], dict[str, View]]:
        """Each server before and after, by name (``SHOWN``); the deleted ones are gone after."""
        after = {s["name"]: _shown(s) or {} for s in self.servers if not _gone(s)}
        after.update({n: {"name": n, "host": h} for n, h in self.plan.items()})
        for name in self.deleted:
            after.pop(name, None)
        return self.before, after


def ensure_count(
    api: API, ctx: RequestContext, name: str, count: int, state: str = "present", **how: Unpack[Wanted]
) -> CountOutcome:
    """Have exactly ``count`` servers ``name-1`` ... ``name-N`` in ``state``; the ``server`` module's
    call with ``count``.

    The naming and what a count means are ``API.create_servers``'s (declarative):
    the missing numbers are created in one request (all or nothing, as the boot
    playbook's default ``min_count``), the servers numbered above the count
    deleted through the one delete (``ensure(..., "absent")``), the highest
    first, and every wanted server brought to ``state`` as ``ensure`` brings one.
    """
    _check_count(count, state)
    create, options = how.get("create"), how.get("options")
    dry_run, background = how.get("dry_run", False), how.get("background", Background())
    request = _count_request(api, ctx, name, count, create)
    outcome = api.create_servers(ctx, request, dry_run=dry_run, declarative=True)
    before = {
        s["name"]: _shown(s) or {}
        for s in [*outcome.servers, *outcome.surplus]
        if s["id"] not in outcome.created
    }
    if dry_run:
        return _count_dry_run(api, ctx, outcome, state, options, before)
    new = {s["id"]: s for s in outcome.servers if s["id"] in outcome.unbuilt}
    created = [s["name"] for s in new.values()]
    detached = Background(
        wait=False, timeout=background.timeout, config=background.config, db_url=background.db_url
    )
    proc, log = None, None
    if new:
        proc, log = hand_off(api, ctx, next(iter(new)), background, build=list(new))
    for server in outcome.surplus:
        _delete(api, ctx, server["id"], server, False, detached)
    deleted = [s["name"] for s in outcome.surplus]
    if background.wait:
        _wait_for_count(api, ctx, list(new.values()), outcome.surplus, background, proc, log)
    actions = {n: ["create"] for n in created}
    views = []
    for server in outcome.servers:
        if server["id"] in new and not background.wait:
            views.append(server)  # still building: its power state is for a later run
            continue
        out = ensure(api, ctx, server["id"], state, options=options, background=background)
        actions[server["name"]] = [*actions.get(server["name"], []), *out.actions]
        views.append(out.server or server)
    changed = bool(created or deleted or any(actions.values()))
    return CountOutcome(changed, views, created, deleted, actions, before, {})


def _check_count(count: int, state: str) -> None:
    if count < 1:
        raise exceptions.ValidationError("count", "must be at least 1 (state absent deletes a server)")
    if state == "absent":
        raise exceptions.ValidationError(
            "count", "is the number of servers to have: not with state absent (delete each by name)"
        )
    _check_state(state)


def _count_request(
    api: API, ctx: RequestContext, name: str, count: int, create: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The create request for the family: exactly ``count`` servers. Its existing members must
    not differ from ``create``; without a flavor and an image, they complete the request (and
    all must exist)."""
    request = {**{k: v for k, v in (create or {}).items() if v is not None}, "name": name}
    request.update(max_count=count, min_count=count)
    members = [v for n in names.names_for(name, count) if (v := find(api, ctx, n)) is not None]
    for server in members:
        check_unchanged(api, ctx, server, create)
    if not (request.get("flavor") and request.get("image")):
        if len(members) < count:
            missing = next(n for n in names.names_for(name, count) if n not in {m["name"] for m in members})
            raise exceptions.Invalid(
                reason=f"server {missing} does not exist; a flavor and an image are needed to create it"
            )
        # All there: the request only says how many; the family's own flavor and image complete it.
        request.setdefault("flavor", members[0]["flavor"].get("name"))
        request.setdefault("image", members[0]["image"])
    return request


def _count_dry_run(
    api: API,
    ctx: RequestContext,
    outcome: Any,
    state: str,
    options: Mapping[str, Any] | None,
    before: dict[str, View],
) -> CountOutcome:
    """What a run would do: the servers to create (and where), the ones to delete, and each
    existing one's actions to reach ``state``."""
    known = {s["name"] for s in outcome.servers} - set(outcome.unbuilt)
    plan = {n: h for n, h in outcome.would_schedule_to.items() if n not in known}
    actions: dict[str, list[str]] = {n: ["create"] for n in plan}
    for server in outcome.servers:
        actions[server["name"]] = ensure(api, ctx, server["id"], state, options=options, dry_run=True).actions
    deleted = [s["name"] for s in outcome.surplus]
    changed = bool(plan or deleted or any(actions.values()))
    return CountOutcome(changed, outcome.servers, list(plan), deleted, actions, before, plan)


def _wait_for_count(
    api: API,
    ctx: RequestContext,
    new: list[View],
    surplus: list[View],
    background: Background,
    proc: Any,
    log: Path | None,
) -> None:
    """Wait for the new servers to be ACTIVE (one in ERROR fails the call with its fault) and
    the surplus ones to be gone."""
    for server in new:
        seen = wait_until(
            api, ctx, server, _reached(VmState.ACTIVE), "ACTIVE", background, proc, str(log) if log else None
        )
        if seen is not None and seen["vm_state"] == VmState.ERROR.value:
            reason = (seen.get("fault") or {}).get("message") or "no fault recorded"
            raise exceptions.ServerFailed(
                seen, changed=True, what=f"server {seen['name']} is ERROR", reason=reason
            )
    for server in surplus:
        wait_until(api, ctx, server, _deleted, "deleted", background)


def perform(
    api: API,
    ctx: RequestContext,
    ref: str,
    action: str,
    options: Mapping[str, Any] | None = None,
    *,
    dry_run: bool = False,
    background: Background = Background(),
) -> Outcome:
    """Run ``action`` (``states.ACTION_NAMES``) on server ``ref``; the ``server_action`` module's call.

    Declarative: an action in effect already (a locked server to lock) is no
    change. ``options`` may hold options of several actions; ``action`` gets its
    own (``options_for``). The host's part goes to a worker.
    """
    before = api.get(ctx, ref)
    started = api.act(
        ctx,
        before["id"],
        action,
        options_for(action, options),
        dry_run=dry_run,
        defer=True,
        declarative=True,
    )
    out = Outcome(started.changed, [action] if started.changed else [], started.server, before=before)
    if started.would_move_to is not None:
        out.plan = {"name": before["name"], "host": started.would_move_to}
    if started.error is not None:  # a move that failed on a host and was rolled back
        assert started.server is not None
        raise exceptions.ServerFailed(
            started.server,
            changed=True,
            what=f"{action} of server {before['name']} failed",
            reason=started.error
            + (
                ""
                if started.server["status"] == "ERROR"
                else f"; rolled back, it is {started.server['status']}"
            ),
        )
    if dry_run or not started.changed:
        return out
    goal = _Goal(_idle, f"finished with its {action}", f"{action} of server {before['name']} failed")
    return _carry_on(api, ctx, out, background, goal, request=started.request)


def _create(
    api: API,
    ctx: RequestContext,
    name: str,
    state: str,
    create: Mapping[str, Any],
    options: Mapping[str, Any] | None,
    dry_run: bool,
    background: Background,
) -> Outcome:
    if not (create.get("flavor") and create.get("image")):
        raise exceptions.Invalid(
            reason=f"server {name} does not exist; a flavor and an image are needed to create it"
        )
    wanted = POWER_STATES.get(state, VmState.ACTIVE)
    then = states.path(VmState.ACTIVE.value, wanted) or []
    request = {**{k: v for k, v in create.items() if v is not None}, "name": name}
    created = api.create_servers(ctx, request, dry_run=dry_run)
    if dry_run:
        return Outcome(True, ["create", *then], plan={"name": name, "host": created.would_schedule_to[name]})
    (server,) = created.servers
    goal = _Goal(_reached(wanted), states.status_from_state(wanted.value), f"server {name} is ERROR")
    steps = [worker.Step(action=a, options=options_for(a, options)) for a in then]
    out = Outcome(True, ["create", *then], server)
    return _carry_on(api, ctx, out, background, goal, build=created.unbuilt, then=steps)


def _delete(
    api: API, ctx: RequestContext, ref: str, server: View | None, dry_run: bool, background: Background
) -> Outcome:
    started = api.act(ctx, ref, "delete", dry_run=dry_run, defer=True, declarative=True)
    out = Outcome(started.changed, ["delete"] if started.changed else [], started.server, before=server)
    if dry_run or not started.changed or started.server is None:
        return out
    goal = _Goal(_deleted, "deleted", f"delete of server {started.server['name']} failed")
    return _carry_on(api, ctx, out, background, goal, request=started.request)


def _carry_on(
    api: API,
    ctx: RequestContext,
    out: Outcome,
    background: Background,
    goal: _Goal,
    **work: Unpack[Work],
) -> Outcome:
    """Hand what is left to a worker and, when the caller waits, wait until the ``goal`` is
    reached (work that ends in ERROR is a ServerFailed whose message starts with its failure).
    """
    assert out.server is not None
    proc = None
    if work.get("build") or work.get("request") is not None or work.get("then"):
        proc, log = hand_off(api, ctx, out.server["id"], background, **work)
        out.worker_log = str(log) if log is not None else None
    if not background.wait:
        return out
    out.server = wait_until(api, ctx, out.server, goal.settled, goal.wanted, background, proc, out.worker_log)
    if out.server is not None and out.server["vm_state"] == VmState.ERROR.value:
        reason = (out.server.get("fault") or {}).get("message") or "no fault recorded"
        raise exceptions.ServerFailed(out.server, changed=True, what=goal.failure, reason=reason)
    return out


# --------------------------------------------------------------- the worker and the wait


class Work(TypedDict, total=False):
    """What a worker is handed to carry on with a server (``worker.Job``): the servers to
    ``build``, the action's host ``request`` to deliver, the actions to run ``then``."""

    build: Sequence[str]
    request: ComputeRequest | None
    then: Sequence[worker.Step]


def hand_off(
    api: API, ctx: RequestContext, server: str, background: Background, **work: Unpack[Work]
) -> tuple[subprocess.Popen[bytes] | None, Path | None]:
    """Start a detached worker that carries on with ``server`` (``worker.Job``); its process and log.

    Through a cloud there is no worker: the service runs the build and the action's host part in
    its own pool, and the later steps of a path are started from here, each once the server has
    settled from the one before (``CloudAPI.carry_on``: the call then waits for them whatever
    ``background.wait`` says)."""
    if isinstance(api, CloudAPI):
        api.carry_on(ctx, server, list(work.get("then", ())))
        return None, None
    request = work.get("request")
    job = worker.Job.for_context(
        ctx,
        server,
        config=background.config,
        db_url=background.db_url,
        build=list(work.get("build", ())),
        request=request.to_wire() if request is not None else None,
        then=list(work.get("then", ())),
    )
    return worker.start(api.conf, job)


def wait_until(
    api: API,
    ctx: RequestContext,
    server: View,
    settled: Settled,
    wanted: str,
    background: Background,
    proc: subprocess.Popen[bytes] | None = None,
    log: str | None = None,
    *,
    changed: bool = True,
) -> View | None:
    """Poll ``server`` until ``settled(view)`` (the view is None once deleted), within the timeout.

    A WaitTimeout when the timeout passes first, a WorkerEnded when the worker
    ends without the server getting there; both name the server, its status and
    task state. ``changed`` says whether the caller had started work before it
    waited.
    """
    view, why = worker.wait_for(lambda: find(api, ctx, server["id"]), settled, background.timeout, proc)
    if why is None:
        return view
    now = view or server
    if why == "timeout":
        goes_on = f"; the work goes on in the background (log: {log})" if proc is not None else ""
        raise exceptions.WaitTimeout(
            now, changed=changed, timeout=background.timeout, wanted=wanted, goes_on=goes_on
        )
    raise exceptions.WorkerEnded(now, changed=changed, wanted=wanted, log=log)


def find(api: API, ctx: RequestContext, ref: str) -> View | None:
    """The server named or numbered ``ref``, as the caller may see it; None when there is none."""
    try:
        return api.get(ctx, ref)
    except exceptions.InstanceNotFound:
        return None


def _reached(vm_state: VmState) -> Settled:
    """Settled in ``vm_state``, or in ERROR (which the caller reports)."""

    def reached(server: View | None) -> bool:
        return (
            server is not None
            and server["task_state"] is None
            and server["vm_state"] in (vm_state.value, VmState.ERROR.value)
        )

    return reached


def _idle(server: View | None) -> bool:
    return server is not None and server["task_state"] is None


def _deleted(server: View | None) -> bool:
    """Gone, or back in ERROR (a failed delete, which the caller reports)."""
    return server is None or (server["task_state"] is None and server["vm_state"] == VmState.ERROR.value)


def _gone(server: View) -> bool:
    return server["vm_state"] in (VmState.DELETED.value, VmState.SOFT_DELETED.value)


def _shown(server: View | None) -> View | None:
    return {k: server[k] for k in SHOWN if k in server} if server is not None else None
