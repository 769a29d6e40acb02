"""``Conductor``: the parts of the conductor held together (package docstring: ``novakit.conductor``)."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Unpack, cast, overload

from novakit import notifications
from novakit.compute import rounds
from novakit.compute.rpc import ComputeRPC
from novakit.compute.states import ACTIONS, Transition
from novakit.conductor.actions import Actions
from novakit.conductor.builds import BuildJob, Builds
from novakit.conductor.core import Clock, ServiceOptions, Services
from novakit.conductor.flows.base import Flow
from novakit.conductor.flows.registry import FLOWS
from novakit.conductor.flows.release import release_moves
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Instance, RequestSpec
from novakit.host.messages import ComputeRequest, ComputeResult

if TYPE_CHECKING:
    from novakit.scheduler.manager import SchedulerManager

__all__ = ["Conductor", "Services"]

LOG = logging.getLogger(__name__)

V = TypeVar("V")


class _OfServices(Generic[V]):
    """An attribute of the conductor that is its ``Services``' (one object holds it: reading
    and setting it on the conductor reads and sets it there)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, conductor: None, owner: type | None = None) -> _OfServices[V]: ...

    @overload
    def __get__(self, conductor: Conductor, owner: type | None = None) -> V: ...

    def __get__(self, conductor: Conductor | None, owner: type | None = None) -> V | _OfServices[V]:
        if conductor is None:  # read on the class: the attribute itself
            return self
        return cast(V, getattr(conductor.services, self.name))

    def __set__(self, conductor: Conductor, value: V) -> None:
        setattr(conductor.services, self.name, value)


