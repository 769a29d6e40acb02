"""The conductor: schedules, hands work to compute hosts, and records what came back.

It is the only writer of compute results into the database. Every step of the
boot flow is one method, so the same code serves both ways of running:

* orchestrated by Ansible (``playbooks/boot.yml``): play 1 calls
  ``schedule_instances`` and carries the returned ``ComputeRequest`` per host
  to play 2, where the hosts build; play 3 hands each ``ComputeResult`` to
  ``record_build_result``, which returns the reschedules for the next round;
* direct (Python API, CLI): ``build_instances`` runs those same steps in one
  process, reaching hosts through a transport.

Lifecycle actions are the same round trip: the API has already made the
guarded write that starts the action; ``prepare_action`` builds the request,
``record_action_result`` finishes it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import JSON, Integer, String, bindparam, delete, select, text, update
from sqlalchemy.orm import Session

from novakit import exceptions, notifications
from novakit.compute import actions, images
from novakit.compute.faults import fault_from_exception
from novakit.compute.messages import (
    ComputeRequest,
    ComputeResult,
    Event,
    FlavorSpec,
    ImageSpec,
    InstanceResult,
    InstanceSpec,
    NetworkSpec,
)
from novakit.compute.states import ACTIONS, PowerState, TaskState, VmState
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.engine import Database
from novakit.db.models import ComputeNode, Instance, InstanceGroupMember, RequestSpec, utcnow
from novakit.transport import Transport, get_transport

LOG = logging.getLogger(__name__)

BUILD_TASK_STATES = [
    TaskState.SCHEDULING,
    TaskState.NETWORKING,
    TaskState.BLOCK_DEVICE_MAPPING,
    TaskState.SPAWNING,
]
SCHEDULE_EVENT = "conductor_schedule_and_build_instances"
BUILD_EVENT = "compute__do_build_and_run_instance"

TransportFactory = Callable[[str, dict[str, Any]], Transport]


class Conductor:
    def __init__(
        self,
        db: Database,
        conf: Config,
        *,
        scheduler: Any | None = None,
        transport_factory: TransportFactory | None = None,
    ) -> None:
        self.db = db
        self.conf = conf
        self.host = None  # the conductor's events carry no host
        if scheduler is None:
            from novakit.scheduler.manager import SchedulerManager

            scheduler = SchedulerManager(db, conf)
        self.scheduler = scheduler
        self.transport_factory = transport_factory or (
            lambda host, info: get_transport(host, info, conf.compute.max_concurrent_builds)
        )
        self.notifier = notifications.Notifier(conf)

    # ------------------------------------------------------------------ boot

    def schedule_instances(self, ctx: RequestContext, instance_uuids: list[str]) -> list[ComputeRequest]:
        """Select and claim a host for each instance; one build request per host.

        Instances that cannot be placed go to ``error`` with a fault that
        carries the scheduler's explanation; nothing stays claimed for them.
        """
        return self._schedule(ctx, instance_uuids)[0]

    def _schedule(
        self,
        ctx: RequestContext,
        instance_uuids: list[str],
        records: dict[str, tuple[Instance, RequestSpec]] | None = None,
    ) -> tuple[list[ComputeRequest], dict[str, dict[str, Any]]]:
        """``schedule_instances``, and how to reach each chosen host (read in the claims' transaction).

        ``records``: the instances and request specs as the caller has just written them (direct
        mode); otherwise they are read. Either way the claims' guarded writes check that each
        instance is still building, so one deleted meanwhile is skipped.
        """
        from novakit.scheduler.request_spec import RequestSpec as SchedSpec

        if records is None:
            with self.db.reader() as session:
                found = {
                    inst.uuid: (inst, rs)
                    for inst, rs in session.execute(
                        select(Instance, RequestSpec)
                        .join(RequestSpec, RequestSpec.instance_uuid == Instance.uuid)
                        .where(db_api.one_of(Instance.uuid, instance_uuids), Instance.deleted == 0)
                    ).all()
                }
        else:
            found = records
        uuids = [u for u in instance_uuids if u in found]
        if not uuids:
            return [], {}
        for uuid in uuids:
            self.notifier.emit("instance.create.start", uuid)
        spec = SchedSpec.model_validate(found[uuids[0]][1].spec)
        spec.num_instances = len(uuids)
        if spec.min_count is not None:
            spec.min_count = min(spec.min_count, len(uuids))
        recorded: list[tuple[str, InstanceSpec]] = []
        gone: list[str] = []
        infos: dict[str, dict[str, Any]] = {}

        def on_claimed(session: Session, claimed: dict[str, list[Any]]) -> None:
            # In the claims' own transaction: an instance never holds a claim without its host.
            recorded[:] = self._claimed(
                session, found, [(u, claimed[u]) for u in uuids if claimed.get(u)], gone
            )
            infos.clear()
            infos.update(_driver_infos(session, {host for host, _ in recorded}))

        try:
            selections = self.scheduler.select_destinations(spec, uuids, on_claimed=on_claimed)
        except exceptions.NoValidHost as exc:
            self._fail_unscheduled(ctx, uuids, exc)
            return [], {}
        by_host: dict[str, list[InstanceSpec]] = defaultdict(list)
        unplaced = [uuid for uuid, choices in zip(uuids, selections, strict=True) if not choices]
        if unplaced:
            # min_count was met but not every instance fitted: those go to error.
            self._fail_unscheduled(
                ctx,
                unplaced,
                exceptions.NoValidHost(
                    reason=f"{len(unplaced)} of {len(uuids)} instances did not fit (min_count was met)"
                ),
            )
        for uuid in gone:
            LOG.info("instance %s was deleted while it was scheduled; its claim is freed", uuid)
        for host, spec_ in recorded:
            by_host[host].append(spec_)
        requests = [
            ComputeRequest(request_id=ctx.request_id, host=host, operation="build", instances=specs)
            for host, specs in by_host.items()
        ]
        return requests, infos

    @staticmethod
    def _claimed(
        session: Session,
        found: dict[str, tuple[Instance, RequestSpec]],
        placed: list[tuple[str, list[Any]]],
        gone: list[str],
    ) -> list[tuple[str, InstanceSpec]]:
        """Record each claimed instance's host and alternates (inside the claim transaction).

        An instance that was deleted meanwhile fails its guarded write: its claim is
        removed in the same transaction and it is skipped; the others go ahead.
        """
        from novakit.placement.allocations import remove_allocations_in_session

        gone.clear()
        out = []
        images_seen: dict[str, Any] = {}
        now = utcnow()
        for uuid, choices in placed:
            chosen = choices[0]
            inst, rs = found[uuid]
            try:
                db_api.instance_update(
                    session,
                    uuid,
                    {"host": chosen.host, "node": chosen.nodename, "scheduled_at": now},
                    expected_task_state=[TaskState.SCHEDULING],
                    expected_vm_state=[VmState.BUILDING],
                    fetch=False,
                )
            except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound):
                gone.append(uuid)
                remove_allocations_in_session(session, uuid)
                continue
            session.execute(
                _RS_SCHEDULED,
                {
                    "uuid": uuid,
                    "alternates": [a.model_dump() for a in choices[1:]],
                    "attempts": (rs.attempts or 0) + 1,
                    "tried": [*(rs.tried_hosts or []), chosen.host],
                },
            )
            out.append((chosen.host, instance_spec(session, inst, images_seen)))
        return out

    def _fail_unscheduled(self, ctx: RequestContext, uuids: list[str], exc: exceptions.NoValidHost) -> None:
        fault = fault_from_exception(exc)
        event = Event(
            event=SCHEDULE_EVENT,
            start_time=utcnow(),
            finish_time=utcnow(),
            result="Error",
            details=fault.message,
        )
        for uuid in uuids:
            self._set_error(ctx, uuid, fault, [event], expected=[TaskState.SCHEDULING])

    def record_build_result(
        self, ctx: RequestContext, request: ComputeRequest, result: ComputeResult
    ) -> list[ComputeRequest]:
        """Record a host's answer; returns what must be sent next (reschedules, clean-ups)."""
        by_uuid = {r.uuid: r for r in result.results}
        follow_up: dict[tuple[str, str], list[InstanceSpec]] = defaultdict(list)
        succeeded: list[tuple[InstanceSpec, InstanceResult]] = []
        for spec in request.instances:
            res = by_uuid.get(spec.uuid) or InstanceResult(
                uuid=spec.uuid,
                ok=False,
                fault=result.error
                or fault_from_exception(
                    exceptions.ComputeError(reason=f"host {request.host} returned no result"), request.host
                ),
            )
            if res.ok:
                succeeded.append((spec, res))
            else:
                nxt = self._build_failed(ctx, request.host, spec, res)
                if nxt is not None:
                    follow_up[(nxt[0], "build")].append(nxt[1])
        builds = list(by_uuid.values())
        if succeeded:
            for spec in self._build_succeeded(ctx, request.host, succeeded, result, builds):
                follow_up[(request.host, "destroy")].append(spec)
        else:
            self._host_reported(request.host, result, builds=builds)
        return [
            ComputeRequest(request_id=ctx.request_id, host=host, operation=op, instances=specs)  # type: ignore[arg-type]
            for (host, op), specs in follow_up.items()
        ]

    def record_unreachable(
        self, ctx: RequestContext, request: ComputeRequest, reason: str
    ) -> list[ComputeRequest]:
        """Ansible could not reach ``request.host``: its builds fail there and are rescheduled."""
        from novakit.transport.local import unusable

        exc = exceptions.HypervisorUnavailable(host=request.host, reason=reason)
        result = unusable(request, exc, request.host)
        if request.operation == "build":
            return self.record_build_result(ctx, request, result)
        self.record_action_result(ctx, request, result)
        return []

    def _build_succeeded(
        self,
        ctx: RequestContext,
        host: str,
        built: list[tuple[InstanceSpec, InstanceResult]],
        result: ComputeResult,
        builds: list[InstanceResult],
    ) -> list[InstanceSpec]:
        """Mark built instances active and take in the host's report, in one transaction per answer.

        Returns the instances deleted while they built: their guests must go.
        """
        now = utcnow()
        gone: list[InstanceSpec] = []
        changed: list[tuple[str, tuple[str, str | None]]] = []

        def write(session: Session) -> None:
            gone.clear()
            changed.clear()
            olds = _states_of(session, [s.uuid for s, _ in built])
            events: dict[str, list[Event]] = {}
            for spec, res in built:
                values = {
                    "vm_state": VmState.ACTIVE,
                    "task_state": None,
                    "power_state": res.power_state
                    if res.power_state is not None
                    else int(PowerState.RUNNING),
                    "launched_at": now,
                    "addresses": res.addresses,
                    "host": host,
                }
                try:
                    db_api.instance_update(
                        session,
                        res.uuid,
                        values,
                        expected_task_state=BUILD_TASK_STATES,
                        expected_vm_state=[VmState.BUILDING],
                        fetch=False,
                    )
                except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound):
                    LOG.info(
                        "instance %s was deleted while it built on %s; removing its guest", res.uuid, host
                    )
                    gone.append(spec)
                    continue
                events[res.uuid] = res.events
                changed.append((res.uuid, olds.get(res.uuid, ("building", None))))
            actions.record_events_many(session, ctx, events, finish="create")
            self._host_report_in(session, host, result, builds)

        self.db.run_in_transaction(write)
        for spec in gone:
            self._release(spec.uuid)
        # Notifications go out once the change is committed, never from inside a retried transaction.
        timings = {res.uuid: res.timings for _, res in built}
        for uuid, old_state in changed:
            self.notifier.state_update(uuid, old_state, (VmState.ACTIVE.value, None), host=host)
            self.notifier.emit("instance.create.end", uuid, host=host, timings=timings[uuid])
        return gone

    def _build_failed(
        self, ctx: RequestContext, host: str, spec: InstanceSpec, res: InstanceResult
    ) -> tuple[str, InstanceSpec] | None:
        """Free the failed host's claim; claim the next alternate or put the instance in error."""
        from novakit import placement

        fault = res.fault or fault_from_exception(exceptions.ComputeError(reason="build failed"), host)
        if not res.events:
            # The host never ran the build (unreachable, no answer): the audit trail still
            # shows an attempt on that host, failed, as for a build that raised there.
            now = utcnow()
            res = res.model_copy(
                update={
                    "events": [
                        Event(
                            event=BUILD_EVENT,
                            start_time=now,
                            finish_time=now,
                            result="Error",
                            host=host,
                            details=fault.message,
                        )
                    ]
                }
            )
        placement.remove_allocations(self.db, spec.uuid)
        with self.db.reader() as session:
            rs = session.execute(
                select(RequestSpec).where(RequestSpec.instance_uuid == spec.uuid)
            ).scalar_one_or_none()
            alternates = list(rs.alternates or []) if rs else []
            tried = list(rs.tried_hosts or []) if rs else [host]
        if fault.reschedule:
            while alternates and (rs is not None) and len(tried) < self.conf.scheduler.max_attempts:
                alt = alternates.pop(0)
                tried.append(alt["host"])
                if not placement.claim_resources(
                    self.db,
                    spec.uuid,
                    alt["provider_uuid"],
                    alt["allocations"],
                    spec.project_id,
                    spec.user_id,
                ):
                    continue
                if self._rescheduled(ctx, spec.uuid, res, alt, alternates, tried):
                    LOG.info("rescheduling %s from %s to %s", spec.uuid, host, alt["host"])
                    return alt["host"], spec
                placement.remove_allocations(self.db, spec.uuid)
                return None
        self._set_error(ctx, spec.uuid, fault, res.events, expected=BUILD_TASK_STATES)
        return None

    def _rescheduled(
        self,
        ctx: RequestContext,
        uuid: str,
        res: InstanceResult,
        alt: dict[str, Any],
        alternates: list[dict[str, Any]],
        tried: list[str],
    ) -> bool:
        def write(session: Session) -> None:
            db_api.instance_update(
                session,
                uuid,
                {
                    "host": alt["host"],
                    "node": alt.get("nodename", alt["host"]),
                    "task_state": TaskState.SCHEDULING,
                },
                expected_task_state=BUILD_TASK_STATES,
                expected_vm_state=[VmState.BUILDING],
            )
            actions.record_host_events(session, ctx, uuid, res.events)
            if res.fault is not None:
                actions.record_fault(session, uuid, res.fault)
            rs = session.execute(select(RequestSpec).where(RequestSpec.instance_uuid == uuid)).scalar_one()
            rs.alternates = alternates
            rs.tried_hosts = tried
            rs.attempts = len(tried)

        try:
            self.db.run_in_transaction(write)
            return True
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound):
            return False

    def _set_error(
        self, ctx: RequestContext, uuid: str, fault: Any, events: list[Event], expected: list[TaskState]
    ) -> None:
        from novakit import placement

        def write(session: Session) -> None:
            db_api.instance_update(
                session,
                uuid,
                {"vm_state": VmState.ERROR, "task_state": None},
                expected_task_state=expected,
            )
            actions.record_host_events(session, ctx, uuid, events)
            actions.record_fault(session, uuid, fault)
            actions.action_finish(session, ctx, uuid)

        try:
            self.db.run_in_transaction(write)
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound):
            LOG.info("instance %s changed while its build failed; leaving it to that change", uuid)
        placement.remove_allocations(self.db, uuid)
        self.notifier.emit("instance.create.error", uuid, fault=fault.message)

    def _release(self, uuid: str) -> None:
        from novakit import placement

        placement.remove_allocations(self.db, uuid)

    def _host_reported(
        self, host: str, result: ComputeResult, builds: list[InstanceResult] | None = None
    ) -> None:
        """What a host's answer tells about the host, in one transaction.

        An answer without a host-level error is a heartbeat (as a Nova service's
        report); a build answer also refreshes the host's image cache list
        (ImageLocalityWeigher) and its count of failed builds since the last
        success (BuildFailureWeigher).
        """
        if result.error is not None and not builds:
            return
        self.db.run_in_transaction(lambda session: self._host_report_in(session, host, result, builds))

    @staticmethod
    def _host_report_in(
        session: Session, host: str, result: ComputeResult, builds: list[InstanceResult] | None
    ) -> None:
        """``_host_reported``'s writes, inside the caller's transaction."""
        if result.error is None:
            now = utcnow()
            session.execute(_HEARTBEAT, {"host": host, "now": now})
        node = session.execute(_NODE_REPORT_STATE, {"host": host}).first()
        if node is None:
            return
        values: dict[str, Any] = {}
        if result.resources is not None and sorted(node.cached_images or []) != sorted(
            result.resources.cached_images
        ):
            values["cached_images"] = sorted(result.resources.cached_images)
        if builds:
            failed = sum(1 for r in builds if not r.ok)
            stats = dict(node.stats or {})
            previous = int(stats.get("failed_builds", 0))
            stats["failed_builds"] = 0 if failed < len(builds) else previous + failed
            if stats != (node.stats or {}):
                values["stats"] = stats
        if values:
            session.execute(
                update(ComputeNode)
                .where(ComputeNode.id == node.id)
                .values(**values)
                .execution_options(synchronize_session=False)
            )

    def build_instances(
        self,
        ctx: RequestContext,
        instance_uuids: list[str],
        records: dict[str, tuple[Instance, RequestSpec]] | None = None,
    ) -> None:
        """Direct mode: schedule, build on each host in parallel, record, reschedule, until done.

        ``records``: the instances and request specs the caller has just written (see _schedule).
        """
        pending, infos = self._schedule(ctx, instance_uuids, records)
        while pending:
            results = self._send_all(pending, infos)
            infos = {}
            nxt: list[ComputeRequest] = []
            for req, res in zip(pending, results, strict=True):
                if req.operation == "build":
                    nxt.extend(self.record_build_result(ctx, req, res))
            pending = nxt

    def _send_all(
        self, requests: list[ComputeRequest], infos: dict[str, dict[str, Any]] | None = None
    ) -> list[ComputeResult]:
        hosts = {r.host for r in requests}
        if not infos or not hosts <= infos.keys():
            infos = self._driver_infos(hosts)
        if len(requests) == 1:
            return [self.send(requests[0], infos)]
        with ThreadPoolExecutor(max_workers=min(16, len(requests))) as pool:
            return list(pool.map(lambda r: self.send(r, infos), requests))

    def _driver_infos(self, hosts: set[str]) -> dict[str, dict[str, Any]]:
        with self.db.reader() as session:
            return _driver_infos(session, hosts)

    def send(self, request: ComputeRequest, infos: dict[str, dict[str, Any]] | None = None) -> ComputeResult:
        from novakit.transport.local import unusable

        try:
            if infos is None:
                infos = self._driver_infos({request.host})
            if request.host not in infos:
                raise exceptions.ComputeHostNotFound(host=request.host)
            return self.transport_factory(request.host, infos[request.host]).call(request)
        except Exception as exc:
            return unusable(request, exc, request.host)

    # ------------------------------------------------------------ lifecycle

    def prepare_action(
        self, ctx: RequestContext, uuid: str, action: str, options: dict[str, Any] | None = None
    ) -> ComputeRequest | None:
        """The compute request for an action the API has started; None if no host holds the instance.

        ``action`` is the state table's row; ``options`` what the host needs of it
        (an ``image`` to rebuild with goes into the instance's spec).
        """
        t = ACTIONS[action]
        opts = dict(options or {})
        with self.db.reader() as session:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            if not inst.host:
                return None
            spec = instance_spec(session, inst)
            image = opts.pop("image", None)
            if image:
                spec.image = images.spec(images.get(session, image))
                spec.preserve_power_off = bool(opts.pop("preserve_power_off", False))
        return ComputeRequest(
            request_id=ctx.request_id,
            host=inst.host,
            operation=t.operation,  # type: ignore[arg-type]
            action=t.action,
            instances=[spec],
            options=opts,
        )

    def record_action_result(
        self, ctx: RequestContext, request: ComputeRequest, result: ComputeResult
    ) -> None:
        action = request.action or request.operation
        self._host_reported(request.host, result)
        for spec in request.instances:
            res = next((r for r in result.results if r.uuid == spec.uuid), None)
            if res is None:
                res = InstanceResult(uuid=spec.uuid, ok=False, fault=result.error)
            self.finish_action(ctx, spec.uuid, action, res, host=request.host)

    def finish_action(
        self, ctx: RequestContext, uuid: str, action: str, res: InstanceResult | None, host: str | None = None
    ) -> None:
        """Write where ``action`` ends (or, on failure, where the table says), with its events."""
        from novakit import placement

        t = ACTIONS[action]
        ok = res is None or res.ok
        expected = list(t.passes)
        deletes = t.end_vm_state == VmState.DELETED

        StateChange = tuple[tuple[str, str | None], tuple[str, str | None]]

        def write(session: Session) -> StateChange:
            inst = db_api.instance_get(session, ctx_admin(ctx), uuid)
            old_state = (inst.vm_state, inst.task_state)
            if res is not None:
                actions.record_host_events(session, ctx, uuid, res.events)
            if deletes and ok:
                db_api.instance_soft_delete(session, uuid, expected_task_state=expected)
                session.execute(delete(InstanceGroupMember).where(InstanceGroupMember.instance_uuid == uuid))
                new_state: tuple[str, str | None] = (VmState.DELETED.value, None)
            else:
                values: dict[str, Any] = {"task_state": None}
                if ok:
                    end = t.end_vm_state
                    if t.keeps_stopped and inst.vm_state == VmState.STOPPED.value:
                        end = VmState.STOPPED
                    if end is not None:
                        values["vm_state"] = end
                    if res is not None and res.addresses:
                        values["addresses"] = res.addresses
                elif t.on_failure is not None:
                    # Nova's reverts_task_state puts the instance back where it was; some
                    # failures (a delete, a hard reboot, a rebuild) leave it in error instead.
                    values["vm_state"] = t.on_failure
                if res is not None and res.power_state is not None:
                    values["power_state"] = res.power_state
                elif ok and t.end_power_state is not None:
                    values["power_state"] = int(t.end_power_state)
                db_api.instance_update(session, uuid, values, expected_task_state=expected)
                if not ok and res is not None and res.fault is not None:
                    actions.record_fault(session, uuid, res.fault)
                new_state = (str(values.get("vm_state", inst.vm_state)), None)
            actions.action_finish(session, ctx, uuid, t.record_as)
            return old_state, new_state

        old_state, new_state = self.db.run_in_transaction(write)
        self.notifier.state_update(uuid, old_state, new_state, host=host)
        if deletes and ok:
            placement.remove_allocations(self.db, uuid)
        self.notifier.emit(f"instance.{t.notify_as}.{'end' if ok else 'error'}", uuid, host=host)

    def run_action(self, ctx: RequestContext, request: ComputeRequest) -> None:
        """Direct mode: send an action's request to its host and record what it did."""
        self.record_action_result(ctx, request, self.send(request))


