"""One round trip to the hosts: deliver requests, pair the answers with them, record them.

However a request reaches its host - in this process, over SSH or a libvirt
URI (``ComputeRPC``'s transports), from a background worker, or carried by a
playbook's compute play - its answer comes back here, is paired with its
request, and is recorded through the conductor, with one rule and one wording:

* ``deliver(rpc, requests)`` sends them and returns ``(request, result)`` pairs;
* ``collect(requests, answers, silent)`` pairs what a playbook round brought back
  (each host's results in the order of its requests) the same way;
* ``record(recorder, ctx, request, result)`` records one pair and returns its
  follow-ups (reschedules, clean-ups); ``record_all`` a round's; ``run`` is the
  direct mode's loop: deliver, record, until nothing follows.

A host that gave no answer for a request (unreachable, its task failed, it
returned no result) answers ``silent``: the request failed there with
``HypervisorUnavailable`` naming what carried it and why, and another host may
do better. The why is worded by ``unreachable``, ``task_failed`` and
``no_result``, here only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from novakit import exceptions
from novakit.host.faults import fault_from_exception, unusable
from novakit.host.messages import ComputeRequest, ComputeResult, Fault, InstanceResult

if TYPE_CHECKING:
    from novakit.compute.rpc import ComputeRPC
    from novakit.context import RequestContext

#: a request and its host's answer
Pair = tuple[ComputeRequest, ComputeResult]


class Recorder(Protocol):
    """What records answers: the conductor's record methods (their signatures are its API)."""

    def record_build_results(
        self, answers: list[tuple[RequestContext, ComputeRequest, ComputeResult]]
    ) -> list[ComputeRequest]: ...

    def record_action_result(
        self, ctx: RequestContext, request: ComputeRequest, result: ComputeResult
    ) -> None: ...


# --------------------------------------------------------------- one wording per outcome


def no_result(host: str) -> str:
    """The host ran (or was asked to run) the request and gave back nothing for it."""
    return f"host {host} returned no result"


def unreachable(host: str, why: str | None = None) -> str:
    """What carried the request could not reach the host."""
    return f"host {host} unreachable" + (f": {why}" if why else "")


def task_failed(host: str, why: str | None = None) -> str:
    """The task that was to run the request on the host failed before it answered
    (the novakit callback plugin words it so too)."""
    return f"compute task failed on host {host}" + (f": {why}" if why else "")


def silent(request: ComputeRequest, reason: str) -> ComputeResult:
    """The answer of a host that gave none: every instance of ``request`` failed there,
    ``reason`` (``"<carrier>: <why>"``) saying why; another host may do better."""
    return unusable(request, exceptions.HypervisorUnavailable(host=request.host, reason=reason), request.host)


def no_result_fault(host: str) -> Fault:
    """The fault of an instance the host's answer says nothing about."""
    return fault_from_exception(exceptions.ComputeError(reason=no_result(host)), host)


# --------------------------------------------------------------- delivering and pairing


def deliver(
    rpc: ComputeRPC, requests: list[ComputeRequest], infos: dict[str, dict[str, Any]] | None = None
) -> list[Pair]:
    """Send each request to its host through its transport, in parallel; the pairs in order.

    ``infos`` (host -> driver info) when the caller has read them (the scheduler's claims).
    A host that could not run a request answers ``unusable`` (``ComputeRPC.send``): no pair
    is ever missing.
    """
    return list(zip(requests, rpc.send_all(requests, infos), strict=True))


def collect(
    requests: list[ComputeRequest],
    answers: Mapping[str, list[ComputeResult]],
    reasons: Mapping[str, str] | None = None,
    *,
    carrier: str = "Ansible",
) -> list[Pair]:
    """Pair what came back from a round someone else carried (a playbook's compute play).

    ``answers``: each host's results, in the order of its requests (the compute task
    runs a host's requests in order). A request its host gave no result for answers
    ``silent``, with what ``carrier`` said of the host (``reasons``) or, when nothing
    was said, ``no_result``.
    """
    said = reasons or {}
    taken: dict[str, int] = {}
    pairs: list[Pair] = []
    for request in requests:
        index = taken.get(request.host, 0)
        taken[request.host] = index + 1
        host_answers = answers.get(request.host) or []
        if index < len(host_answers):
            pairs.append((request, host_answers[index]))
        else:
            why = said.get(request.host) or no_result(request.host)
            pairs.append((request, silent(request, f"{carrier}: {why}")))
    return pairs