class Conductor:
    """The builds, the actions and the flows, over one ``Services``."""

    def __init__(self, db: Database, conf: Config, **options: Unpack[ServiceOptions]) -> None:
        self.services = Services(db, conf, **options)
        self.db = db
        self.builds = Builds(self.services)
        self._waiting = _WaitingBuilds(self)
        self.actions = Actions(self.services)
        self.flows: dict[str, Flow] = {name: flow(self.services) for name, flow in FLOWS.items()}

    # --- the services, as callers and tests reach them: read and set on ``services`` ----------

    conf: _OfServices[Config] = _OfServices()
    rpc: _OfServices[ComputeRPC] = _OfServices()
    clock: _OfServices[Clock] = _OfServices()
    notifier: _OfServices[notifications.Notifier] = _OfServices()
    scheduler: _OfServices[SchedulerManager] = _OfServices()

    def lease_until(self, extra_seconds: float = 0) -> dt.datetime:
        return self.services.lease_until(extra_seconds)

    def renew_leases(self, ctx: RequestContext, uuids: Sequence[str], extra_seconds: float = 0) -> list[str]:
        return self.services.renew_leases(ctx, uuids, extra_seconds)

    # --- after the API's guarded write ------------------------------------------------------

    def carry_on(
        self, ctx: RequestContext, uuid: str, t: Transition, options: dict[str, Any], *, defer: bool = False
    ) -> ComputeRequest | None:
        """Carry on the action the API has just started (its guarded write committed): announced,
        then finished here (no host acts), carried on by its flow (a move), or sent to its host.
        With ``defer`` a host's request is returned for the caller to send instead."""
        self.notifier.emit(f"instance.{t.notify_as}.start", uuid)
        if not t.compute:
            self.actions.finish_local(ctx, uuid, t)
            self.notifier.emit(f"instance.{t.notify_as}.end", uuid)
            return None
        if t.flow is not None:
            self.run_move(ctx, uuid, t.action, options)
            return None
        request = self.actions.prepare_action(ctx, uuid, t.action, options)
        if request is None:  # no host holds it (never scheduled): nothing to do there
            self.actions.finish_action(ctx, uuid, t.action, None)
        elif not defer:
            self.run_action(ctx, request)
            return None
        return request

    # --- moves ------------------------------------------------------------------------------

    def flow_of(self, action: str) -> Flow:
        name = ACTIONS[action].flow
        if name is None:
            raise ValueError(f"{action} is no move")
        return self.flows[name]

    def run_move(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        """Carry on the move the API has started: the flow its table row names."""
        self.flow_of(action).run(ctx, uuid, action, options)

    def plan_move(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> str | None:
        """Where a move would go, as its dry run (check mode) answers: the scheduler's choice with
        nothing claimed, or NoValidHost with its explanation. None: the move needs no new host."""
        return self.flow_of(action).dry_run(ctx, uuid, action, options)

    def release_moves(self, ctx: RequestContext, uuid: str) -> None:
        """A deleted server's moves end with it (``flows.release``)."""
        release_moves(self.services, ctx, uuid)

    # --- builds -----------------------------------------------------------------------------

    def schedule_instances(self, ctx: RequestContext, instance_uuids: list[str]) -> list[ComputeRequest]:
        return self.builds.schedule_instances(ctx, instance_uuids)

    def record_build_results(
        self, answers: list[tuple[RequestContext, ComputeRequest, ComputeResult]]
    ) -> list[ComputeRequest]:
        return self.builds.record_build_results(answers)

    def build_instances(
        self,
        ctx: RequestContext,
        instance_uuids: list[str],
        records: dict[str, tuple[Instance, RequestSpec]] | None = None,
        built: dict[str, Instance] | None = None,
    ) -> None:
        """Direct mode: schedule, then deliver and record round after round (``compute.rounds``,
        the one round trip every way of reaching hosts shares) until nothing follows.

        ``built``: where to keep each instance that built, as its result's transaction left it
        (the API shows them without reading them again)."""
        pending, infos = self.builds.first_round(ctx, instance_uuids, records)
        rounds.run(self.rpc, self if built is None else _Keeping(self, built), ctx, pending, infos)

    def build_later(
        self,
        later: Callable[..., None],
        ctx: RequestContext,
        instance_uuids: list[str],
        records: dict[str, tuple[Instance, RequestSpec]] | None = None,
    ) -> None:
        """``build_instances`` handed to ``later`` (``novakit serve``'s pool): the build waits with
        the others handed over meanwhile, and one drain of the pool schedules all that wait at once
        (``Builds.first_rounds_together``); each build's host calls and records then run on the
        pool as its own work, as ``build_instances`` runs them."""
        self._waiting.add(later, BuildJob(ctx, list(instance_uuids), records))

    # --- actions ----------------------------------------------------------------------------

    def prepare_action(
        self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any] | None = None
    ) -> ComputeRequest | None:
        return self.actions.prepare_action(ctx, uuid, action, options)

    def run_action(self, ctx: RequestContext, request: ComputeRequest) -> None:
        """Direct mode: an action's request delivered and recorded by the one round trip."""
        rounds.run(self.rpc, self, ctx, [request])

    def record_action_result(
        self, ctx: RequestContext, request: ComputeRequest, result: ComputeResult
    ) -> None:
        self.actions.record_action_result(ctx, request, result)


class _WaitingBuilds:
    """The builds handed to the pool and not scheduled yet. While a drain runs (one at a time, on
    the pool), builds handed over wait here; the drain takes all that wait, schedules them
    (``Builds.first_rounds_together``) and hands each one's rounds to the pool, until none wait.
    A build that never ran (the process stopped) is heal's, as any other: its lease runs out."""

    def __init__(self, conductor: Conductor) -> None:
        self.conductor = conductor
        self._lock = threading.Lock()
        self._jobs: list[BuildJob] = []
        self._draining = False

    def add(self, later: Callable[..., None], job: BuildJob) -> None:
        with self._lock:
            self._jobs.append(job)
            if self._draining:
                return
            self._draining = True
        try:
            later(self._drain, later, job.ctx)
        except BaseException:
            with self._lock:
                self._draining = False
            raise

    def _drain(self, later: Callable[..., None], _first: RequestContext) -> None:
        """``_first``: the context of the build that started the drain (the pool logs its
        request id if the drain itself fails)."""
        while True:
            with self._lock:
                jobs, self._jobs = self._jobs, []
                if not jobs:
                    self._draining = False
                    return
            for group in self.conductor.builds.alike(jobs):
                try:
                    started = self.conductor.builds.first_rounds_together(group)
                except Exception as exc:
                    # As for a build whose worker failed: what was claimed is recorded with its
                    # lease, and heal takes over what is left when the lease runs out.
                    LOG.error(
                        "scheduling %d waiting build(s) (%s) failed: %s",
                        len(group),
                        ", ".join(job.ctx.request_id for job in group),
                        type(exc).__name__,
                    )
                    continue
                # The group's rounds run as one: its hosts called side by side, the answers
                # recorded together, each under its own request (``rounds.record_all``).
                pending = [request for _job, requests, _infos in started for request in requests]
                infos = {host: info for _job, _requests, known in started for host, info in known.items()}
                if pending:
                    later(rounds.run, self.conductor.rpc, self.conductor, group[0].ctx, pending, infos)


class _Keeping:
    """The conductor as ``rounds.run``'s recorder, keeping the rows of the instances that built."""

    def __init__(self, conductor: Conductor, built: dict[str, Instance]) -> None:
        self.conductor = conductor
        self.built = built

    def record_build_results(
        self, answers: list[tuple[RequestContext, ComputeRequest, ComputeResult]]
    ) -> list[ComputeRequest]:
        return self.conductor.builds.record_build_results(answers, self.built)

    def record_action_result(
        self, ctx: RequestContext, request: ComputeRequest, result: ComputeResult
    ) -> None:
        self.conductor.record_action_result(ctx, request, result)