def ctx_admin(ctx: RequestContext) -> RequestContext:
    """The conductor acts for the system once the API has checked the caller."""
    return RequestContext("admin", "admin", ["admin"], ctx.request_id)


# The statements of the hot path, built once (building a statement costs more than running it).
_RS_SCHEDULED = text(
    "UPDATE request_specs SET alternates = :alternates, attempts = :attempts, tried_hosts = :tried "
    "WHERE instance_uuid = :uuid"
).bindparams(bindparam("alternates", type_=JSON), bindparam("tried", type_=JSON))
_STATES_OF_ONE = text("SELECT uuid, vm_state, task_state FROM instances WHERE uuid = :uuid")
_HEARTBEAT = text(
    "UPDATE services SET last_seen_up = :now, report_count = COALESCE(report_count, 0) + 1, "
    "updated_at = :now WHERE host = :host AND deleted = 0"
)
_NODE_REPORT_STATE = text(
    "SELECT id, cached_images, stats FROM compute_nodes WHERE host = :host AND deleted = 0"
).columns(id=Integer, cached_images=JSON, stats=JSON)
_DRIVER_OF_ONE = text("SELECT host, driver FROM compute_nodes WHERE host = :host AND deleted = 0").columns(
    host=String, driver=JSON
)


def _states_of(session: Session, uuids: list[str]) -> dict[str, tuple[str, str | None]]:
    """(vm_state, task_state) of each instance, by uuid."""
    if len(uuids) == 1:
        rows = session.execute(_STATES_OF_ONE, {"uuid": uuids[0]}).all()
    else:
        rows = session.execute(
            select(Instance.uuid, Instance.vm_state, Instance.task_state).where(Instance.uuid.in_(uuids))
        ).all()
    return {uuid: (vm_state, task_state) for uuid, vm_state, task_state in rows}


