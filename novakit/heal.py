"""Heal: make the database agree with what the hypervisors actually run.

Nova does this in periodic tasks on every compute host; novakit runs it when
asked (``novakit heal``, ``playbooks/heal.yml``), from the controller, with the
hosts' guest lists (uuid -> power state) either fetched through each host's
transport or handed in by a playbook that ran the ``compute`` module there.

What it corrects, and why each rule is what it is:

* **Power state** follows Nova's ``_sync_instance_power_state``: an instance
  with a task running is left alone (the task will write its own result); the
  recorded power state becomes the reported one; and then by vm_state:

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

* **Builds stuck in building** past ``conf.compute.build_timeout`` (counted
  from ``created_at``, as Nova's ``_check_instance_build_time``): if the host
  lists the guest, the build finished and only its result was lost (a killed
  playbook): the server is recorded as built and keeps its claim. Otherwise:
  error, a fault, an event on the ``create`` action, and the claim freed once
  the host has answered without the guest.

* **Orphan allocations** (their consumer is no live instance) are removed.

* **Orphan guests** (no live instance on that host owns them) are reported and
  destroyed only when ``destroy_orphans`` is set.

An instance whose row changed after the hosts were asked is skipped: its
guest list is older than its record. Every write is guarded by the states it
read, so a user's concurrent action wins and heal skips that instance.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions, notifications
from novakit.compute import actions
from novakit.compute.faults import fault_from_exception
from novakit.compute.messages import ComputeRequest, Event, FlavorSpec, ImageSpec, InstanceSpec
from novakit.compute.states import POWER_STATE_NAMES, PowerState, VmState
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.engine import Database
from novakit.db.models import Allocation, ComputeNode, Instance, InstanceAction, ResourceProvider, utcnow

LOG = logging.getLogger(__name__)

SYNC_EVENT = "compute_sync_power_state"
BUILD_TIMEOUT_EVENT = "conductor_check_instance_build_time"
BUILD_ADOPTED_EVENT = "conductor_heal_adopt_build"

Kind = Literal[
    "power_state",
    "stopped",
    "vanished",
    "build_timeout",
    "build_adopted",
    "orphan_allocation",
    "orphan_guest",
]

_OFF = (PowerState.SHUTDOWN, PowerState.CRASHED)


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
        self.changed_at = inst.updated_at or inst.created_at

    @property
    def state(self) -> str:
        return f"{self.vm_state}/{_power(self.power_state)}"


class Healer:
    def __init__(
        self, db: Database, conf: Config, ctx: RequestContext | None = None, conductor: Any | None = None
    ) -> None:
        self.db = db
        self.conf = conf
        base = ctx or RequestContext.admin()
        # Heal acts for the system, as Nova's periodic tasks use an admin context.
        self.ctx = RequestContext("admin", "admin", ["admin"], base.request_id)
        self._conductor = conductor
        self.notifier = notifications.Notifier(conf, publisher_id="novakit-heal")

    @property
    def conductor(self) -> Any:
        if self._conductor is None:
            from novakit.conductor import Conductor

            self._conductor = Conductor(self.db, self.conf)
        return self._conductor

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
            reported_at = reported_at or started
        report.hosts = sorted(reports)
        for host, guests in sorted(reports.items()):
            guests = {u: int(p) for u, p in guests.items()}
            mine = [s for s in seen.values() if s.host == host]
            for s in mine:
                if s.changed_at >= reported_at:
                    continue  # changed after the host answered: its guest list is stale for it
                c = self._sync_one(s, guests.get(s.uuid), host, dry_run)
                if c is not None:
                    report.corrections.append(c)
            report.corrections.extend(
                self._orphan_guests(host, guests, reported_at, dry_run, destroy_orphans)
            )
        report.corrections.extend(self._reap_stuck_builds(wanted, dry_run, reports))
        report.corrections.extend(self._orphan_allocations(wanted, dry_run))
        return report

    # ------------------------------------------------------------------ reading

    def _registered_hosts(self) -> list[str]:
        with self.db.reader() as session:
            return list(session.execute(select(ComputeNode.host).where(ComputeNode.deleted == 0)).scalars())

    def _live_instances(self) -> dict[str, _Seen]:
        with self.db.reader() as session:
            return {i.uuid: _Seen(i) for i in db_api.instance_get_all(session, self.ctx)}

    def _ask_hosts(self, hosts: list[str], report: HealReport, dry_run: bool) -> dict[str, dict[str, int]]:
        def ask(host: str) -> tuple[str, Any]:
            req = ComputeRequest(request_id=self.ctx.request_id, host=host, operation="list_instances")
            return host, self.conductor.send(req)

        out: dict[str, dict[str, int]] = {}
        if not hosts:
            return out
        with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
            answers = list(pool.map(ask, hosts))
        from novakit.compute import hosts as host_records

        for host, result in answers:
            if result.error is not None or result.instances_on_host is None:
                report.unreachable[host] = result.error.message if result.error else "no guest list returned"
                continue
            out[host] = dict(result.instances_on_host)
            if not dry_run:
                # An answer is as good as a heartbeat (Nova's services report state the same way).
                host_records.heartbeat(self.db, host)
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
            actions.action_start(session, self.ctx, s.uuid, "stop")
            actions.record_host_events(session, self.ctx, s.uuid, [event, *host_events])
            actions.action_finish(session, self.ctx, s.uuid, "stop")

        self.notifier.emit("instance.power_off.start", s.uuid, host=host)
        c.applied = self._write(c, write)
        if c.applied:
            self.notifier.state_update(s.uuid, (s.vm_state, None), (VmState.STOPPED.value, None), host=host)
            self.notifier.emit("instance.power_off.end", s.uuid, host=host)
        return c

    def _send_stop(self, uuid: str, host: str) -> Any:
        from novakit.conductor import instance_spec

        with self.db.reader() as session:
            spec = instance_spec(session, db_api.instance_get(session, self.ctx, uuid))
        req = ComputeRequest(
            request_id=self.ctx.request_id,
            host=host,
            operation="stop",
            instances=[spec],
            options={"timeout": self.conf.compute.shutdown_timeout},
        )
        return self.conductor.send(req)

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
            actions.action_start(session, self.ctx, s.uuid, "heal")
            actions.record_host_events(session, self.ctx, s.uuid, [event])
            actions.record_fault(session, s.uuid, fault)
            actions.action_finish(session, self.ctx, s.uuid, "heal")

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
                result = self.conductor.send(
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
        """Builds past build_timeout: adopt the ones whose guest runs, fail the others.

        A build whose result never reached the controller (the playbook was killed
        after the hosts started building) may well have finished: if its host lists
        the guest, the server is recorded as built, with the power state the host
        reports, and keeps its claim. Otherwise it goes to error with a fault; its
        claim is freed only when its host answered without the guest (or it never
        had a host): a host that did not answer may still run it, and freeing the
        claim then would let the scheduler over-commit that host.
        """
        from novakit import placement

        reports = reports or {}

        timeout = self.conf.compute.build_timeout
        with self.db.reader() as session:
            stuck = [_Seen(i) for i in db_api.stuck_builds(session, utcnow() - dt.timedelta(seconds=timeout))]
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
            age = int((utcnow() - s.created_at).total_seconds())
            c = Correction(
                kind="build_timeout",
                instance=s.uuid,
                host=s.host,
                before=f"building/{s.task_state or '-'}",
                after="error",
                detail=f"building for {age} s, longer than build_timeout ({timeout} s); "
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
                reason=f"build of instance {s.uuid} timed out after {timeout} seconds "
                f"(stuck in {s.task_state or 'building'}); set to error state"
            )
            fault = fault_from_exception(exc, s.host)
            fault.details = None  # no traceback: nothing raised, a clock ran out
            create_ctx = self.ctx.with_request_id(create_requests.get(s.uuid, self.ctx.request_id))
            now = utcnow()
            event = Event(
                event=BUILD_TIMEOUT_EVENT,
                start_time=now,
                finish_time=now,
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
            ) -> None:
                db_api.instance_update(
                    session,
                    s.uuid,
                    {"vm_state": VmState.ERROR, "task_state": None},
                    expected_vm_state=[VmState.BUILDING],
                    expected_task_state=[s.task_state],
                )
                actions.action_start(session, create_ctx, s.uuid, "create")
                actions.record_host_events(session, create_ctx, s.uuid, [event])
                actions.record_fault(session, s.uuid, fault)
                actions.action_finish(session, create_ctx, s.uuid, "create")

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
            )
            actions.action_start(session, create_ctx, s.uuid, "create")
            actions.record_host_events(session, create_ctx, s.uuid, [event])
            actions.action_finish(session, create_ctx, s.uuid, "create")

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
    ctx: RequestContext | None = None,
    conductor: Any | None = None,
) -> HealReport:
    """Compare each host's guests with the database and correct it (see the module docstring).

    Without ``reports`` the hosts are asked through their transports (direct
    mode); a playbook passes the guest lists its ``compute`` tasks returned and
    the time it asked (``reported_at``, UTC) and the hosts it could not reach.
    """
    return Healer(db, conf, ctx, conductor).run(
        hosts,
        reports,
        reported_at=reported_at,
        dry_run=dry_run,
        destroy_orphans=destroy_orphans,
        unreachable=unreachable,
    )


def reports_from_compute_results(
    registered: dict[str, Any],
) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    """Guest lists from what the ``compute`` module returned per host (``operation: list_instances``).

    A host with no usable answer (unreachable, failed task) is returned as
    unreachable, never as a host without guests: that would make every server
    on it look vanished.
    """
    from novakit.compute.messages import ComputeResult

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
