"""Heal: make the database agree with what the hypervisors actually run.

Nova does this in periodic tasks on every compute host and, at start-up, in
``ComputeManager._init_instance``; novakit runs it when asked (``novakit
heal``, ``playbooks/heal.yml``), from the controller, with the hosts' guest
lists (uuid -> power state) either fetched through each host's transport or
handed in by a playbook that ran the ``compute`` module there.

What it corrects, and why each rule is what it is:

* **Power state** follows Nova's ``_sync_instance_power_state``: an instance
  with a task running is left to its owner (the task will write its own
  result; see *interrupted tasks* for one whose owner is gone); the recorded
  power state becomes the reported one; and then by vm_state:

  - ``active`` whose guest is SHUTDOWN or CRASHED: Nova calls its stop API, so
    heal records a ``stop`` action and the instance ends ``stopped``.
    A guest found SUSPENDED is stopped the same way (Nova does too), which
    needs a real power-off on the host.
  - ``active`` whose guest is PAUSED: only the power state changes (Nova: ignore).
  - ``stopped`` whose guest runs (or is paused or suspended): Nova force-stops
    it; heal powers it off through the host and records ``stop``.
  - ``paused`` whose guest is SHUTDOWN or CRASHED: force-stopped, ``stopped``.
  - ``suspended``, ``rescued``, ``resized``, ``error``: power state only.

* **A vanished guest** (the host answered and the guest is not there): Nova
  records NOSTATE and leaves an active instance as it is; novakit puts it in
  ``error`` with a fault, because a server a user believes runs and that
  cannot run is an error, and the state table then offers what helps (rebuild,
  hard reboot, delete). An instance already in error gets NOSTATE only.

* **Interrupted tasks** (a task state set, its owner gone: the lease of the
  request that started it ran out, see ``novakit.conductor``) are finished or
  rolled back as Nova's ``_init_instance`` does when a compute service starts
  again, by the guest's real power state. Heal first takes the task over (a
  guarded write that expects the old owner and an expired lease, so a live
  owner or a second heal wins instead), then records the outcome in the
  task's own action (its request's), with a ``conductor_heal_interrupted_task``
  event that names the rule. ``TASK_RULES`` is the table:

  ==================  ==========================  ===========================================
  task_state          guest found                 heal does (Nova's rule)
  ==================  ==========================  ===========================================
  deleting            any, or none                finish the delete: destroy the guest if the
                                                  host has it, soft-delete, free the claims
                                                  (Nova deletes again)
  powering-off        SHUTDOWN, CRASHED           record ``stopped`` (Nova retries the stop,
                      otherwise                   which finds it off); else stop it again
  powering-on         RUNNING                     record ``active``; else start it again
                      otherwise                   (Nova retries the start)
  rebooting           RUNNING                     soft reboot again (a pending reboot is
                                                  retried)
                      not running                 hard reboot instead, ``rebooting_hard``
                                                  (Nova: a soft reboot that stopped the guest
                                                  became a hard one)
  rebooting_hard      any                         hard reboot again (Nova retries it)
  pausing             PAUSED                      record ``paused`` (it happened)
                      otherwise                   roll back: ``active``, the task cleared
                                                  (Nova: running guest, task cleared)
  unpausing           RUNNING                     record ``active`` (Nova clears the task)
                      PAUSED                      unpause again (Nova retries the unpause)
  suspending          SUSPENDED                   record ``suspended``; otherwise roll back
                                                  as for pausing
  resuming            RUNNING                     record ``active``; SUSPENDED: resume
                                                  again, as for unpausing
  rebuilding          any                         ``error`` with a fault (Nova: an
                                                  interrupted rebuild is in error)
  scheduling ...      (building) see *builds*
  any other           any                         the task is cleared, the power state
                                                  recorded (Nova clears snapshot and resize
                                                  preparation states)
  ==================  ==========================  ===========================================

  Nova leaves a few of these as they were (``pausing`` with a paused guest,
  ``suspending``, ``resuming``, a task on an ``error`` instance); novakit
  applies the same rule to every vm_state, because nothing else would ever
  clear them. A guest that vanished during a task (other than a delete) puts
  its server in ``error`` as above, and the task's action is finished with
  the fault. Work redone on a host that fails is recorded as the action's
  failure (the table's ``on_failure``: a delete or hard reboot ends in error).

* **Builds stuck in building** whose owner is gone (their lease, renewed at
  every build round, ran out; a build without a lease counts from
  ``created_at`` plus ``conf.compute.build_timeout``, as Nova's
  ``_check_instance_build_time``): if the host lists the guest, the build
  finished and only its result was lost (a killed playbook): the server is
  recorded as built and keeps its claim. Otherwise: error, a fault, an event
  on the ``create`` action, and, once the host has answered without the
  guest, the claim freed and the host let go (as a failed build's).

* **Orphan allocations** (their consumer is no live instance) are removed.

* **Orphan guests** (no live instance on that host owns them) are reported and
  destroyed only when ``destroy_orphans`` is set.

* **Unmanaged guests** (domains novakit did not create, which no host lists as
  novakit's) are left alone, unless ``import_unmanaged`` is set: then every host
  that answered has them imported as servers with claims, by
  ``novakit.compute.importer`` (the same decisions as ``novakit host import``),
  into ``import_project`` (default the caller's); each is an ``imported_guest``
  correction, not applied when refused (its ``error`` says why).

An instance whose row changed after the hosts were asked is skipped: its
guest list is older than its record. Every write is guarded by the states it
read (and a take-over by the owner it read), so a user's concurrent action
wins and heal skips that instance. ``clock`` is heal's "now", for its leases
and their expiry (tests move it instead of sleeping).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions, notifications, policy
from novakit.compute import actions
from novakit.compute import hosts as host_records
from novakit.compute.faults import fault_from_exception
from novakit.compute.messages import (
    ComputeRequest,
    ComputeResult,
    Event,
    FlavorSpec,
    ImageSpec,
    InstanceResult,
    InstanceSpec,
)
from novakit.compute.rpc import ComputeRPC, instance_spec
from novakit.compute.states import ACTIONS, POWER_STATE_NAMES, PowerState, TaskState, VmState
from novakit.conductor import Conductor
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.engine import Database
from novakit.db.models import Allocation, ComputeNode, Instance, InstanceAction, ResourceProvider, utcnow

LOG = logging.getLogger(__name__)

SYNC_EVENT = "compute_sync_power_state"
BUILD_TIMEOUT_EVENT = "conductor_check_instance_build_time"
BUILD_ADOPTED_EVENT = "conductor_heal_adopt_build"
RECOVER_EVENT = "conductor_heal_interrupted_task"

Kind = Literal[
    "power_state",
    "stopped",
    "vanished",
    "task_recovered",
    "build_timeout",
    "build_adopted",
    "abandoned_action",
    "orphan_allocation",
    "orphan_guest",
    "imported_guest",
]

_OFF = (PowerState.SHUTDOWN, PowerState.CRASHED)

# What heal does with an interrupted task (module docstring):
#   finish     the action happened: record where it ends, with the guest's power state
#   retry      run the action's operation on the host again and record its result
#   retry_hard a soft reboot becomes a hard one (the task state too)
#   roll_back  it did not happen: the task is cleared, the vm_state stays
#   error      the instance goes to error with a fault
Step = Literal["finish", "retry", "retry_hard", "roll_back", "error"]
T, P = TaskState, PowerState
#: task_state -> (the state table's action, {guest power state: step}, step for any other)
TASK_RULES: dict[TaskState, tuple[str, dict[PowerState, Step], Step]] = {
    T.DELETING: ("delete", {}, "retry"),
    T.POWERING_OFF: ("stop", {P.SHUTDOWN: "finish", P.CRASHED: "finish"}, "retry"),
    T.POWERING_ON: ("start", {P.RUNNING: "finish"}, "retry"),
    T.REBOOTING: ("reboot", {P.RUNNING: "retry"}, "retry_hard"),
    T.REBOOT_STARTED: ("reboot", {P.RUNNING: "finish"}, "retry_hard"),
    T.REBOOTING_HARD: ("reboot_hard", {}, "retry"),
    T.REBOOT_STARTED_HARD: ("reboot_hard", {P.RUNNING: "finish"}, "retry"),
    T.PAUSING: ("pause", {P.PAUSED: "finish"}, "roll_back"),
    T.UNPAUSING: ("unpause", {P.RUNNING: "finish", P.PAUSED: "retry"}, "roll_back"),
    T.SUSPENDING: ("suspend", {P.SUSPENDED: "finish"}, "roll_back"),
    T.RESUMING: ("resume", {P.RUNNING: "finish", P.SUSPENDED: "retry"}, "roll_back"),
    T.REBUILDING: ("rebuild", {}, "error"),
    T.REBUILD_BLOCK_DEVICE_MAPPING: ("rebuild", {}, "error"),
    T.REBUILD_SPAWNING: ("rebuild", {}, "error"),
}
_STEP_SAYS = {
    "finish": "the guest shows it happened: recorded as done",
    "retry": "run again on the host",
    "retry_hard": "the guest is not running: rebooted hard instead",
    "roll_back": "it did not happen: the task is cleared and the server stays as it was",
    "error": "an interrupted rebuild leaves the server in error",
}


class Correction(BaseModel):
    """One thing heal found, and whether it changed it."""

    kind: Kind
    instance: str
    host: str | None = None
    before: str = ""
    after: str = ""
    detail: str = ""
    applied: bool = False
    error: str | None = None


class HealReport(BaseModel):
    request_id: str
    dry_run: bool
    hosts: list[str] = Field(default_factory=list)  # hosts whose guests were compared
    unreachable: dict[str, str] = Field(default_factory=dict)  # host -> why
    corrections: list[Correction] = Field(default_factory=list)


def _power(value: int | None) -> str:
    try:
        return POWER_STATE_NAMES[PowerState(value or 0)]
    except ValueError:
        return str(value)


def _power_state(value: int) -> PowerState:
    return PowerState(value) if value in PowerState._value2member_map_ else PowerState.NOSTATE


def _expected_end(step: str, action: str | None, vm_state: str) -> str:
    """Where a recovery step leaves the instance, for a dry run's report."""
    if step in ("finish", "retry", "retry_hard") and action is not None:
        end = ACTIONS["reboot_hard" if step == "retry_hard" else action].end_vm_state
        return end.value if end is not None else vm_state
    return VmState.ERROR.value if step in ("vanished", "error") else vm_state