def _driver_infos(session: Session, hosts: set[str]) -> dict[str, dict[str, Any]]:
    """How to reach each host (its registered driver and transport), in one query."""
    if not hosts:
        return {}
    if len(hosts) == 1:
        rows = session.execute(_DRIVER_OF_ONE, {"host": next(iter(hosts))}).all()
    else:
        rows = session.execute(
            select(ComputeNode.host, ComputeNode.driver).where(
                ComputeNode.host.in_(sorted(hosts)), ComputeNode.deleted == 0
            )
        ).all()
    return {host: dict(driver or {}) for host, driver in rows}


def instance_spec(
    session: Session, inst: Instance, images_seen: dict[str, Any] | None = None
) -> InstanceSpec:
    """Everything a compute host needs about one instance, from its records.

    ``images_seen`` caches image rows across the instances of one request.
    """
    image: ImageSpec
    kernel = ramdisk = None
    cache = images_seen if images_seen is not None else {}
    key = inst.image_ref or ""
    if key not in cache:
        cache[key] = images.by_uuid(session, inst.image_ref or "")
    img = cache[key]
    if img is not None:
        image = images.spec(img)
        props = img.properties or {}
        for key in ("kernel_id", "ramdisk_id"):
            ref = props.get(key)
            if ref:
                sub = images.by_uuid(session, ref)
                if sub is not None:
                    if key == "kernel_id":
                        kernel = images.spec(sub)
                    else:
                        ramdisk = images.spec(sub)
    else:
        image = ImageSpec(id=inst.image_ref or "", name="(deleted image)")
    flavor = inst.flavor or {}
    return InstanceSpec(
        uuid=inst.uuid,
        name=inst.display_name,
        hostname=inst.hostname,
        project_id=inst.project_id,
        user_id=inst.user_id,
        flavor=FlavorSpec(
            name=flavor.get("name", ""),
            vcpus=int(flavor.get("vcpus", inst.vcpus)),
            memory_mb=int(flavor.get("memory_mb", inst.memory_mb)),
            root_gb=int(flavor.get("root_gb", inst.root_gb)),
            ephemeral_gb=int(flavor.get("ephemeral_gb", 0)),
            swap=int(flavor.get("swap", 0)),
            extra_specs={k: str(v) for k, v in (flavor.get("extra_specs") or {}).items()},
        ),
        image=image,
        kernel=kernel,
        ramdisk=ramdisk,
        metadata={k: str(v) for k, v in (inst.instance_metadata or {}).items()},
        user_data=inst.user_data,  # type: ignore[arg-type]
        config_drive=inst.config_drive,
        networks=[NetworkSpec.model_validate(n) for n in (inst.networks or [])],
    )
