"""What every part of the conductor works with: one ``Services`` object, passed in typed.

The database, the configuration, the way to the hosts (``rpc``), the notifier, the scheduler
(built when first used: recording a result needs none), the clock leases are read on, and the
two steps every flow takes: one call to one host (``call``) and one guarded task step (``step``).
The parts (``Builds``, ``Actions``, the flows) hold this object, never each other's attributes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from sqlalchemy.orm import Session

from novakit import notifications
from novakit.cells.registry import grouped
from novakit.compute.rpc import ComputeRPC, TransportFactory
from novakit.compute.states import TaskState
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.engine import Database
from novakit.db.models import utcnow
from novakit.host.messages import ComputeRequest, InstanceResult, InstanceSpec

if TYPE_CHECKING:
    from novakit.scheduler.manager import SchedulerManager

#: "now" for leases (naive UTC, as the database stores it); tests move it instead of sleeping
Clock = Callable[[], dt.datetime]

#: one host call of a flow's run (``Services.caller``): host, operation, options -> the answer
HostCaller = Callable[[str, str, dict[str, Any]], InstanceResult]


def ctx_admin(ctx: RequestContext) -> RequestContext:
    """The conductor acts for the system once the API has checked the caller."""
    return RequestContext("admin", "admin", ["admin"], ctx.request_id)


class ServiceOptions(TypedDict, total=False):
    """What a conductor may be given besides the database and the configuration (``Services``)."""

    scheduler: SchedulerManager | None
    transport_factory: TransportFactory | None
    clock: Clock | None


class Services:
    """The conductor's collaborators, shared by its parts (Nova's ``ComputeTaskManager`` holds
    its scheduler client, compute RPC API and image API the same way)."""

    def __init__(
        self,
        db: Database,
        conf: Config,
        *,
        scheduler: SchedulerManager | None = None,
        transport_factory: TransportFactory | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.db = db
        self.conf = conf
        self._scheduler = scheduler
        self.rpc = ComputeRPC(db, conf, transport_factory)
        self.notifier = notifications.Notifier(conf)
        self.clock: Clock = clock or utcnow

    @property
    def scheduler(self) -> SchedulerManager:
        """Built when first used: recording a result needs no scheduler."""
        if self._scheduler is None:
            from novakit.scheduler.manager import SchedulerManager

            self._scheduler = SchedulerManager(self.db, self.conf)
        return self._scheduler

    # --- leases -------------------------------------------------------------------------

    def lease_until(self, extra_seconds: float = 0) -> dt.datetime:
        """Until when a task started or renewed now is its owner's: ``compute.build_timeout``
        seconds (the longest a build may take, Nova's ``instance_build_timeout``) plus what the
        host call may take on top (a stop's graceful shutdown timeout)."""
        return self.clock() + dt.timedelta(seconds=self.conf.compute.build_timeout + extra_seconds)

    def renew_leases(self, ctx: RequestContext, uuids: Sequence[str], extra_seconds: float = 0) -> list[str]:
        """Renew ``ctx``'s request's leases on ``uuids`` before a host call; the uuids it still owns
        (heal may have taken the others over, or they were deleted)."""
        until = self.lease_until(extra_seconds)
        owned: list[str] = []
        for _cell, group in grouped(self.db, uuids):

            def renew(session: Session, group: list[str] = group) -> list[str]:
                return db_api.renew_leases(session, group, ctx.request_id, until)

            owned.extend(self.db.run_in_transaction(renew))
        return owned

    # --- the steps of every flow ----------------------------------------------------------

    def call(
        self,
        ctx: RequestContext,
        host: str,
        operation: str,
        action: str,
        spec: InstanceSpec,
        options: dict[str, Any],
    ) -> InstanceResult:
        """One host's step of a flow; a host that cannot be reached is a failed step."""
        request = ComputeRequest(
            request_id=ctx.request_id,
            host=host,
            operation=operation,  # type: ignore[arg-type]
            action=action,
            instances=[spec],
            options=options,
        )
        result = self.rpc.send(request)
        res = next((r for r in result.results if r.uuid == spec.uuid), None)
        if res is None:
            res = InstanceResult(uuid=spec.uuid, ok=False, fault=result.error)
        return res

    def caller(self, ctx: RequestContext, action: str, spec: InstanceSpec) -> HostCaller:
        """``call`` for the steps of one run of a flow: its caller, action and server fixed, the
        host, operation and options left."""
        return lambda host, operation, options: self.call(ctx, host, operation, action, spec, options)

    def step(self, ctx: RequestContext, uuid: str, expected: TaskState, task: TaskState) -> None:
        self.db.run_in_transaction(lambda s: self.step_in(s, ctx, uuid, expected, task))

    def step_in(
        self, session: Session, ctx: RequestContext, uuid: str, expected: TaskState, task: TaskState
    ) -> None:
        """The flow's next task state, guarded by the last and by its owner; the lease renewed
        for the host call that follows."""
        db_api.instance_update(
            session,
            uuid,
            {"task_state": task, "task_lease_until": self.lease_until()},
            expected_task_state=[expected],
            expected_owner=ctx.request_id,
            fetch=False,
        )
