"""Interrupted tasks: finished or rolled back by the guest's power state, as Nova's ``_init_instance``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.cells.registry import Cell
from novakit.compute import actions
from novakit.compute.states import ACTIONS, RECOVERY_RULES, PowerState, Recovery, TaskState, VmState
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import Instance, InstanceAction
from novakit.heal.base import (
    LOG,
    LOST_RACE,
    Correction,
    HealerBase,
    _power,
    _power_state,
    _Seen,
    recover_event,
    skipped,
)
from novakit.heal.moves import MOVE_TASKS, is_unshelve
from novakit.host.faults import fault_from_exception
from novakit.host.messages import (
    Event,
    InstanceResult,
)

#: task_state -> (the state table's action, heal's rule): read from the rows (each row's
#: ``recovery``, next to the action it recovers), not a copy of them
TASK_RULES: Mapping[str, tuple[str, Recovery]] = RECOVERY_RULES
_STEP_SAYS = {
    "finish": "the guest shows it happened: recorded as done",
    "retry": "run again on the host",
    "retry_hard": "the guest is not running: rebooted hard instead",
    "roll_back": "it did not happen: the task is cleared and the server stays as it was",
    "error": "an interrupted {action} leaves the server in error",
}


def _expected_end(step: str, action: str | None, vm_state: str) -> str:
    """Where a recovery step leaves the instance, for a dry run's report."""
    if step in ("finish", "retry", "retry_hard") and action is not None:
        end = ACTIONS["reboot_hard" if step == "retry_hard" else action].end_vm_state
        return end.value if end is not None else vm_state
    return VmState.ERROR.value if step in ("vanished", "error") else vm_state


