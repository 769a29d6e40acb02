"""Builds stuck in building whose owner is gone: adopted when the guest exists, else failed."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.cells.registry import Cell
from novakit.compute import actions
from novakit.compute.states import PowerState, VmState
from novakit.db import api as db_api
from novakit.db.models import InstanceAction, InstanceMapping
from novakit.heal.base import (
    BUILD_ADOPTED_EVENT,
    BUILD_TIMEOUT_EVENT,
    Correction,
    HealerBase,
    _power,
    _Seen,
    recover_event,
)
from novakit.host.faults import fault_from_exception
from novakit.host.messages import Fault

LOG = logging.getLogger(__name__)


class StuckBuilds(HealerBase):
    """Settle builds whose owner is gone, as Nova's ``_check_instance_build_time``."""

    # ------------------------------------------------------------------ stuck builds

    def _reap_stuck_builds(
        self, hosts: set[str] | None, dry_run: bool, reports: dict[str, dict[str, int]] | None = None
    ) -> list[Correction]:
        """Builds whose owner is gone: adopt the ones whose guest runs, fail the others.

        A build whose result never reached the controller (the playbook was killed
        after the hosts started building) may well have finished: if its host lists
        the guest, the server is recorded as built, with the power state the host
        reports, and keeps its claim. Otherwise it goes to error with a fault; its
        claim is freed (and its host let go, as a failed build's) only when its host
        answered without the guest (or it never had a host): a host that did not
        answer may still run it, and freeing the claim then would let the scheduler
        over-commit that host.
        """
        reports = reports or {}
        timeout = self.conf.compute.build_timeout
        now = self.clock()

        def read(cell: Cell, session: Session) -> tuple[list[_Seen], dict[str, str]]:
            stuck = [
                _Seen(i, cell) for i in db_api.stuck_builds(session, now, now - dt.timedelta(seconds=timeout))
            ]
            create_requests = {
                uuid: request_id
                for uuid, request_id in session.execute(
                    select(InstanceAction.instance_uuid, InstanceAction.request_id).where(
                        InstanceAction.instance_uuid.in_([s.uuid for s in stuck]),
                        InstanceAction.action == "create",
                    )
                ).all()
            }
            return stuck, create_requests

        out = []
        for cell, (stuck, create_requests) in self._gather(read):
            for s in stuck:
                if (hosts and s.host not in hosts) or self._host_down(s.host) or self._is_copy(cell, s.uuid):
                    continue
                guests = reports.get(s.host) if s.host else None
                if guests is not None and s.uuid in guests:
                    power = int(guests[s.uuid])
                    c = self._in_cell(cell, self._adopt_build, s, power, create_requests, dry_run)
                else:
                    # The claim goes only once the host answered without the guest (or there is none).
                    free_claim = s.host is None or guests is not None
                    c = self._in_cell(cell, self._fail_build, s, free_claim, create_requests, now, dry_run)
                if c is not None:
                    out.append(c)
        return out

    def _fail_build(
        self, s: _Seen, free_claim: bool, create_requests: dict[str, str], now: dt.datetime, dry_run: bool
    ) -> Correction:
        """A stuck build whose guest is not listed: error, a fault, and its claim freed if ``free_claim``."""
        timeout = self.conf.compute.build_timeout
        age = int((now - s.created_at).total_seconds())
        c = Correction(
            kind="build_timeout",
            instance=s.uuid,
            host=s.host,
            before=f"building/{s.task_state or '-'}",
            after="error",
            detail=f"building for {age} s, its owner ({s.task_owner or 'unknown'}) gone "
            f"(no lease renewed within build_timeout, {timeout} s); "
            + (
                "claim freed"
                if free_claim
                else f"claim kept until {s.host} answers (it may still run the guest)"
            ),
        )
        if dry_run:
            return c
        fault = self._timeout_fault(s)
        create_ctx = self._create_ctx(s, create_requests)
        event = recover_event(c.detail, ok=False, host=s.host, event=BUILD_TIMEOUT_EVENT)

        def write(session: Session) -> None:
            values: dict[str, Any] = {"vm_state": VmState.ERROR, "task_state": None}
            if free_claim:
                # No guest holds them: its ports and addresses go, as a failed build's (conductor).
                values.update(host=None, node=None, networks=[])
            self._end_build(session, s, values)
            if free_claim:
                _release_build_resources(session, s.uuid)
            actions.record_outcome(
                session, create_ctx, s.uuid, start="create", events=[event], fault=fault, finish="create"
            )

        c.applied = self._write(c, write)
        if c.applied:
            self._build_failed(s, free_claim, fault.message)
        return c

    def _timeout_fault(self, s: _Seen) -> Fault:
        timeout = self.conf.compute.build_timeout
        exc = exceptions.ComputeError(
            reason=f"build of instance {s.uuid} timed out: no word from it for {timeout} seconds "
            f"(stuck in {s.task_state or 'building'}); set to error state"
        )
        fault = fault_from_exception(exc, s.host)
        fault.details = None  # no traceback: nothing raised, a clock ran out
        return fault

    def _create_ctx(self, s: _Seen, create_requests: dict[str, str]) -> Any:
        """The context of the request that created ``s``: heal's outcome joins its action."""
        return self.ctx.with_request_id(create_requests.get(s.uuid, self.ctx.request_id))

    def _end_build(self, session: Session, s: _Seen, values: dict[str, Any]) -> None:
        """The build's end, written only while it is still the gone owner's build."""
        db_api.instance_update(
            session,
            s.uuid,
            values,
            expected_vm_state=[VmState.BUILDING],
            expected_task_state=[s.task_state],
            expected_owner=s.task_owner,
            lease_expired_at=self.clock(),
        )

    def _build_failed(self, s: _Seen, free_claim: bool, fault_message: str) -> None:
        """After a timed-out build is recorded: one never scheduled goes to cell0, a freed claim
        goes from placement, and the notifications say it failed."""
        from novakit.placement import api as placement

        if s.host is None:
            self._bury_in_cell0(s.uuid)
        if free_claim:
            placement.remove_allocations(self.db, s.uuid)
        self.notifier.state_update(s.uuid, ("building", s.task_state), ("error", None), host=s.host)
        self.notifier.emit("instance.create.error", s.uuid, fault=fault_message)

    def _bury_in_cell0(self, uuid: str) -> None:
        """A build that never reached a host lives in cell0 with its fault, as one the scheduler
        could not place (Nova's super conductor buries both there): it left the API database's
        waiting rows, and its mapping names cell0, so that it is listed, shown and deleted as
        any server in error. A server already mapped to a cell (scheduled, then let go) stays."""
        from novakit.cells.moves import move_to_cell

        with self.db.reader() as session:
            cell_id = session.execute(
                select(InstanceMapping.cell_id).where(
                    InstanceMapping.instance_uuid == uuid, InstanceMapping.deleted == 0
                )
            ).scalar_one_or_none()
        if cell_id is None:
            try:
                move_to_cell(self.db, [uuid], self.db.cells.cell0())
            except exceptions.NovakitError as exc:
                # cell0 unusable (down, never made): it stays in the API database with its fault,
                # as a server the scheduler could not place does then; a later heal cannot tell.
                LOG.warning("instance %s stays unscheduled, cell0 unusable: %s", uuid, exc.format_message())

    def _adopt_build(
        self, s: _Seen, power: int, create_requests: dict[str, str], dry_run: bool
    ) -> Correction:
        power_state = PowerState(power) if power in PowerState._value2member_map_ else PowerState.NOSTATE
        running = power_state == PowerState.RUNNING
        after = VmState.ACTIVE if running else VmState.STOPPED
        c = Correction(
            kind="build_adopted",
            instance=s.uuid,
            host=s.host,
            before=f"building/{s.task_state or '-'}",
            after=after.value,
            detail=f"the build finished on {s.host} but its result never reached the "
            f"controller; the guest is {_power(power)}: recorded as built, claim kept",
        )
        if dry_run:
            return c
        create_ctx = self._create_ctx(s, create_requests)
        event = recover_event(c.detail, ok=True, host=s.host, event=BUILD_ADOPTED_EVENT)

        def write(session: Session) -> None:
            self._end_build(
                session,
                s,
                {
                    "vm_state": after,
                    "task_state": None,
                    "power_state": int(power_state),
                    "launched_at": event.start_time,
                },
            )
            from novakit.volume import boot

            boot.built(session, [s.uuid])  # its root volume, if any, as a build's that succeeded
            actions.record_outcome(
                session, create_ctx, s.uuid, start="create", events=[event], finish="create"
            )

        c.applied = self._write(c, write)
        if c.applied:
            self.notifier.state_update(s.uuid, ("building", s.task_state), (after.value, None), host=s.host)
        return c


def _release_build_resources(session: Session, uuid: str) -> None:
    """What a failed build lets go (as the conductor's): its ports and addresses, and its root
    volume (a new one goes, an existing one is free)."""
    from novakit.network import ports
    from novakit.volume import boot

    ports.free_for_instance(session, uuid)
    boot.release_failed_build(session, uuid)