# --------------------------------------------------------------- recording


@dataclass
class Recorded:
    """What a round's record leaves: the requests that follow and the instances that failed."""

    follow_ups: list[ComputeRequest] = field(default_factory=list)
    #: instance uuid -> the message of its fault, for each instance whose request failed
    #: (a failed build may still be rescheduled: see ``follow_ups``)
    failed: dict[str, str] = field(default_factory=dict)


def record(
    recorder: Recorder, ctx: RequestContext, request: ComputeRequest, result: ComputeResult
) -> list[ComputeRequest]:
    """Record one answer; the requests that must follow it (a build's reschedules, clean-ups).

    An instance action (``request.action``) ends through ``record_action_result``; a build
    through ``record_build_results``; other requests (a clean-up's destroy, a query) need
    no record. The answer is recorded under the request that issued it (a server picked
    up by a later run keeps the request that recorded it).
    """
    owner = _owner(ctx, request)
    if request.action is not None:
        recorder.record_action_result(owner, request, complete(request, result))
        return []
    if request.operation == "build":
        return recorder.record_build_results([(owner, request, result)])
    return []


def _owner(ctx: RequestContext, request: ComputeRequest) -> RequestContext:
    """The request an answer is recorded under: the one that issued it."""
    return ctx if request.request_id == ctx.request_id else ctx.with_request_id(request.request_id)


def record_all(recorder: Recorder, ctx: RequestContext, pairs: list[Pair]) -> Recorded:
    """Record a round's pairs: its builds' answers together (``record_build_results``, each
    under its request), then the others in order; their follow-ups and failed instances."""
    out = Recorded()
    builds = [(r, a) for r, a in pairs if r.action is None and r.operation == "build"]
    if builds:
        out.follow_ups.extend(recorder.record_build_results([(_owner(ctx, r), r, a) for r, a in builds]))
    for request, result in pairs:
        if request.action is not None or request.operation != "build":
            out.follow_ups.extend(record(recorder, ctx, request, result))
        out.failed.update(failures(request, result))
    return out


def run(
    rpc: ComputeRPC,
    recorder: Recorder,
    ctx: RequestContext,
    requests: list[ComputeRequest],
    infos: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Direct mode: deliver and record, round after round, until nothing follows.

    The conductor bounds the rounds: a build that ran out of attempts has no follow-up.
    """
    pending = requests
    while pending:
        pending = record_all(recorder, ctx, deliver(rpc, pending, infos)).follow_ups
        infos = None


def complete(request: ComputeRequest, result: ComputeResult) -> ComputeResult:
    """``result`` with a failed result for each instance of ``request`` it says nothing about
    (its host-level error, else ``no_result_fault``)."""
    told = {r.uuid for r in result.results}
    missing = [i.uuid for i in request.instances if i.uuid not in told]
    if not missing:
        return result
    fault = result.error or no_result_fault(request.host)
    extra = [InstanceResult(uuid=uuid, ok=False, fault=fault) for uuid in missing]
    return result.model_copy(update={"results": [*result.results, *extra]})


def failures(request: ComputeRequest, result: ComputeResult) -> dict[str, str]:
    """Each instance of ``request`` that failed in ``result``, with its fault's message."""
    by_uuid = {r.uuid: r for r in complete(request, result).results}
    out: dict[str, str] = {}
    for spec in request.instances:
        res = by_uuid[spec.uuid]
        if not res.ok:
            fault = res.fault or result.error or no_result_fault(request.host)
            out[spec.uuid] = fault.message
    return out