class TaskRecovery(HealerBase):
    """Take over a task whose owner is gone and end it by ``TASK_RULES``."""

    # ------------------------------------------------------------------ interrupted tasks

    def _recover(self, s: _Seen, reported: int | None, host: str | None, dry_run: bool) -> Correction:
        """Finish or roll back ``s``'s task, whose owner is gone, by ``TASK_RULES``.

        ``reported``: the guest's power state on ``host``, None when the host has no guest
        for it (or it has no host).
        """
        task = str(s.task_state)
        power = None if reported is None else _power_state(reported)
        moving = task in MOVE_TASKS or is_unshelve(task, s.vm_state)
        if moving or (task == TaskState.REBUILDING.value and self._evacuating(s.uuid)):
            return self._recover_move(s, power, host, dry_run)  # novakit.heal.moves
        rule = TASK_RULES.get(task)
        action: str | None = None
        if rule is None:
            step, says = "clear", "an unknown task: cleared, the power state recorded"
        else:
            action, recovery = rule
            if power is None and None not in recovery.by_power:
                step, says = "vanished", "the guest vanished: the server is in error"
            else:
                step = recovery.by_power.get(power, recovery.otherwise)
                says = _STEP_SAYS[step].format(action=action)
        c = Correction(
            kind="task_recovered",
            instance=s.uuid,
            host=host,
            before=f"{s.vm_state}/{task}",
            after=_expected_end(step, action, s.vm_state),
            detail=f"the owner of its {task} task ({s.task_owner or 'unknown'}) is gone and the guest "
            f"is {_power(power) if power is not None else 'not there'}: {says}",
        )
        if dry_run:
            return c
        if step == "retry_hard":  # Nova: a soft reboot whose guest stopped became a hard reboot
            action, step = "reboot_hard", "retry"
        options = self._retry_options(action)
        try:
            task_ctx = self.db.run_in_transaction(
                lambda session: self._take_over(session, s, action, options)
            )
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound) as exc:
            c.error = f"skipped: the instance changed meanwhile ({exc.format_message()})"
            return c
        event = recover_event(c.detail, ok=step in ("finish", "retry"), host=host)
        if step in ("vanished", "clear"):
            self._end_task(s, task_ctx, action, event, vanished=step == "vanished", power=power)
        else:
            assert action is not None
            res = self._outcome(s, task_ctx, action, step, power, options, event)
            self.conductor.actions.finish_action(
                task_ctx, s.uuid, action, res, host, owner=self.ctx.request_id
            )
        c.applied = True
        c.after = self._state_now(s.uuid)
        return c

    _recover_move: Any

    def _evacuating(self, uuid: str) -> bool:
        from novakit.moves import migrations

        with self.db.reader() as session:
            m = migrations.in_progress(session, uuid)
        return m is not None and m.migration_type == "evacuation"

    def _take_over(
        self, session: Session, s: _Seen, action: str | None, options: dict[str, Any]
    ) -> RequestContext:
        """Make heal the task's owner (only if its owner and expired lease are still as read);
        returns the context of the action the task belongs to, to record its outcome in."""
        values: dict[str, Any] = {
            "task_owner": self.ctx.request_id,
            "task_lease_until": self.conductor.lease_until(options.get("timeout") or 0),
        }
        if action is not None and s.task_state not in ACTIONS[action].passes:
            values["task_state"] = ACTIONS[action].passes[0]  # a soft reboot turned hard
        db_api.instance_update(
            session,
            s.uuid,
            values,
            expected_task_state=[s.task_state],
            expected_owner=s.task_owner,
            lease_expired_at=self.clock(),
        )
        record_as = ACTIONS[action].record_as if action is not None else "heal"
        row = actions.unfinished_action(session, s.uuid, record_as)
        if row is not None:
            return self.ctx.with_request_id(row.request_id)
        actions.action_start(session, self.ctx, s.uuid, record_as)
        return self.ctx

    def _retry_options(self, action: str | None) -> dict[str, Any]:
        """The host options an operation run again takes (its row's ``retry_options``)."""
        t = ACTIONS.get(action) if action is not None else None
        return t.retry_options(self.conf) if t is not None and t.retry_options is not None else {}

    def _outcome(
        self,
        s: _Seen,
        task_ctx: RequestContext,
        action: str,
        step: str,
        power: PowerState | None,
        options: dict[str, Any],
        event: Event,
    ) -> InstanceResult:
        """What the task came to: the guest's word, or the host's answer to doing it again."""
        power_state = int(power) if power is not None else None
        if step == "retry":
            request = self.conductor.prepare_action(task_ctx, s.uuid, action, options)
            if request is not None:
                request.request_id = self.ctx.request_id
                result = self.rpc.send(request)
                res = next((r for r in result.results if r.uuid == s.uuid), None)
                res = res or InstanceResult(uuid=s.uuid, ok=False, fault=result.error)
                return res.model_copy(update={"events": [event, *res.events]})
            step = "finish"  # a delete of a server no host holds: nothing to do on a host
        fault = None
        if step == "error":
            exc = exceptions.ComputeError(
                reason=f"{action} of instance {s.uuid} was interrupted (its owner, "
                f"{s.task_owner or 'unknown'}, is gone); set to error state"
            )
            fault = fault_from_exception(exc, s.host)
            fault.details = None  # nothing raised: an owner went away
        return InstanceResult(
            uuid=s.uuid, ok=step == "finish", power_state=power_state, events=[event], fault=fault
        )

    def _end_task(
        self,
        s: _Seen,
        task_ctx: RequestContext,
        action: str | None,
        event: Event,
        *,
        vanished: bool,
        power: PowerState | None,
    ) -> None:
        """Clear a task heal has taken over: in error if its guest vanished, else as it was."""
        values: dict[str, Any] = {"task_state": None}
        fault = None
        if vanished:
            values.update(vm_state=VmState.ERROR, power_state=int(PowerState.NOSTATE))
            fault = fault_from_exception(exceptions.InstanceNotFound(instance_id=s.uuid), s.host)
            fault.message = (
                f"The guest of instance {s.uuid} vanished from host {s.host}; set to error by heal"
            )
        elif power is not None:
            values["power_state"] = int(power)
        record_as = ACTIONS[action].record_as if action is not None else "heal"

        def write(session: Session) -> None:
            db_api.instance_update(session, s.uuid, values, expected_owner=self.ctx.request_id)
            actions.record_outcome(session, task_ctx, s.uuid, events=[event], fault=fault, finish=record_as)

        try:
            self.db.run_in_transaction(write)
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound) as exc:
            LOG.info("instance %s changed while heal ended its task: %s", s.uuid, exc.format_message())

    def _state_now(self, uuid: str) -> str:
        with self.db.reader() as session:
            inst = db_api.instance_get(session, self.ctx, uuid, include_deleted=True)
            return f"{inst.vm_state}/{_power(inst.power_state)}"

    def _abandoned_actions(self, dry_run: bool) -> list[Correction]:
        """Finish the actions whose request ended without recording an outcome.

        An action belongs to a task only while its request owns that task; one whose
        request was killed after another request took its instance over (a delete over
        a pause, a second delete of a stuck one) or that never had a task (a lock
        killed before its finish) would otherwise stay open for ever. Only actions
        started longer than a lease ago: a request that just lost a race records its
        own finish a moment later.
        """
        older = self.clock() - dt.timedelta(seconds=self.conf.compute.build_timeout)
        out = []
        for cell, rows in self._gather(lambda cell, session: _open_actions(session, older)):
            for uuid, action, request_id, owner, task, vm_state, deleted in rows:
                running = not deleted and (task is not None or vm_state == VmState.BUILDING.value)
                if (running and owner == request_id) or self._is_copy(cell, uuid):
                    continue  # its own task, still running (or left to a later heal); or a copy
                c = Correction(
                    kind="abandoned_action",
                    instance=uuid,
                    before=f"{action} ({request_id}) open",
                    after="finished",
                    detail=f"request {request_id} ended without recording what became of its {action}",
                )
                if not dry_run and not self._finish_abandoned(cell, c, uuid, action, request_id):
                    continue  # its cell stopped answering: left as it is, the cell reported
                out.append(c)
        return out

    def _finish_abandoned(self, cell: Cell, c: Correction, uuid: str, action: str, request_id: str) -> bool:
        """Finish one abandoned action in its request's name (``c`` records how that went);
        False if its cell stopped answering."""
        message = f"Abandoned: its request ended without an outcome; finished by heal {self.ctx.request_id}"

        def write(session: Session) -> bool:
            actions.action_finish(
                session, self.ctx.with_request_id(request_id), uuid, action, message=message
            )
            return True

        try:
            if not self._in_cell(cell, self.db.run_in_transaction, write):
                return False
            c.applied = True
        except LOST_RACE as exc:
            skipped(c, exc)
        return True


def _open_actions(session: Session, older: dt.datetime) -> list[Any]:
    """The actions still open that started before ``older``, each with its instance's task and
    state, oldest first."""
    return list(
        session.execute(
            select(
                InstanceAction.instance_uuid,
                InstanceAction.action,
                InstanceAction.request_id,
                Instance.task_owner,
                Instance.task_state,
                Instance.vm_state,
                Instance.deleted,
            )
            .join(Instance, Instance.uuid == InstanceAction.instance_uuid)
            .where(InstanceAction.finish_time.is_(None), InstanceAction.start_time < older)
            .order_by(InstanceAction.id)
        ).all()
    )