class _Seen:
    """An instance row as read before the hosts were asked."""

    def __init__(self, inst: Instance) -> None:
        self.uuid = inst.uuid
        self.host = inst.host
        self.vm_state = inst.vm_state
        self.task_state = inst.task_state
        self.power_state = int(inst.power_state or 0)
        self.project_id = inst.project_id
        self.created_at = inst.created_at
        self.updated_at = inst.updated_at
        self.changed_at = inst.updated_at or inst.created_at
        self.task_owner = inst.task_owner
        self.task_lease_until = inst.task_lease_until

    @property
    def state(self) -> str:
        return f"{self.vm_state}/{_power(self.power_state)}"


class Healer:
    def __init__(
        self,
        db: Database,
        conf: Config,
        ctx: RequestContext | None = None,
        rpc: ComputeRPC | None = None,
        clock: Callable[[], dt.datetime] | None = None,
    ) -> None:
        self.db = db
        self.conf = conf
        base = ctx or RequestContext.admin()
        # Heal acts for the system, as Nova's periodic tasks use an admin context.
        self.ctx = RequestContext("admin", "admin", ["admin"], base.request_id)
        # Servers heal imports belong to the caller's project (or the one asked for), by its user.
        self._import_as = (base.user_id, ["admin"], base.request_id)
        self.import_project_default = base.project_id
        self.rpc = rpc or ComputeRPC(db, conf)
        self.clock = clock or utcnow
        self._conductor: Conductor | None = None
        self.notifier = notifications.Notifier(conf, publisher_id="novakit-heal")

    @property
    def conductor(self) -> Conductor:
        """Finishing a task heal took over is the conductor's, as any owner's (on heal's clock and
        rpc); built only then: a heal with no interrupted task to finish needs none."""
        if self._conductor is None:
            self._conductor = Conductor(self.db, self.conf, clock=self.clock)
            self._conductor.rpc = self.rpc
        return self._conductor

    def _owner_gone(self, s: _Seen) -> bool:
        now = self.clock()
        return db_api.owner_gone(s, now, now - dt.timedelta(seconds=self.conf.compute.build_timeout))

    # ------------------------------------------------------------------ entry

    def run(
        self,
        hosts: Iterable[str] | None = None,
        reports: dict[str, dict[str, int]] | None = None,
        *,
        reported_at: dt.datetime | None = None,
        dry_run: bool = False,
        destroy_orphans: bool = False,
        unreachable: dict[str, str] | None = None,
        import_unmanaged: bool = False,
        import_project: str | None = None,
    ) -> HealReport:
        """Compare, correct, report. ``reports`` (host -> uuid -> power state) skips asking the hosts."""
        report = HealReport(
            request_id=self.ctx.request_id, dry_run=dry_run, unreachable=dict(unreachable or {})
        )
        wanted = set(hosts) if hosts else None
        known = self._registered_hosts()
        if wanted and wanted - set(known):
            raise exceptions.ComputeHostNotFound(host=", ".join(sorted(wanted - set(known))))
        targets = sorted(wanted or (set(reports) & set(known) if reports is not None else set(known)))
        # Read the records first, then ask the hosts: a guest list younger than the records
        # cannot make a build that finished in between look vanished.
        started = utcnow()
        seen = self._live_instances()
        if reports is None:
            reports = self._ask_hosts(targets, report, dry_run)
            reported_at = started
        else:
            reports = {h: g for h, g in reports.items() if h in targets}
            if not dry_run:
                # The playbook's hosts answered (or not, with Ansible's reason): record each contact.
                answered = [ComputeResult(request_id="", host=h, operation="list_instances") for h in reports]
                host_records.record_contacts(self.db, answered, report.unreachable)
            reported_at = reported_at or started
        report.hosts = sorted(reports)
        for host, guests in sorted(reports.items()):
            guests = {u: int(p) for u, p in guests.items()}
            mine = [s for s in seen.values() if s.host == host]
            for s in mine:
                if s.changed_at >= reported_at or s.vm_state == VmState.BUILDING.value:
                    continue  # changed after the host answered (its guest list is stale), or a build
                if s.task_state is not None:
                    if not self._owner_gone(s):
                        continue  # its owner will record the outcome (Nova's sync skips it too)
                    c: Correction | None = self._recover(s, guests.get(s.uuid), host, dry_run)
                else:
                    c = self._sync_one(s, guests.get(s.uuid), host, dry_run)
                if c is not None:
                    report.corrections.append(c)
            report.corrections.extend(
                self._orphan_guests(host, guests, reported_at, dry_run, destroy_orphans)
            )
        if not wanted:
            # A delete of a server no host holds needs no host's answer.
            for s in seen.values():
                if s.host is None and s.task_state == TaskState.DELETING.value and self._owner_gone(s):
                    report.corrections.append(self._recover(s, None, None, dry_run))
        report.corrections.extend(self._reap_stuck_builds(wanted, dry_run, reports))
        if not wanted:
            report.corrections.extend(self._abandoned_actions(dry_run))
        report.corrections.extend(self._orphan_allocations(wanted, dry_run))
        if import_unmanaged:
            report.corrections.extend(self._import_unmanaged(report, dry_run, import_project))
        return report

    def _import_unmanaged(self, report: HealReport, dry_run: bool, project: str | None) -> list[Correction]:
        from novakit.compute import importer

        ctx = RequestContext(project or self.import_project_default, *self._import_as)
        imports, failed = importer.import_hosts(
            self.db, self.conf, report.hosts, ctx=ctx, dry_run=dry_run, rpc=self.rpc
        )
        report.unreachable.update(failed)
        out = []
        for one in imports:
            for g in one.guests:
                if g.outcome == "skipped":
                    continue  # already a server: nothing to correct
                out.append(
                    Correction(
                        kind="imported_guest",
                        instance=g.uuid,
                        host=one.host,
                        before=f"unmanaged {g.name}/{g.power_state}",
                        after=g.vm_state or "unmanaged",
                        detail=f"a guest novakit did not create; flavor {g.flavor or '-'}"
                        + (" (recorded for it)" if g.flavor_created else ""),
                        applied=g.outcome == "imported",
                        error=g.reason or None,
                    )
                )
        return out

    # ------------------------------------------------------------------ reading

    def _registered_hosts(self) -> list[str]:
        with self.db.reader() as session:
            return list(session.execute(select(ComputeNode.host).where(ComputeNode.deleted == 0)).scalars())

    def _live_instances(self) -> dict[str, _Seen]:
        with self.db.reader() as session:
            return {i.uuid: _Seen(i) for i in db_api.instance_get_all(session, self.ctx)}

    def _ask_hosts(self, hosts: list[str], report: HealReport, dry_run: bool) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        if not hosts:
            return out
        requests = [
            ComputeRequest(request_id=self.ctx.request_id, host=host, operation="list_instances")
            for host in hosts
        ]
        answers = self.rpc.send_all(requests)
        if not dry_run:
            # Every answer is a contact: a host that answered is up, one that could not is down.
            host_records.record_contacts(self.db, answers)
        for req, result in zip(requests, answers, strict=True):
            if result.error is not None or result.instances_on_host is None:
                why = result.error.message if result.error else "no guest list returned"
                report.unreachable[req.host] = why
                continue
            out[req.host] = dict(result.instances_on_host)
        return out

    # ------------------------------------------------------------------ power state

    def _sync_one(self, s: _Seen, reported: int | None, host: str, dry_run: bool) -> Correction | None:
        if s.task_state is not None or s.vm_state == VmState.BUILDING.value:
            return None  # a task is running; it will record its own outcome (Nova skips these too)
        if reported is None:
            if s.vm_state == VmState.ERROR.value:
                if s.power_state == PowerState.NOSTATE:
                    return None
                return self._set_power(s, int(PowerState.NOSTATE), host, dry_run)
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
        c = Correction(
            kind="power_state",
            instance=s.uuid,
            host=host,
            before=s.state,
            after=f"{s.vm_state}/{_power(power)}",
            detail=f"the guest on {host} is {_power(power)}; the record said {_power(s.power_state)}",
        )
        if not dry_run:
            c.applied = self._write(c, lambda session: self._guarded(s, {"power_state": power}, session))
        return c

    def _stop(self, s: _Seen, power: PowerState, host: str, dry_run: bool, power_off: bool) -> Correction:
        c = Correction(
            kind="stopped",
            instance=s.uuid,
            host=host,
            before=s.state,
            after=f"stopped/{_power(PowerState.SHUTDOWN if power_off else power)}",
            detail=(
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
        now = utcnow()
        event = Event(
            event=SYNC_EVENT, start_time=now, finish_time=now, result="Success", host=host, details=c.detail
        )

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

    def _vanished(self, s: _Seen, host: str, dry_run: bool) -> Correction:
        c = Correction(
            kind="vanished",
            instance=s.uuid,
            host=host,
            before=s.state,
            after="error/NOSTATE",
            detail=f"host {host} has no guest for this instance any more",
        )
        if dry_run:
            return c
        exc = exceptions.InstanceNotFound(instance_id=s.uuid)
        fault = fault_from_exception(exc, host)
        fault.message = f"The guest of instance {s.uuid} vanished from host {host}; set to error by heal"
        now = utcnow()
        event = Event(
            event=SYNC_EVENT, start_time=now, finish_time=now, result="Error", host=host, details=c.detail
        )

        def write(session: Session) -> None:
            self._guarded(s, {"vm_state": VmState.ERROR, "power_state": int(PowerState.NOSTATE)}, session)
            actions.record_outcome(
                session, self.ctx, s.uuid, start="heal", events=[event], fault=fault, finish="heal"
            )

        c.applied = self._write(c, write)
        if c.applied:
            self.notifier.state_update(s.uuid, (s.vm_state, None), (VmState.ERROR.value, None), host=host)
        return c

    def _write(self, c: Correction, fn: Any) -> bool:
        try:
            self.db.run_in_transaction(fn)
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound) as exc:
            c.error = f"skipped: the instance changed meanwhile ({exc.format_message()})"
            return False
        return True

    # ------------------------------------------------------------------ interrupted tasks

    def _recover(self, s: _Seen, reported: int | None, host: str | None, dry_run: bool) -> Correction:
        """Finish or roll back ``s``'s task, whose owner is gone, by ``TASK_RULES``.

        ``reported``: the guest's power state on ``host``, None when the host has no guest
        for it (or it has no host).
        """
        task = str(s.task_state)
        power = None if reported is None else _power_state(reported)
        rule = TASK_RULES.get(TaskState(task)) if task in TaskState._value2member_map_ else None
        action: str | None = None
        if rule is None:
            step, says = "clear", "an unknown task: cleared, the power state recorded"
        else:
            action, by_power, otherwise = rule
            if power is None and action != "delete":
                step, says = "vanished", "the guest vanished: the server is in error"
            else:
                step = "finish" if power is None else by_power.get(power, otherwise)
                says = _STEP_SAYS[step]
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
        now = utcnow()
        event = Event(
            event=RECOVER_EVENT,
            start_time=now,
            finish_time=now,
            result="Success" if step in ("finish", "retry") else "Error",
            host=host,
            details=c.detail,
        )
        if step in ("vanished", "clear"):
            self._end_task(s, task_ctx, action, event, vanished=step == "vanished", power=power)
        else:
            assert action is not None
            res = self._outcome(s, task_ctx, action, step, power, options, event)
            self.conductor.finish_action(task_ctx, s.uuid, action, res, host, owner=self.ctx.request_id)
        c.applied = True
        c.after = self._state_now(s.uuid)
        return c

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
        if action == "stop":
            return {"timeout": self.conf.compute.shutdown_timeout}
        if action in ("reboot", "reboot_hard"):
            return {"reboot_type": "HARD" if action == "reboot_hard" else "SOFT"}
        return {}

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
        now = self.clock()
        older = now - dt.timedelta(seconds=self.conf.compute.build_timeout)
        with self.db.reader() as session:
            rows = session.execute(
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
        message = f"Abandoned: its request ended without an outcome; finished by heal {self.ctx.request_id}"
        out = []
        for uuid, action, request_id, owner, task, vm_state, deleted in rows:
            running = not deleted and (task is not None or vm_state == VmState.BUILDING.value)
            if running and owner == request_id:
                continue  # its own task, still running (or left to a later heal)
            c = Correction(
                kind="abandoned_action",
                instance=uuid,
                before=f"{action} ({request_id}) open",
                after="finished",
                detail=f"request {request_id} ended without recording what became of its {action}",
            )
            if not dry_run:

                def write(
                    session: Session, uuid: str = uuid, action: str = action, rid: str = request_id
                ) -> None:
                    actions.action_finish(
                        session, self.ctx.with_request_id(rid), uuid, action, message=message
                    )

                self.db.run_in_transaction(write)
                c.applied = True
            out.append(c)
        return out

    # ------------------------------------------------------------------ orphans

    def _orphan_guests(
        self, host: str, guests: dict[str, int], reported_at: dt.datetime, dry_run: bool, destroy: bool
    ) -> list[Correction]:
        if not guests:
            return []
        with self.db.reader() as session:
            rows = list(session.execute(select(Instance).where(Instance.uuid.in_(list(guests)))).scalars())
        owned = {i.uuid for i in rows if i.deleted == 0 and i.host == host}
        # A row that changed after the host answered is in flux (a reschedule, a delete): not an orphan yet.
        moving = {
            i.uuid
            for i in rows
            if (i.updated_at or i.created_at) >= reported_at
            or (i.deleted_at is not None and i.deleted_at >= reported_at)
        }
        out = []
        for uuid in sorted(set(guests) - owned - moving):
            c = Correction(
                kind="orphan_guest",
                instance=uuid,
                host=host,
                before=_power(guests[uuid]),
                after="destroyed" if destroy else _power(guests[uuid]),
                detail=f"a guest on {host} that no live instance on that host owns",
            )
            if destroy and not dry_run:
                spec = InstanceSpec(
                    uuid=uuid,
                    name=f"orphan-{uuid}",
                    hostname="orphan",
                    project_id="",
                    user_id="",
                    flavor=FlavorSpec(name="", vcpus=0, memory_mb=0, root_gb=0),
                    image=ImageSpec(id=""),
                )
                result = self.rpc.send(
                    ComputeRequest(
                        request_id=self.ctx.request_id, host=host, operation="destroy", instances=[spec]
                    )
                )
                ok = bool(result.results) and result.results[0].ok
                c.applied = ok
                if not ok:
                    fault = result.results[0].fault if result.results else result.error
                    c.error = fault.message if fault else "destroy failed"
            out.append(c)
        return out

    def _orphan_allocations(self, hosts: set[str] | None, dry_run: bool) -> list[Correction]:
        from novakit import placement

        with self.db.reader() as session:
            stmt = (
                select(Allocation.consumer_id, ResourceProvider.name)
                .distinct()
                .join(ResourceProvider, ResourceProvider.id == Allocation.resource_provider_id)
                .where(~Allocation.consumer_id.in_(select(Instance.uuid).where(Instance.deleted == 0)))
            )
            if hosts:
                stmt = stmt.where(ResourceProvider.name.in_(sorted(hosts)))
            found = sorted(session.execute(stmt).all())
        out = []
        for consumer, provider in found:
            c = Correction(
                kind="orphan_allocation",
                instance=consumer,
                host=provider,
                before="allocated",
                after="freed",
                detail=f"resources on {provider} held by no live instance",
            )
            if not dry_run:
                placement.remove_allocations(self.db, consumer)
                c.applied = True
            out.append(c)
        return out

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
        from novakit import placement

        reports = reports or {}

        timeout = self.conf.compute.build_timeout
        now = self.clock()
        with self.db.reader() as session:
            stuck = [_Seen(i) for i in db_api.stuck_builds(session, now, now - dt.timedelta(seconds=timeout))]
            create_requests = {
                uuid: request_id
                for uuid, request_id in session.execute(
                    select(InstanceAction.instance_uuid, InstanceAction.request_id).where(
                        InstanceAction.instance_uuid.in_([s.uuid for s in stuck]),
                        InstanceAction.action == "create",
                    )
                ).all()
            }
        out = []
        for s in stuck:
            if hosts and s.host not in hosts:
                continue
            guests = reports.get(s.host) if s.host else None
            if guests is not None and s.uuid in guests:
                out.append(self._adopt_build(s, int(guests[s.uuid]), create_requests, dry_run))
                continue
            free_claim = s.host is None or guests is not None
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
                out.append(c)
                continue
            exc = exceptions.ComputeError(
                reason=f"build of instance {s.uuid} timed out: no word from it for {timeout} seconds "
                f"(stuck in {s.task_state or 'building'}); set to error state"
            )
            fault = fault_from_exception(exc, s.host)
            fault.details = None  # no traceback: nothing raised, a clock ran out
            create_ctx = self.ctx.with_request_id(create_requests.get(s.uuid, self.ctx.request_id))
            at = utcnow()
            event = Event(
                event=BUILD_TIMEOUT_EVENT,
                start_time=at,
                finish_time=at,
                result="Error",
                host=s.host,
                details=c.detail,
            )

            def write(
                session: Session,
                s: _Seen = s,
                create_ctx: RequestContext = create_ctx,
                event: Event = event,
                fault: Any = fault,
                free_claim: bool = free_claim,
            ) -> None:
                values: dict[str, Any] = {"vm_state": VmState.ERROR, "task_state": None}
                if free_claim:
                    values.update(host=None, node=None)
                db_api.instance_update(
                    session,
                    s.uuid,
                    values,
                    expected_vm_state=[VmState.BUILDING],
                    expected_task_state=[s.task_state],
                    expected_owner=s.task_owner,
                    lease_expired_at=self.clock(),
                )
                actions.record_outcome(
                    session, create_ctx, s.uuid, start="create", events=[event], fault=fault, finish="create"
                )

            c.applied = self._write(c, write)
            if c.applied:
                if free_claim:
                    placement.remove_allocations(self.db, s.uuid)
                self.notifier.state_update(s.uuid, ("building", s.task_state), ("error", None), host=s.host)
                self.notifier.emit("instance.create.error", s.uuid, fault=fault.message)
            out.append(c)
        return out

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
        create_ctx = self.ctx.with_request_id(create_requests.get(s.uuid, self.ctx.request_id))
        now = utcnow()
        event = Event(
            event=BUILD_ADOPTED_EVENT,
            start_time=now,
            finish_time=now,
            result="Success",
            host=s.host,
            details=c.detail,
        )

        def write(session: Session) -> None:
            db_api.instance_update(
                session,
                s.uuid,
                {"vm_state": after, "task_state": None, "power_state": int(power_state), "launched_at": now},
                expected_vm_state=[VmState.BUILDING],
                expected_task_state=[s.task_state],
                expected_owner=s.task_owner,
                lease_expired_at=self.clock(),
            )
            actions.record_outcome(
                session, create_ctx, s.uuid, start="create", events=[event], finish="create"
            )

        c.applied = self._write(c, write)
        if c.applied:
            self.notifier.state_update(s.uuid, ("building", s.task_state), (after.value, None), host=s.host)
        return c


def heal(
    db: Database,
    conf: Config,
    *,
    hosts: Iterable[str] | None = None,
    reports: dict[str, dict[str, int]] | None = None,
    reported_at: dt.datetime | None = None,
    dry_run: bool = False,
    destroy_orphans: bool = False,
    unreachable: dict[str, str] | None = None,
    import_unmanaged: bool = False,
    import_project: str | None = None,
    ctx: RequestContext | None = None,
    rpc: ComputeRPC | None = None,
    clock: Callable[[], dt.datetime] | None = None,
) -> HealReport:
    """Compare each host's guests with the database and correct it (see the module docstring).

    Without ``reports`` the hosts are asked through ``rpc`` (direct mode; a
    ``novakit.compute.rpc.ComputeRPC``); a playbook passes the guest lists its
    ``compute`` tasks returned, the time it asked (``reported_at``, UTC) and the
    hosts it could not reach. ``clock``: heal's "now" (naive UTC) for leases.

    ``ctx`` is the caller, who must be an admin (``novakit.policy``): heal changes every
    project's records. Without one, the caller is the library's own (Python code that
    holds the database, an operator by the trust model).
    """
    if ctx is not None:
        policy.authorize(ctx, "heal")
        if import_unmanaged:
            policy.authorize(ctx, "host:import")
    if import_project is not None:
        from novakit.compute.importer import validate_project

        import_project = validate_project(import_project)
    return Healer(db, conf, ctx, rpc, clock).run(
        hosts,
        reports,
        reported_at=reported_at,
        dry_run=dry_run,
        destroy_orphans=destroy_orphans,
        unreachable=unreachable,
        import_unmanaged=import_unmanaged,
        import_project=import_project,
    )


def reports_from_compute_results(
    registered: dict[str, Any],
) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    """Guest lists from what the ``compute`` module returned per host (``operation: list_instances``).

    A host with no usable answer (unreachable, failed task) is returned as
    unreachable, never as a host without guests: that would make every server
    on it look vanished.
    """
    reports: dict[str, dict[str, int]] = {}
    missing: dict[str, str] = {}
    for host, value in registered.items():
        results = value.get("results") if isinstance(value, dict) else None
        if not results or not isinstance(results, list):
            reason = value.get("msg") if isinstance(value, dict) else None
            missing[host] = str(reason or "no answer from the compute task")
            continue
        result = ComputeResult.model_validate(results[0])
        if result.error is not None or result.instances_on_host is None:
            missing[host] = result.error.message if result.error else "no guest list returned"
            continue
        reports[host] = dict(result.instances_on_host)
    return reports, missing
