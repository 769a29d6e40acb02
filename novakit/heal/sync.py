"""Power state: the record follows the guest, as Nova's ``_sync_instance_power_state``."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.compute import actions
from novakit.compute.rpc import instance_spec
from novakit.compute.states import PowerState, VmState
from novakit.db import api as db_api
from novakit.heal.base import (
    _OFF,
    SYNC_EVENT,
    Correction,
    HealerBase,
    _power,
    _Seen,
    recover_event,
)
from novakit.host.faults import fault_from_exception
from novakit.host.messages import (
    ComputeRequest,
    ComputeResult,
    Event,
)


class PowerSync(HealerBase):
    """Sync each idle server's power state with its guest, stopping it where Nova would."""

    # ------------------------------------------------------------------ power state

    def _sync_one(self, s: _Seen, reported: int | None, host: str, dry_run: bool) -> Correction | None:
        if s.task_state is not None or s.vm_state == VmState.BUILDING.value:
            return None  # a task is running; it will record its own outcome (Nova skips these too)
        if reported is None:
            if s.vm_state == VmState.ERROR.value:
                if s.power_state == PowerState.NOSTATE:
                    return None
                return self._set_power(s, int(PowerState.NOSTATE), host, dry_run)
            if s.vm_state == VmState.SHELVED.value and self._shelved_image(s.uuid):
                return self._offloaded(s, host, dry_run)
            return self._vanished(s, host, dry_run)
        power = PowerState(reported) if reported in PowerState._value2member_map_ else PowerState.NOSTATE
        vm = s.vm_state
        if vm == VmState.ACTIVE.value and power in (*_OFF, PowerState.SUSPENDED):
            return self._stop(s, power, host, dry_run, power_off=power == PowerState.SUSPENDED)
        if vm == VmState.STOPPED.value and power not in (PowerState.NOSTATE, *_OFF):
            return self._stop(s, power, host, dry_run, power_off=True)
        if vm == VmState.PAUSED.value and power in _OFF:
            return self._stop(s, power, host, dry_run, power_off=False)
        if power != s.power_state:
            return self._set_power(s, int(power), host, dry_run)
        return None

    def _guarded(self, s: _Seen, values: dict[str, Any], session: Session) -> None:
        db_api.instance_update(
            session, s.uuid, values, expected_task_state=[None], expected_vm_state=[s.vm_state]
        )

    def _set_power(self, s: _Seen, power: int, host: str, dry_run: bool) -> Correction:
        c = Correction.of(
            s,
            host,
            "power_state",
            f"{s.vm_state}/{_power(power)}",
            f"the guest on {host} is {_power(power)}; the record said {_power(s.power_state)}",
        )
        if not dry_run:
            c.applied = self._write(c, lambda session: self._guarded(s, {"power_state": power}, session))
        return c

    def _stop(self, s: _Seen, power: PowerState, host: str, dry_run: bool, power_off: bool) -> Correction:
        c = Correction.of(
            s,
            host,
            "stopped",
            f"stopped/{_power(PowerState.SHUTDOWN if power_off else power)}",
            (
                f"the guest on {host} was found {_power(power)} "
                f"while the record said {s.vm_state}; stopped as Nova's power-state sync does"
                + (" (powered off on the host)" if power_off else "")
            ),
        )
        if dry_run:
            return c
        end_power = int(power)
        host_events: list[Event] = []
        if power_off:
            result = self._send_stop(s.uuid, host)
            res = result.results[0] if result.results else None
            if res is None or not res.ok:
                fault = (res.fault if res is not None else None) or result.error
                c.error = fault.message if fault else "the host did not power the guest off"
                # The guest still runs: record what it is, leave the vm_state to a later heal.
                self._write(c, lambda session: self._guarded(s, {"power_state": int(power)}, session))
                return c
            host_events = list(res.events)
            end_power = res.power_state if res.power_state is not None else int(PowerState.SHUTDOWN)
        event = recover_event(c.detail, ok=True, host=host, event=SYNC_EVENT)

        def write(session: Session) -> None:
            self._guarded(s, {"vm_state": VmState.STOPPED, "power_state": end_power}, session)
            actions.record_outcome(
                session, self.ctx, s.uuid, start="stop", events=[event, *host_events], finish="stop"
            )

        self.notifier.emit("instance.power_off.start", s.uuid, host=host)
        c.applied = self._write(c, write)
        if c.applied:
            self.notifier.state_update(s.uuid, (s.vm_state, None), (VmState.STOPPED.value, None), host=host)
            self.notifier.emit("instance.power_off.end", s.uuid, host=host)
        return c

    def _send_stop(self, uuid: str, host: str) -> ComputeResult:
        with self.db.reader() as session:
            spec = instance_spec(session, db_api.instance_get(session, self.ctx, uuid))
        req = ComputeRequest(
            request_id=self.ctx.request_id,
            host=host,
            operation="stop",
            instances=[spec],
            options={"timeout": self.conf.compute.shutdown_timeout},
        )
        return self.rpc.send(req)

    def _shelved_image(self, uuid: str) -> bool:
        from novakit.catalog import images

        with self.db.reader() as session:
            return images.shelved_image_of(session, uuid) is not None

    def _offloaded(self, s: _Seen, host: str, dry_run: bool) -> Correction:
        """A ``shelved`` server whose guest left its host is offloaded, not broken: its shelved
        image is all an unshelve needs. Recorded as the offload would have (no host, no claim,
        ports unbound, a ``shelveOffload`` action), so that the next heal has no guest to call
        vanished and the user's unshelve schedules it anew."""
        from novakit.network import ports
        from novakit.placement.allocations import remove_allocations_in_session

        c = Correction.of(
            s,
            host,
            "shelved_offloaded",
            "shelved_offloaded",
            f"shelved, and its guest is no longer on {host}: offloaded (its shelved image is kept)",
        )
        if dry_run:
            return c
        event = recover_event(c.detail, ok=True, host=host, event=SYNC_EVENT)

        def write(session: Session) -> None:
            values = {"vm_state": VmState.SHELVED_OFFLOADED, "host": None, "node": None}
            self._guarded(s, {**values, "power_state": int(PowerState.SHUTDOWN)}, session)
            remove_allocations_in_session(session, s.uuid)
            ports.bind_host(session, [s.uuid], None)
            actions.record_outcome(
                session, self.ctx, s.uuid, start="shelveOffload", events=[event], finish="shelveOffload"
            )

        c.applied = self._write(c, write)
        if c.applied:
            self.notifier.state_update(
                s.uuid, (s.vm_state, None), (VmState.SHELVED_OFFLOADED.value, None), host=host
            )
        return c

    def _vanished(self, s: _Seen, host: str, dry_run: bool) -> Correction:
        c = Correction.of(
            s,
            host,
            "vanished",
            "error/NOSTATE",
            f"host {host} has no guest for this instance any more",
        )
        if dry_run:
            return c
        exc = exceptions.InstanceNotFound(instance_id=s.uuid)
        fault = fault_from_exception(exc, host)
        fault.message = f"The guest of instance {s.uuid} vanished from host {host}; set to error by heal"
        event = recover_event(c.detail, ok=False, host=host, event=SYNC_EVENT)

        def write(session: Session) -> None:
            self._guarded(s, {"vm_state": VmState.ERROR, "power_state": int(PowerState.NOSTATE)}, session)
            actions.record_outcome(
                session, self.ctx, s.uuid, start="heal", events=[event], fault=fault, finish="heal"
            )

        c.applied = self._write(c, write)
        if c.applied:
            self.notifier.state_update(s.uuid, (s.vm_state, None), (VmState.ERROR.value, None), host=host)
        return c
