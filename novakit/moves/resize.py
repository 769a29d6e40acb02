"""Resize and cold migration: a server moved to another host, its claim right on both at every step.

The API has started the action (``resize`` or ``migrate``: task ``resize_prep``, its owner and
lease, the instance action). Then, in the conductor:

1. **prep** (``conductor_migrate_server``): one transaction records the migration and hands the
   instance's claim on its host to it (Nova's migration-based allocations). The scheduler picks
   the destination with the new flavor, away from the source and in the server's cell, with
   the filters of a boot (its server group, its networks), and claims it for the instance; the
   migration records its destination in that claim's transaction.
2. **source** (``resize_migrating`` -> ``resize_migrated``): ``migrate_disk_and_power_off``.
3. **destination** (``resize_finish``): ``finish_migration``. The server is then on the
   destination with the new flavor, ``resized`` (VERIFY_RESIZE), its ports bound there; the
   migration is ``finished`` and still holds the source's claim, and the source keeps the guest.
4. **confirm** removes what the source kept and the migration's claim (``confirmed``);
   **revert** removes the destination's guest and claim, brings the guest back on the source
   and hands the claim back to the instance (``reverted``), active or stopped as it was.

A failure rolls back, as Nova's live migration does: the destination's claim goes, the source's
returns to the instance, the migration is ``error``, and the server is where it was, as it was,
with a fault. No valid host is such a failure, explained. Only when the rollback itself fails
(the source cannot bring the guest back) is the server left in ``error``.

A resize to the same host is not offered (Nova's ``allow_resize_to_same_host`` defaults to off).
Volumes live in one host's pool, so a server with volumes attached does not move.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.cells.registry import in_cell_of, locate
from novakit.compute import actions, flavors
from novakit.compute.messages import ComputeRequest, InstanceResult
from novakit.compute.rpc import instance_spec
from novakit.compute.states import ACTIONS, PowerState, TaskState, Transition, VmState
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import RequestSpec
from novakit.lifecycle import ctx_admin
from novakit.moves import migrations
from novakit.network import ports
from novakit.placement.allocations import move_allocations_in_session, remove_allocations_in_session

LOG = logging.getLogger(__name__)

T = TaskState


def flavor_values(snap: dict[str, Any]) -> dict[str, Any]:
    """The instance columns that follow its flavor."""
    return {
        "flavor": snap,
        "vcpus": int(snap.get("vcpus", 0)),
        "memory_mb": int(snap.get("memory_mb", 0)),
        "root_gb": int(snap.get("root_gb", 0)),
        "ephemeral_gb": int(snap.get("ephemeral_gb", 0)),
    }


class ResizeFlow:
    """The conductor's resize, cold migration, confirm and revert (mixed into ``Conductor``)."""

    # the conductor's (``novakit.conductor.Conductor``)
    db: Any
    conf: Any
    rpc: Any
    notifier: Any
    scheduler: Any
    lease_until: Any

    # --- resize / migrate ------------------------------------------------------------

    @in_cell_of("uuid")
    def resize(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        t = ACTIONS[action]
        new_flavor: dict[str, Any] = options["flavor"]
        kind = "resize" if action == "resize" else "migration"

        def prep(session: Session) -> tuple[str, str, str]:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            m = migrations.create(session, ctx, inst, kind, new_flavor)
            move_allocations_in_session(session, uuid, m.uuid)
            return m.uuid, str(inst.host), inst.vm_state

        mig, source, old_vm_state = self.db.run_in_transaction(prep)
        try:
            with actions.instance_event(self.db, ctx, uuid, "conductor_migrate_server"):
                dest = self._select_destination(ctx, uuid, mig, new_flavor, options.get("host"), source)
        except exceptions.NovakitError as exc:
            LOG.info("%s of %s: no destination: %s", action, uuid, exc.format_message())
            self._roll_back(ctx, uuid, t, mig, events=[], fault=None)
            raise
        self.notifier.emit(f"instance.{t.notify_as}_prep.end", uuid, host=source)

        self._step(ctx, uuid, T.RESIZE_PREP, T.RESIZE_MIGRATING)
        with self.db.reader() as session:
            spec = instance_spec(session, db_api.instance_get(session, ctx_admin(ctx), uuid))
        spec.flavor = flavors.spec(new_flavor)
        power_on = old_vm_state != VmState.STOPPED.value
        handed = self._call(ctx, source, "migrate_disk_and_power_off", action, spec, {"dest_host": dest})
        if not handed.ok:  # the source left the guest as it was
            self._roll_back(ctx, uuid, t, mig, events=handed.events, fault=handed.fault)
            return

        def migrated(session: Session) -> None:
            self._step_in(session, ctx, uuid, T.RESIZE_MIGRATING, T.RESIZE_MIGRATED)
            migrations.set_status(session, mig, "migrating", "post-migrating")
            actions.record_host_events(session, ctx, uuid, handed.events)

        self.db.run_in_transaction(migrated)
        self._step(ctx, uuid, T.RESIZE_MIGRATED, T.RESIZE_FINISH)
        finished = self._call(
            ctx,
            dest,
            "finish_migration",
            action,
            spec,
            {"disk_info": handed.disk_info or {}, "power_on": power_on},
        )
        if not finished.ok:  # nothing is left on the destination: the guest goes back to the source
            back = self._call(ctx, source, "finish_revert_migration", action, spec, {"power_on": power_on})
            self._roll_back(
                ctx,
                uuid,
                t,
                mig,
                events=[*finished.events, *back.events],
                fault=finished.fault if back.ok else (back.fault or finished.fault),
                error=not back.ok,
            )
            return

        def done(session: Session) -> None:
            db_api.instance_update(
                session,
                uuid,
                {
                    "host": dest,
                    "node": dest,
                    **flavor_values(new_flavor),
                    "vm_state": VmState.RESIZED,
                    "task_state": None,
                    "power_state": finished.power_state
                    if finished.power_state is not None
                    else int(PowerState.RUNNING if power_on else PowerState.SHUTDOWN),
                },
                expected_task_state=[T.RESIZE_FINISH],
                expected_owner=ctx.request_id,
                fetch=False,
            )
            migrations.set_status(session, mig, "post-migrating", "finished")
            ports.bind_host(session, [uuid], dest)
            actions.record_outcome(session, ctx, uuid, events=finished.events, finish=t.record_as)

        self.db.run_in_transaction(done)
        self.notifier.emit(f"instance.{t.notify_as}.end", uuid, host=dest)

    def _select_destination(
        self,
        ctx: RequestContext,
        uuid: str,
        mig: str,
        new_flavor: dict[str, Any],
        host: str | None,
        source: str,
        task: TaskState = T.RESIZE_PREP,
        statuses: tuple[str, str] = ("pre-migrating", "migrating"),
    ) -> str:
        """Scheduled as a boot is, with the new flavor, away from ``source`` and in the server's
        cell; the claim is the instance's, and the migration learns its destination with it
        (its status goes ``statuses[0]`` -> ``statuses[1]``; the task ``task`` is expected)."""
        spec = self.move_spec(ctx, uuid, flavor=new_flavor, host=host, source=source)

        def on_claimed(session: Session, claimed: dict[str, list[Any]]) -> None:
            chosen = claimed[uuid][0].host
            migrations.set_status(session, mig, statuses[0], statuses[1], dest_compute=chosen)
            db_api.instance_update(
                session,
                uuid,
                {"task_lease_until": self.lease_until()},
                expected_task_state=[task],
                expected_owner=ctx.request_id,
                fetch=False,
            )

        selections = self.scheduler.select_destinations(
            spec, [uuid], recheck_quota=False, on_claimed=on_claimed
        )
        return str(selections[0][0].host)

    def move_spec(
        self,
        ctx: RequestContext,
        uuid: str,
        *,
        flavor: dict[str, Any] | None = None,
        image: Any = None,
        host: str | None = None,
        source: str | None = None,
    ) -> Any:
        """What the scheduler is asked for a server that moves (or comes back from shelved): its
        boot's request (server group, networks, hints) with the flavor or image it moves with,
        for one server, never back onto ``source`` and never into another cell (a move keeps its
        records in their cell)."""
        from novakit.scheduler.request_spec import RequestSpec as SchedSpec

        with self.db.reader() as session:
            row = session.execute(select(RequestSpec).where(RequestSpec.instance_uuid == uuid)).scalar_one()
        spec = SchedSpec.model_validate(row.spec)
        spec.request_id = ctx.request_id
        if flavor is not None:
            spec.flavor = flavors.spec(flavor)
        if image is not None:
            spec.image = image
        spec.num_instances, spec.min_count = 1, None
        spec.new_root_volume_gb, spec.boot_volume = None, None
        spec.requested_host = host
        cell = locate(self.db.cells, ctx_admin(ctx), uuid)
        spec.ignore_hosts = sorted(
            {*([source] if source else []), *migrations.hosts_outside_cell(self.db, cell.id)}
        )
        return spec

    def plan_move(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> str | None:
        """Where a move would go, as its dry run (check mode) answers: the scheduler's choice with
        nothing claimed, or NoValidHost with its explanation. None: the move needs no new host
        (confirm, revert, a snapshot, unshelving a server that kept its host)."""
        from novakit.compute import images

        flow = ACTIONS[action].flow
        with self.db.reader() as session:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            source, flavor = inst.host, dict(inst.flavor or {})
            shelved = images.shelved_image_of(session, uuid) if flow == "unshelve" else None
        if flow in ("resize", "live_migrate", "evacuate"):
            spec = self.move_spec(
                ctx, uuid, flavor=options.get("flavor") or flavor, host=options.get("host"), source=source
            )
        elif flow == "unshelve" and source is None and shelved is not None:
            spec = self.move_spec(ctx, uuid, image=images.spec(shelved))
        else:
            return None
        choice = self.scheduler.select_destinations(spec, [uuid], dry_run=True, recheck_quota=False)
        return str(choice[0][0].host)

    # --- confirm / revert -------------------------------------------------------------

    @in_cell_of("uuid")
    def confirm_resize(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        t = ACTIONS[action]

        def begin(session: Session) -> tuple[str, str, str]:
            m = migrations.in_progress(session, uuid)
            if m is None or m.status != "finished":
                raise exceptions.InstanceInvalidState(
                    action=action,
                    instance_uuid=uuid,
                    vm_state=VmState.RESIZED.value,
                    task_state=f"migration {m.status if m else 'missing'}",
                )
            # Still resized with no task (a revert starts one), and the migration's guard.
            db_api.instance_update(
                session,
                uuid,
                {},
                expected_vm_state=[VmState.RESIZED],
                expected_task_state=[None],
                fetch=False,
            )
            migrations.set_status(session, m.uuid, "finished", "confirming")
            return m.uuid, str(m.source_compute), m.old_vm_state

        try:
            mig, source, old_vm_state = self.db.run_in_transaction(begin)
        except exceptions.NovakitError as exc:
            self._finish_refused(ctx, uuid, t, exc)
            raise
        with self.db.reader() as session:
            spec = instance_spec(session, db_api.instance_get(session, ctx_admin(ctx), uuid))
        res = self._call(ctx, source, "confirm_migration", action, spec, {})

        def done(session: Session) -> None:
            if res.ok:
                remove_allocations_in_session(session, mig)
                migrations.set_status(session, mig, "confirming", "confirmed")
                end = VmState.STOPPED if old_vm_state == VmState.STOPPED.value else VmState.ACTIVE
            else:  # the source kept the guest: its claim stays with the migration, for delete or heal
                migrations.set_status(session, mig, "confirming", "error")
                end = VmState.ERROR
            db_api.instance_update(
                session,
                uuid,
                {"vm_state": end},
                expected_vm_state=[VmState.RESIZED],
                expected_task_state=[None],
                fetch=False,
            )
            actions.record_outcome(
                session, ctx, uuid, events=res.events, fault=None if res.ok else res.fault, finish=t.record_as
            )

        self.db.run_in_transaction(done)
        self.notifier.emit(f"instance.{t.notify_as}.{'end' if res.ok else 'error'}", uuid, host=source)

    @in_cell_of("uuid")
    def revert_resize(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        t = ACTIONS[action]

        def begin(session: Session) -> tuple[str, str, str, dict[str, Any]]:
            m = migrations.in_progress(session, uuid)
            if m is None or m.status != "finished":
                raise exceptions.InstanceInvalidState(
                    action=action,
                    instance_uuid=uuid,
                    vm_state=VmState.RESIZED.value,
                    task_state=f"migration {m.status if m else 'missing'}",
                )
            migrations.set_status(session, m.uuid, "finished", "reverting")
            return m.uuid, str(m.source_compute), m.old_vm_state, dict(m.old_flavor)

        try:
            mig, source, old_vm_state, old_flavor = self.db.run_in_transaction(begin)
        except exceptions.NovakitError as exc:
            self._finish_refused(ctx, uuid, t, exc, clear=[T.RESIZE_REVERTING])
            raise
        with self.db.reader() as session:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            dest = str(inst.host)
            spec = instance_spec(session, inst)
        gone = self._call(ctx, dest, "revert_migration", action, spec, {})
        back: InstanceResult | None = None
        power_on = old_vm_state != VmState.STOPPED.value
        if gone.ok:
            spec.flavor = flavors.spec(old_flavor)
            back = self._call(ctx, source, "finish_revert_migration", action, spec, {"power_on": power_on})
        ok = back is not None and back.ok

        def done(session: Session) -> None:
            values: dict[str, Any] = {"task_state": None}
            if ok:
                assert back is not None
                remove_allocations_in_session(session, uuid)
                move_allocations_in_session(session, mig, uuid)
                migrations.set_status(session, mig, "reverting", "reverted")
                ports.bind_host(session, [uuid], source)
                values.update(
                    host=source,
                    node=source,
                    vm_state=old_vm_state,
                    power_state=back.power_state
                    if back.power_state is not None
                    else int(PowerState.RUNNING if power_on else PowerState.SHUTDOWN),
                    **flavor_values(old_flavor),
                )
            else:
                migrations.set_status(session, mig, "reverting", "error")
                values["vm_state"] = VmState.ERROR
                if gone.ok:  # the destination's guest is gone: so is its claim, the server is the source's
                    remove_allocations_in_session(session, uuid)
                    move_allocations_in_session(session, mig, uuid)
                    values.update(host=source, node=source, **flavor_values(old_flavor))
            db_api.instance_update(
                session,
                uuid,
                values,
                expected_task_state=[T.RESIZE_REVERTING],
                expected_owner=ctx.request_id,
                fetch=False,
            )
            failed = back if back is not None and not back.ok else gone
            actions.record_outcome(
                session,
                ctx,
                uuid,
                events=[*gone.events, *(back.events if back is not None else [])],
                fault=None if ok else failed.fault,
                finish=t.record_as,
            )

        self.db.run_in_transaction(done)
        self.notifier.emit(f"instance.{t.notify_as}.{'end' if ok else 'error'}", uuid, host=source)

    # --- the steps' plumbing --------------------------------------------------------

    def _call(
        self,
        ctx: RequestContext,
        host: str,
        operation: str,
        action: str,
        spec: Any,
        options: dict[str, Any],
    ) -> InstanceResult:
        """One host's step of the move; a host that cannot be reached is a failed step."""
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

    def _step(self, ctx: RequestContext, uuid: str, expected: TaskState, task: TaskState) -> None:
        self.db.run_in_transaction(lambda s: self._step_in(s, ctx, uuid, expected, task))

    def _step_in(
        self, session: Session, ctx: RequestContext, uuid: str, expected: TaskState, task: TaskState
    ) -> None:
        """The move's next task state, guarded by the last and by its owner; the lease renewed
        for the host call that follows."""
        db_api.instance_update(
            session,
            uuid,
            {"task_state": task, "task_lease_until": self.lease_until()},
            expected_task_state=[expected],
            expected_owner=ctx.request_id,
            fetch=False,
        )

    def _roll_back(
        self,
        ctx: RequestContext,
        uuid: str,
        t: Transition,
        mig: str,
        *,
        events: list[Any],
        fault: Any,
        error: bool = False,
    ) -> None:
        """The move undone: the destination's claim (if any) goes, the source's returns to the
        instance, the migration is error, the server where it was (``error``: in error)."""

        def write(session: Session) -> None:
            remove_allocations_in_session(session, uuid)
            move_allocations_in_session(session, mig, uuid)
            migrations.set_status(session, mig, migrations.IN_PROGRESS, "error")
            values: dict[str, Any] = {"task_state": None}
            if error:
                values["vm_state"] = VmState.ERROR
            db_api.instance_update(
                session,
                uuid,
                values,
                expected_task_state=list(t.passes),
                expected_owner=ctx.request_id,
                fetch=False,
            )
            actions.record_outcome(session, ctx, uuid, events=events, fault=fault, finish=t.record_as)

        self.db.run_in_transaction(write)
        self.notifier.emit(f"instance.{t.notify_as}.error", uuid)

    def _finish_refused(
        self,
        ctx: RequestContext,
        uuid: str,
        t: Transition,
        exc: exceptions.NovakitError,
        clear: list[TaskState] | None = None,
    ) -> None:
        """A confirm or revert that lost to another (the migration was no longer finished):
        its action ends with the reason, and the task it set, if any, is cleared."""

        def write(session: Session) -> None:
            if clear:
                db_api.instance_update(
                    session,
                    uuid,
                    {"task_state": None},
                    expected_task_state=clear,
                    expected_owner=ctx.request_id,
                    fetch=False,
                )
            actions.action_finish(session, ctx, uuid, t.record_as, message=exc.format_message()[:255])

        self.db.run_in_transaction(write)
