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

from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.catalog import flavors
from novakit.cells.registry import in_cell_of
from novakit.compute import actions
from novakit.compute.rpc import instance_spec
from novakit.compute.states import ACTIONS, PowerState, TaskState, Transition, VmState
from novakit.conductor.core import Services, ctx_admin
from novakit.conductor.flows.base import Flow
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.fleet import aggregates as fleet_aggregates
from novakit.host.messages import InstanceResult
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


class Resize(Flow):
    """A resize or a cold migration (the ``resize`` and ``migrate`` rows): prep, source, destination."""

    @in_cell_of("uuid")
    def run(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        t = ACTIONS[action]
        new_flavor: dict[str, Any] = options["flavor"]
        mig, source, old_vm_state = self._prep(ctx, uuid, action, new_flavor)
        dest = self.choose_destination(ctx, uuid, t, mig, new_flavor, options.get("host"), source)
        self.services.notifier.emit(f"instance.{t.notify_as}_prep.end", uuid, host=source)

        self.services.step(ctx, uuid, T.RESIZE_PREP, T.RESIZE_MIGRATING)
        spec = self.spec_of(ctx, uuid)
        spec.flavor = flavors.spec(new_flavor)
        power_on = old_vm_state != VmState.STOPPED.value
        call = self.services.caller(ctx, action, spec)
        handed = call(source, "migrate_disk_and_power_off", {"dest_host": dest})
        if not handed.ok:  # the source left the guest as it was
            self.roll_back(ctx, uuid, t, mig, events=handed.events, fault=handed.fault)
            return

        self._handed_over(ctx, uuid, mig, handed)
        self.services.step(ctx, uuid, T.RESIZE_MIGRATED, T.RESIZE_FINISH)
        finished = call(dest, "finish_migration", {"disk_info": handed.disk_info or {}, "power_on": power_on})
        if not finished.ok:  # nothing is left on the destination: the guest goes back to the source
            self._back_to_source(ctx, uuid, t, mig, source, spec, finished, power_on)
            return

        def done(session: Session) -> None:
            values = {
                "host": dest,
                "node": dest,
                **flavor_values(new_flavor),
                "vm_state": VmState.RESIZED,
                "task_state": None,
                "power_state": _power_after(finished, power_on),
            }
            db_api.instance_update(
                session,
                uuid,
                fleet_aggregates.with_zone(session, self.services.conf, values),
                expected_task_state=[T.RESIZE_FINISH],
                expected_owner=ctx.request_id,
                fetch=False,
            )
            migrations.set_status(session, mig, "post-migrating", "finished")
            ports.bind_host(session, [uuid], dest)
            actions.record_outcome(session, ctx, uuid, events=finished.events, finish=t.record_as)

        self.db.run_in_transaction(done)
        self.services.notifier.emit(f"instance.{t.notify_as}.end", uuid, host=dest)

    def _prep(
        self, ctx: RequestContext, uuid: str, action: str, new_flavor: dict[str, Any]
    ) -> tuple[str, str, str]:
        """The migration recorded, holding the instance's claim on its source. Returns the
        migration, the source, and the server's state before the move."""
        kind = "resize" if action == "resize" else "migration"

        def prep(session: Session) -> tuple[str, str, str]:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            m = migrations.create(session, ctx, inst, kind, new_flavor)
            move_allocations_in_session(session, uuid, m.uuid)
            return m.uuid, str(inst.host), inst.vm_state

        return self.db.run_in_transaction(prep)

    def _handed_over(self, ctx: RequestContext, uuid: str, mig: str, handed: InstanceResult) -> None:
        """The source let its guest go: the task and the migration say so, with its events."""

        def migrated(session: Session) -> None:
            self.services.step_in(session, ctx, uuid, T.RESIZE_MIGRATING, T.RESIZE_MIGRATED)
            migrations.set_status(session, mig, "migrating", "post-migrating")
            actions.record_host_events(session, ctx, uuid, handed.events)

        self.db.run_in_transaction(migrated)

    def _back_to_source(
        self,
        ctx: RequestContext,
        uuid: str,
        t: Transition,
        mig: str,
        source: str,
        spec: Any,
        finished: InstanceResult,
        power_on: bool,
    ) -> None:
        """The destination failed: the source brings its guest back and the move rolls back; the
        server is in error only when the source cannot bring it back."""
        back = self.services.call(
            ctx, source, "finish_revert_migration", t.action, spec, {"power_on": power_on}
        )
        self.roll_back(
            ctx,
            uuid,
            t,
            mig,
            events=[*finished.events, *back.events],
            fault=finished.fault if back.ok else (back.fault or finished.fault),
            error=not back.ok,
        )

    def dry_run(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> str | None:
        return self.plan_elsewhere(ctx, uuid, options)


class ConfirmResize(Flow):
    """A resized server's source lets its copy go, and the migration its claim."""

    @in_cell_of("uuid")
    def run(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        t = ACTIONS[action]

        def begin(session: Session) -> tuple[str, str, str]:
            m = _finished_migration(session, uuid, action)
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
            _finish_refused(self.services, ctx, uuid, t, exc)
            raise
        spec = self.spec_of(ctx, uuid)
        res = self.services.call(ctx, source, "confirm_migration", action, spec, {})

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
            actions.record_outcome(session, ctx, uuid, answer=res, finish=t.record_as)

        self.db.run_in_transaction(done)
        self.services.notifier.emit(
            f"instance.{t.notify_as}.{'end' if res.ok else 'error'}", uuid, host=source
        )


class RevertResize(Flow):
    """A resized server goes back to its source: the destination's guest and claim go."""

    @in_cell_of("uuid")
    def run(self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any]) -> None:
        t = ACTIONS[action]

        def begin(session: Session) -> tuple[str, str, str, dict[str, Any]]:
            m = _finished_migration(session, uuid, action)
            migrations.set_status(session, m.uuid, "finished", "reverting")
            return m.uuid, str(m.source_compute), m.old_vm_state, dict(m.old_flavor)

        try:
            mig, source, old_vm_state, old_flavor = self.db.run_in_transaction(begin)
        except exceptions.NovakitError as exc:
            _finish_refused(self.services, ctx, uuid, t, exc, clear=[T.RESIZE_REVERTING])
            raise
        with self.db.reader() as session:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            dest = str(inst.host)
            spec = instance_spec(session, inst)
        gone = self.services.call(ctx, dest, "revert_migration", action, spec, {})
        back: InstanceResult | None = None
        power_on = old_vm_state != VmState.STOPPED.value
        if gone.ok:
            spec.flavor = flavors.spec(old_flavor)
            back = self.services.call(
                ctx, source, "finish_revert_migration", action, spec, {"power_on": power_on}
            )
        ok = back is not None and back.ok

        def done(session: Session) -> None:
            if back is not None and back.ok:
                values = _back_on_source(session, uuid, mig, source, old_vm_state, old_flavor)
                values["power_state"] = _power_after(back, power_on)
            else:
                values = _revert_failed(session, uuid, mig, source, old_flavor, dest_gone=gone.ok)
            fleet_aggregates.with_zone(session, self.services.conf, values)
            failed = back if back is not None and not back.ok else gone
            actions.end_task(
                session,
                ctx,
                uuid,
                values,
                [T.RESIZE_REVERTING],
                events=[*gone.events, *(back.events if back is not None else [])],
                fault=None if ok else failed.fault,
                finish=t.record_as,
            )

        self.db.run_in_transaction(done)
        self.services.notifier.emit(f"instance.{t.notify_as}.{'end' if ok else 'error'}", uuid, host=source)


def _finished_migration(session: Session, uuid: str, action: str) -> Any:
    """The server's migration, which a confirm or a revert needs ``finished``."""
    m = migrations.in_progress(session, uuid)
    if m is None or m.status != "finished":
        raise exceptions.InstanceInvalidState(
            action=action,
            instance_uuid=uuid,
            vm_state=VmState.RESIZED.value,
            task_state=f"migration {m.status if m else 'missing'}",
        )
    return m


def _power_after(res: InstanceResult, power_on: bool) -> int:
    """The power state a host reported after a move's last step, else the one it was asked for."""
    if res.power_state is not None:
        return res.power_state
    return int(PowerState.RUNNING if power_on else PowerState.SHUTDOWN)


def _back_on_source(
    session: Session, uuid: str, mig: str, source: str, old_vm_state: str, old_flavor: dict[str, Any]
) -> dict[str, Any]:
    """A revert that brought the guest back: the claim, the ports and the server the source's
    again, as they were; the migration ``reverted``. Returns the instance's values."""
    remove_allocations_in_session(session, uuid)
    move_allocations_in_session(session, mig, uuid)
    migrations.set_status(session, mig, "reverting", "reverted")
    ports.bind_host(session, [uuid], source)
    return {
        "task_state": None,
        "host": source,
        "node": source,
        "vm_state": old_vm_state,
        **flavor_values(old_flavor),
    }


def _revert_failed(
    session: Session, uuid: str, mig: str, source: str, old_flavor: dict[str, Any], dest_gone: bool
) -> dict[str, Any]:
    """A revert that failed: the migration and the server in error. Once the destination's
    guest is gone, so is its claim, and the server is the source's."""
    migrations.set_status(session, mig, "reverting", "error")
    values: dict[str, Any] = {"task_state": None, "vm_state": VmState.ERROR}
    if dest_gone:
        remove_allocations_in_session(session, uuid)
        move_allocations_in_session(session, mig, uuid)
        values.update(host=source, node=source, **flavor_values(old_flavor))
    return values


def _finish_refused(
    services: Services,
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

    services.db.run_in_transaction(write)
