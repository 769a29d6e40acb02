"""Live migration and evacuation: a running server moved without a stop, and one rebuilt elsewhere
because its host is down.

**Live migration** (``live_migrate``, task ``migrating``; the migration ``queued`` ->
``preparing`` -> ``running`` -> ``completed``): the migration takes the source's claim and the
scheduler claims the destination for the instance, as a resize does; the destination gets
ready (``pre_live_migration``), the source moves the guest while it runs
(``live_migration``), the destination makes it its own
(``post_live_migration_at_destination``). Then the server is the destination's, its ports
bound there, and the migration's claim on the source goes. A failure rolls back as Nova's
``_rollback_live_migration``: the destination cleans up, the claims go back, the guest still
runs on the source, the server is where it was with the action's error, the migration error.

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

from novakit import exceptions
from novakit.cells.registry import in_cell_of
from novakit.compute import actions
from novakit.compute.messages import ComputeRequest, InstanceResult
from novakit.compute.rpc import instance_spec
from novakit.compute.states import ACTIONS, TaskState, VmState
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.lifecycle import ctx_admin
from novakit.moves import migrations
from novakit.network import ports
from novakit.placement.allocations import move_allocations_in_session, remove_allocations_in_session

T = TaskState


class LiveFlows:
    """The conductor's live migration and evacuation (mixed into ``Conductor``); the host steps,
    the destination's choice and the rollback are ``ResizeFlow``'s."""

    db: Any
    conf: Any
    rpc: Any
    notifier: Any
    lease_until: Any
    _call: Any
    _select_destination: Any
    _roll_back: Any

    @in_cell_of("uuid")
    def live_migrate(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        t = ACTIONS[action]
        mig, source, flavor = self._take_source_claim(ctx, uuid, "live-migration", "queued")
        try:
            with actions.instance_event(self.db, ctx, uuid, "conductor_live_migrate_instance"):
                dest = self._select_destination(
                    ctx, uuid, mig, flavor, options.get("host"), source, T.MIGRATING, ("queued", "preparing")
                )
        except exceptions.NovakitError:
            self._roll_back(ctx, uuid, t, mig, events=[], fault=None)
            raise
        with self.db.reader() as session:
            spec = instance_spec(session, db_api.instance_get(session, ctx_admin(ctx), uuid))
        events: list[Any] = []
        ready = self._call(ctx, dest, "pre_live_migration", action, spec, {})
        events += ready.events
        moved: InstanceResult | None = None
        if ready.ok:
            self.db.run_in_transaction(lambda s: migrations.set_status(s, mig, "preparing", "running"))
            moved = self._call(
                ctx,
                source,
                "live_migration",
                action,
                spec,
                {"dest_host": dest, "dest_info": ready.disk_info or {}},
            )
            events += moved.events
        if moved is None or not moved.ok:  # the guest still runs on the source
            cleanup = self._call(ctx, dest, "rollback_live_migration_at_destination", action, spec, {})
            failed = moved if moved is not None else ready
            self._roll_back(ctx, uuid, t, mig, events=[*events, *cleanup.events], fault=failed.fault)
            return
        landed = self._call(
            ctx,
            dest,
            "post_live_migration_at_destination",
            action,
            spec,
            {"disk_info": moved.disk_info or {}},
        )
        # Past this point the guest runs on the destination whatever the last step said: the
        # records follow the guest; a failed last step is recorded as the action's error.

        def done(session: Session) -> None:
            remove_allocations_in_session(session, mig)
            migrations.set_status(session, mig, "running", "completed" if landed.ok else "error")
            ports.bind_host(session, [uuid], dest)
            values: dict[str, Any] = {"host": dest, "node": dest, "task_state": None}
            if landed.power_state is not None:
                values["power_state"] = landed.power_state
            db_api.instance_update(
                session,
                uuid,
                values,
                expected_task_state=[T.MIGRATING],
                expected_owner=ctx.request_id,
                fetch=False,
            )
            actions.record_outcome(
                session,
                ctx,
                uuid,
                events=[*events, *landed.events],
                fault=None if landed.ok else landed.fault,
                finish=t.record_as,
            )

        self.db.run_in_transaction(done)
        self.notifier.emit(
            f"instance.live_migration._post.{'end' if landed.ok else 'error'}", uuid, host=dest
        )

    @in_cell_of("uuid")
    def evacuate(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        t = ACTIONS[action]
        mig, source, flavor = self._take_source_claim(ctx, uuid, "evacuation", "accepted")
        try:
            with actions.instance_event(self.db, ctx, uuid, "conductor_rebuild_server"):
                dest = self._select_destination(
                    ctx,
                    uuid,
                    mig,
                    flavor,
                    options.get("host"),
                    source,
                    T.REBUILDING,
                    ("accepted", "pre-migrating"),
                )
        except exceptions.NovakitError:
            self._roll_back(ctx, uuid, t, mig, events=[], fault=None)
            raise

        def spawning(session: Session) -> tuple[Any, str]:
            db_api.instance_update(
                session,
                uuid,
                {
                    "task_state": T.REBUILD_SPAWNING,
                    "task_lease_until": self.lease_until(),
                    "host": dest,
                    "node": dest,
                },
                expected_task_state=[T.REBUILDING],
                expected_owner=ctx.request_id,
                fetch=False,
            )
            ports.bind_host(session, [uuid], dest, "BUILD")
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            return instance_spec(session, inst), inst.vm_state

        spec, old_vm_state = self.db.run_in_transaction(spawning)
        stopped = old_vm_state == VmState.STOPPED.value
        request = ComputeRequest(
            request_id=ctx.request_id,
            host=dest,
            operation="build",
            action=action,
            instances=[spec],
        )
        result = self.rpc.send(request)
        built = next((r for r in result.results if r.uuid == uuid), None) or InstanceResult(
            uuid=uuid, ok=False, fault=result.error
        )
        if built.ok and stopped:  # a stopped server is evacuated stopped, as Nova does
            off = self._call(ctx, dest, "stop", action, spec, {"timeout": 0})
            built.events += off.events
            built.power_state = off.power_state

        def done(session: Session) -> None:
            values: dict[str, Any] = {"task_state": None}
            if built.ok:
                migrations.set_status(session, mig, "pre-migrating", "done")
                ports.set_status(session, [uuid], "ACTIVE")
                values["vm_state"] = VmState.STOPPED if stopped else VmState.ACTIVE
                values["power_state"] = built.power_state if built.power_state is not None else 1
            else:  # nothing runs anywhere: in error, on its old host, with its old claim
                remove_allocations_in_session(session, uuid)
                move_allocations_in_session(session, mig, uuid)
                migrations.set_status(session, mig, "pre-migrating", "error")
                ports.bind_host(session, [uuid], source)
                values.update(vm_state=VmState.ERROR, host=source, node=source)
            db_api.instance_update(
                session,
                uuid,
                values,
                expected_task_state=[T.REBUILD_SPAWNING],
                expected_owner=ctx.request_id,
                fetch=False,
            )
            actions.record_outcome(
                session,
                ctx,
                uuid,
                events=built.events,
                fault=None if built.ok else built.fault,
                finish=t.record_as,
            )

        self.db.run_in_transaction(done)
        self.notifier.emit(f"instance.evacuate.{'end' if built.ok else 'error'}", uuid, host=dest)

    def _take_source_claim(
        self, ctx: RequestContext, uuid: str, kind: str, status: str
    ) -> tuple[str, str, dict[str, Any]]:
        """Record the move and hand the instance's claim on its host to it, in one transaction."""

        def write(session: Session) -> tuple[str, str, dict[str, Any]]:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            m = migrations.create(session, ctx, inst, kind, dict(inst.flavor or {}), status=status)
            move_allocations_in_session(session, uuid, m.uuid)
            return m.uuid, str(inst.host), dict(inst.flavor or {})

        out: tuple[str, str, dict[str, Any]] = self.db.run_in_transaction(write)
        return out
