"""Live migration: a running server moved without a stop.

**Live migration** (``live_migrate``, task ``migrating``; the migration ``queued`` ->
``preparing`` -> ``running`` -> ``completed``): the migration takes the source's claim and the
scheduler claims the destination for the instance, as a resize does; the destination gets
ready (``pre_live_migration``), the source moves the guest while it runs
(``live_migration``), the destination makes it its own
(``post_live_migration_at_destination``). Then the server is the destination's, its ports
bound there, and the migration's claim on the source goes. A failure rolls back as Nova's
``_rollback_live_migration``: the destination cleans up, the claims go back, the guest still
runs on the source, the server is where it was with the action's error, the migration error.
An aborted migration (``novakit.moves.abort``: its source's step stopped, or never started
because the abort came first) takes that same path, with one difference as Nova's
``migration_status='cancelled'``: the migration ends ``cancelled`` and the server keeps no fault.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from novakit.compute import actions
from novakit.compute.states import TaskState, Transition
from novakit.conductor.flows.base import Choice, OffItsHost
from novakit.context import RequestContext
from novakit.fleet import aggregates as fleet_aggregates
from novakit.host.messages import InstanceResult
from novakit.moves import abort, migrations
from novakit.network import ports
from novakit.placement.allocations import remove_allocations_in_session

T = TaskState


class LiveMigrate(OffItsHost):
    """Nova's live migration (the ``live_migrate`` row)."""

    choice = Choice("conductor_live_migrate_instance", T.MIGRATING, ("queued", "preparing"), "live-migration")

    def move(self, ctx: RequestContext, uuid: str, t: Transition, mig: str, source: str, dest: str) -> None:
        spec = self.spec_of(ctx, uuid)
        events: list[Any] = []
        call = self.services.caller(ctx, t.action, spec)
        ready = call(dest, "pre_live_migration", {})
        events += ready.events
        moved: InstanceResult | None = None
        if ready.ok and not self.db.run_in_transaction(lambda s: abort.begin_running(s, uuid, mig)):
            moved = call(source, "live_migration", {"dest_host": dest, "dest_info": ready.disk_info or {}})
            events += moved.events
        if moved is None or not moved.ok:  # the guest still runs on the source
            cleanup = call(dest, "rollback_live_migration_at_destination", {})
            failed = moved if moved is not None else ready
            with self.db.reader() as session:
                cancelled = abort.aborted(session, uuid, mig)
            undone = [*events, *cleanup.events]
            if not cancelled:
                self.roll_back(ctx, uuid, t, mig, events=undone, fault=failed.fault)
                return
            ran = moved is not None
            self.roll_back(
                ctx,
                uuid,
                t,
                mig,
                events=undone,
                fault=None,
                migration_status="cancelled",
                also=lambda s: abort.cancelled(s, uuid, source, ran=ran),
            )
            return
        landed = call(dest, "post_live_migration_at_destination", {"disk_info": moved.disk_info or {}})
        # Past this point the guest runs on the destination whatever the last step said: the
        # records follow the guest; a failed last step is recorded as the action's error.

        self._landed(ctx, uuid, t, mig, dest, events, landed)

    def _landed(
        self,
        ctx: RequestContext,
        uuid: str,
        t: Transition,
        mig: str,
        dest: str,
        events: list[Any],
        landed: InstanceResult,
    ) -> None:
        """The records follow the guest to ``dest``: the migration's claim on the source goes,
        the ports are bound there; a failed last step (``landed``, after ``events``) is the
        action's error."""

        def done(session: Session) -> None:
            remove_allocations_in_session(session, mig)
            migrations.set_status(session, mig, "running", "completed" if landed.ok else "error")
            ports.bind_host(session, [uuid], dest)
            values: dict[str, Any] = {"host": dest, "node": dest, "task_state": None}
            fleet_aggregates.with_zone(session, self.services.conf, values)
            if landed.power_state is not None:
                values["power_state"] = landed.power_state
            actions.end_task(
                session, ctx, uuid, values, [T.MIGRATING], events=events, answer=landed, finish=t.record_as
            )

        self.db.run_in_transaction(done)
        self.services.notifier.emit(
            f"instance.live_migration._post.{'end' if landed.ok else 'error'}", uuid, host=dest
        )
