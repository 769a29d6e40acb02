"""Evacuation: a server rebuilt on another host because its own is down.

**Evacuation** (``evacuate``, task ``rebuilding`` -> ``rebuild_spawning``; the migration
``accepted`` -> ``pre-migrating`` -> ``done``): only for a server whose host is down by the
liveness rules. The server is rebuilt on another host from its image, with its ports; the
down source's old guest and claim stay with the migration until heal finds the host back
and removes them (``completed``: Nova's clean-up of evacuated instances at start-up). A
rebuild that fails leaves the server in error on its old host, the new claim gone.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from novakit.compute import actions
from novakit.compute.rpc import instance_spec
from novakit.compute.states import TaskState, Transition, VmState
from novakit.conductor.core import ctx_admin
from novakit.conductor.flows.base import Choice, OffItsHost
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.fleet import aggregates as fleet_aggregates
from novakit.host.messages import ComputeRequest, InstanceResult
from novakit.moves import migrations
from novakit.network import ports
from novakit.placement.allocations import move_allocations_in_session, remove_allocations_in_session

T = TaskState


class Evacuate(OffItsHost):
    """Nova's evacuate (the ``evacuate`` row): rebuilt elsewhere from its image."""

    choice = Choice("conductor_rebuild_server", T.REBUILDING, ("accepted", "pre-migrating"), "evacuation")

    def move(self, ctx: RequestContext, uuid: str, t: Transition, mig: str, source: str, dest: str) -> None:
        spec, old_vm_state = self.db.run_in_transaction(lambda s: self._spawning(s, ctx, uuid, dest))
        stopped = old_vm_state == VmState.STOPPED.value
        request = ComputeRequest(
            request_id=ctx.request_id,
            host=dest,
            operation="build",
            action=t.action,
            instances=[spec],
        )
        result = self.services.rpc.send(request)
        built = next((r for r in result.results if r.uuid == uuid), None) or InstanceResult(
            uuid=uuid, ok=False, fault=result.error
        )
        if built.ok and stopped:  # a stopped server is evacuated stopped, as Nova does
            off = self.services.call(ctx, dest, "stop", t.action, spec, {"timeout": 0})
            built.events += off.events
            built.power_state = off.power_state

        def done(session: Session) -> None:
            if built.ok:
                values = _rebuilt(session, uuid, mig, built, stopped)
            else:
                values = _left_in_error(session, uuid, mig, source)
            fleet_aggregates.with_zone(session, self.services.conf, values)
            actions.end_task(
                session, ctx, uuid, values, [T.REBUILD_SPAWNING], answer=built, finish=t.record_as
            )

        self.db.run_in_transaction(done)
        self.services.notifier.emit(f"instance.evacuate.{'end' if built.ok else 'error'}", uuid, host=dest)

    def _spawning(self, session: Session, ctx: RequestContext, uuid: str, dest: str) -> tuple[Any, str]:
        """The rebuild starts on ``dest``: the server and its ports are bound there, a new lease
        taken. Returns the server as the host is sent it, and its state before."""
        db_api.instance_update(
            session,
            uuid,
            fleet_aggregates.with_zone(
                session,
                self.services.conf,
                {
                    "task_state": T.REBUILD_SPAWNING,
                    "task_lease_until": self.services.lease_until(),
                    "host": dest,
                    "node": dest,
                },
            ),
            expected_task_state=[T.REBUILDING],
            expected_owner=ctx.request_id,
            fetch=False,
        )
        ports.bind_host(session, [uuid], dest, "BUILD")
        inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
        return instance_spec(session, inst), inst.vm_state


def _rebuilt(session: Session, uuid: str, mig: str, built: InstanceResult, stopped: bool) -> dict[str, Any]:
    """The rebuild worked: the migration ``done``, the ports active, the server as it was."""
    migrations.set_status(session, mig, "pre-migrating", "done")
    ports.set_status(session, [uuid], "ACTIVE")
    return {
        "task_state": None,
        "vm_state": VmState.STOPPED if stopped else VmState.ACTIVE,
        "power_state": built.power_state if built.power_state is not None else 1,
    }


def _left_in_error(session: Session, uuid: str, mig: str, source: str) -> dict[str, Any]:
    """Nothing runs anywhere: the server in error, on its old host, with its old claim."""
    remove_allocations_in_session(session, uuid)
    move_allocations_in_session(session, mig, uuid)
    migrations.set_status(session, mig, "pre-migrating", "error")
    ports.bind_host(session, [uuid], source)
    return {"task_state": None, "vm_state": VmState.ERROR, "host": source, "node": source}
