"""Builds: schedule, hand each host its builds, record what came back, reschedule.

Every step of the boot flow is one method, so the same code serves every way of running:

* orchestrated by Ansible (``playbooks/boot.yml``): play 1 calls ``schedule_instances`` and
  carries the returned ``ComputeRequest`` per host to play 2, where the hosts build; play 3
  hands the round's answers (``ComputeResult``) to ``record_build_results`` (``rounds.record_all``),
  which returns the reschedules for the next round;
* direct (Python API, CLI): ``Conductor.build_instances`` runs those same steps in one process,
  round after round through ``novakit.compute.rounds``.
* handed to a pool (``novakit serve``): ``Conductor.build_later`` queues the build; the pool's
  drain takes every build waiting, schedules the alike ones of one server each in one round
  (``first_rounds_together``: one scheduler pass, one claims' transaction; a build it leaves out
  is scheduled again alone) and runs their rounds as one, the answers of a round recorded in one
  transaction (``record_build_results``), each under its own request.

Ownership: the request that starts a build owns it (``task_owner`` = its request id) and holds
a lease (``task_lease_until``) of ``compute.build_timeout`` seconds, taken in the write that
starts the task and renewed before every host call: the claims' write (``_claimed``) before a
build round, a reschedule's write before the next. Heal takes over only builds whose lease has
run out (``novakit.heal``). An owner whose final write loses a race tells a deleted instance
(its guest goes, its claim is freed) from one someone else recorded (``actions.fate``).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import JSON, bindparam, select, text
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.cells import moves
from novakit.cells.mappings import set_cell
from novakit.cells.moves import move_to_cell
from novakit.cells.registry import UNSCHEDULED, Cell, grouped, in_cell_of
from novakit.compute import actions, rounds
from novakit.compute.rpc import instance_spec
from novakit.compute.states import PowerState, TaskState, VmState
from novakit.conductor.core import Services
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.models import Instance, RequestSpec, utcnow
from novakit.fleet import aggregates as fleet_aggregates
from novakit.fleet import hosts
from novakit.host.faults import fault_from_exception
from novakit.host.messages import (
    ComputeRequest,
    ComputeResult,
    Event,
    Fault,
    ImageSpec,
    InstanceResult,
    InstanceSpec,
)
from novakit.network import filter_sync, ports
from novakit.volume import boot
from novakit.volume.volumes import specs_of_server

LOG = logging.getLogger(__name__)

BUILD_TASK_STATES = [
    TaskState.SCHEDULING,
    TaskState.NETWORKING,
    TaskState.BLOCK_DEVICE_MAPPING,
    TaskState.SPAWNING,
]
SCHEDULE_EVENT = "conductor_schedule_and_build_instances"
BUILD_EVENT = "compute__do_build_and_run_instance"


class Builds:
    """The boot flow's part of the conductor."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.db = services.db

    def schedule_instances(self, ctx: RequestContext, instance_uuids: list[str]) -> list[ComputeRequest]:
        """Select and claim a host for each instance; one build request per host.

        Instances that cannot be placed go to ``error`` with a fault that
        carries the scheduler's explanation; nothing stays claimed for them.
        """
        return self.first_round(ctx, instance_uuids)[0]

    def first_round(
        self,
        ctx: RequestContext,
        instance_uuids: list[str],
        records: dict[str, tuple[Instance, RequestSpec]] | None = None,
    ) -> tuple[list[ComputeRequest], dict[str, dict[str, Any]]]:
        """``schedule_instances``, and how to reach each chosen host (read in the claims' transaction).

        ``records``: the instances and request specs as the caller has just written them (direct
        mode); otherwise they are read. Either way the claims' guarded writes check that each
        instance is still building, so one deleted meanwhile is skipped.

        The servers wait in the API database until they are placed (``novakit.cells``); the
        scheduler picks among the hosts of every cell, and the claims' transaction writes each
        placed server into its host's cell (``_map_placed``); each that could not be placed
        moves into cell0 (Nova's super conductor).
        """
        with self.db.target_cell(UNSCHEDULED):
            found = records if records is not None else self._waiting_records(instance_uuids)
            requests, infos, placed = self._schedule_waiting(ctx, instance_uuids, found)
        for cell, uuids in placed.items():
            self.db.cells.remember(uuids, cell)
        return requests, infos

    def _schedule_waiting(
        self, ctx: RequestContext, instance_uuids: list[str], found: dict[str, tuple[Instance, RequestSpec]]
    ) -> tuple[list[ComputeRequest], dict[str, dict[str, Any]], dict[Cell, list[str]]]:
        """``first_round`` with the API database's instance tables targeted, over the waiting
        servers ``found`` (a deleted one is not there); also the placed servers by their cell,
        where the claims' transaction put them (``_map_placed``)."""
        from novakit.scheduler.request_spec import RequestSpec as SchedSpec

        uuids = [u for u in instance_uuids if u in found]
        if not uuids:
            return [], {}, {}
        for uuid in uuids:
            self.services.notifier.emit("instance.create.start", uuid)
        spec = SchedSpec.model_validate(found[uuids[0]][1].spec)
        spec.num_instances = len(uuids)
        if spec.min_count is not None:
            spec.min_count = min(spec.min_count, len(uuids))
        try:
            claims = self._select_and_claim(spec, uuids, found, trim_by_quota=True)
        except (exceptions.NoValidHost, exceptions.OverQuota, exceptions.CellDown) as exc:
            # OverQuota: the recheck in the claim transaction lost to a concurrent request
            # (Nova's recheck losers go to error too); CellDown: the chosen host's cell stopped
            # answering as its servers were written there. Nothing was claimed.
            self._fail_unscheduled(ctx, uuids, exc)
            return [], {}, {}
        self._fail_unplaced(ctx, claims.unplaced, claims.over_quota, len(uuids))
        return _build_requests(ctx, claims.recorded), claims.infos, claims.placed_in

    @staticmethod
    def alike(jobs: list[BuildJob]) -> list[list[BuildJob]]:
        """``jobs`` in groups that may share a scheduling round, in the order they came: builds of
        one server each, their records given, whose request specs are the same but for the request
        id, and that name no server group, no scheduler hint and no host (what one request's
        servers share when scheduled together, and nothing that places one server by another)."""
        groups: dict[str, list[BuildJob]] = {}
        out: list[list[BuildJob]] = []
        for job in jobs:
            spec = (job.records or {}).get(job.uuids[0], (None, None))[1] if len(job.uuids) == 1 else None
            shape = spec.spec if spec is not None else None
            if (
                not shape
                or shape.get("instance_group")
                or any((shape.get("scheduler_hints") or {}).values())
                or shape.get("requested_host")
                or _has_root_volume(shape)
            ):
                out.append([job])
                continue
            asked = {k: v for k, v in shape.items() if k != "request_id"}
            key = json.dumps(asked, sort_keys=True, default=str)
            if key not in groups:
                groups[key] = []
                out.append(groups[key])
            groups[key].append(job)
        return out

    def first_rounds_together(
        self, group: list[BuildJob]
    ) -> list[tuple[BuildJob, list[ComputeRequest], dict[str, dict[str, Any]]]]:
        """``first_round`` of several waiting builds at once (a group of ``alike``: ``novakit
        serve``'s pool takes every build that waits when it schedules). Builds of one server each
        whose requests ask the same are scheduled and claimed in one round, one scheduler pass and
        one claims' transaction for all of them, as a create of that many servers is; each placed
        build then goes on as its own request (its request id, its action, its lease). A build
        that round left out (no room, the quota's recheck, nothing fitting at all) is scheduled
        again on its own, so what happens to it, and the fault that says why, are exactly those
        of a build scheduled alone; so is a group of one.

        Each job's first round and how to reach its hosts, in the order the jobs came."""
        out: list[tuple[BuildJob, list[ComputeRequest], dict[str, dict[str, Any]]]] = []
        left = group
        if len(group) > 1:
            with self.db.target_cell(UNSCHEDULED):
                placed, infos, placed_in, left = self._schedule_together(group)
            for cell, uuids in placed_in.items():
                self.db.cells.remember(uuids, cell)
            out.extend((job, requests, infos) for job, requests in placed)
        for job in left:
            out.append((job, *self.first_round(job.ctx, job.uuids, job.records)))
        return out

    def _schedule_together(
        self, jobs: list[BuildJob]
    ) -> tuple[
        list[tuple[BuildJob, list[ComputeRequest]]],
        dict[str, dict[str, Any]],
        dict[Cell, list[str]],
        list[BuildJob],
    ]:
        """One round for ``jobs`` (alike, one server each, their records given): the placed jobs
        with their requests, how to reach the hosts, the placed servers by cell, and the jobs left
        to be scheduled alone (nothing of theirs claimed)."""
        from novakit.scheduler.request_spec import RequestSpec as SchedSpec

        owner = {job.uuids[0]: job for job in jobs}
        found = {uuid: (job.records or {})[uuid] for uuid, job in owner.items()}
        uuids = list(owner)
        spec = SchedSpec.model_validate(found[uuids[0]][1].spec)
        spec.num_instances, spec.min_count = len(uuids), 1
        try:
            claims = self._select_and_claim(spec, uuids, found, trim_by_quota=False)
        except (exceptions.NoValidHost, exceptions.OverQuota, exceptions.CellDown):
            return [], {}, {}, jobs
        placed = []
        for host, instance in claims.recorded:  # one server each: one request each
            self.services.notifier.emit("instance.create.start", instance.uuid)
            job = owner[instance.uuid]
            placed.append((job, _build_requests(job.ctx, [(host, instance)])))
        left = [owner[uuid] for uuid in claims.unplaced]
        return placed, claims.infos, claims.placed_in, left

    def _select_and_claim(
        self,
        spec: Any,
        uuids: list[str],
        found: dict[str, tuple[Instance, RequestSpec]],
        *,
        trim_by_quota: bool,
    ) -> _Claims:
        """The scheduler's choice for ``uuids`` and its claims, with each placed server's host,
        cell and lease recorded in the claims' own transaction (``on_claimed``); the scheduler's
        NoValidHost, OverQuota and CellDown are the caller's (nothing claimed). ``trim_by_quota``:
        which servers the quota's recheck left out, and its error (``_trimmed_by_quota``)."""
        claims = _Claims()
        # The servers an attempt of the claims' transaction wrote in their cells' databases.
        written: list[tuple[Cell, list[str]]] = []
        # The lease of the round that starts now: renewed in the claims' write, before the host call.
        lease = self.services.lease_until()

        def on_claimed(session: Session, claimed: dict[str, list[Any]]) -> None:
            # In the claims' own transaction: an instance never holds a claim without its host.
            # Run again when the transaction is retried: what the rolled back attempt wrote in the
            # cells goes first.
            for cell, done in written:
                moves.remove_copies(self.db, cell, done)
            written.clear()
            placed = [(u, claimed[u]) for u in uuids if claimed.get(u)]
            cell_of = self._cells_of_hosts(placed)
            taken: dict[str, dict[str, Any]] = {}
            claims.recorded[:] = self._claimed(session, found, placed, claims.gone, lease, cell_of, taken)
            claims.placed_in.clear()
            claims.placed_in.update(self._map_placed(session, claims.recorded, cell_of, taken, written))
            claims.infos.clear()
            claims.infos.update(
                _driver_infos(self.services.rpc, session, placed, {host for host, _ in claims.recorded})
            )
            claims.over_quota.clear()
            if trim_by_quota and len(claimed) < len(uuids):
                claims.over_quota.update(self._trimmed_by_quota(session, spec, uuids))

        with self.db.cells.placement_gates():
            selections = self.services.scheduler.select_destinations(spec, uuids, on_claimed=on_claimed)
        claims.unplaced = [uuid for uuid, choices in zip(uuids, selections, strict=True) if not choices]
        for uuid in claims.gone:
            LOG.info("instance %s was deleted while it was scheduled; its claim is freed", uuid)
        return claims

    def _map_placed(
        self,
        session: Session,
        recorded: list[tuple[str, InstanceSpec]],
        cell_of: dict[str, int],
        taken: dict[str, dict[str, Any]],
        written: list[tuple[Cell, list[str]]],
    ) -> dict[Cell, list[str]]:
        """In the claims' transaction: every placed server mapped to its host's cell; returns
        them by cell. Where the cell is the API database itself their records are already there;
        into another the records ``_claimed`` took out of the API database (``taken``), with
        their actions, are written before this transaction commits (``novakit.cells.moves``;
        ``written`` says which). A process killed after the claim leaves a server placed and
        mapped at once; one killed before leaves it waiting, unclaimed (and maybe a copy heal
        removes). A host of no cell (not mapped) maps nothing, as before."""
        by_cell: dict[Cell, list[str]] = defaultdict(list)
        for host, spec in recorded:
            cell_id = cell_of.get(host)
            if cell_id is not None:
                by_cell[self.db.cells.by_id(cell_id)].append(spec.uuid)
        for cell, uuids in by_cell.items():
            if not self.db.cells.is_api(cell):  # told without opening the cell's database
                records = moves.take_records(session, [taken[u] for u in uuids])
                written.append((cell, uuids))  # before: its transaction may commit and still fail
                moves.write_records(self.db, cell, records)
            set_cell(session, uuids, cell.id)
        return dict(by_cell)

    def _record_host(
        self,
        session: Session,
        uuid: str,
        values: dict[str, Any],
        cell_id: int | None,
        taken: dict[str, dict[str, Any]],
    ) -> bool:
        """The chosen host (``values``, with the round's lease) written on a building instance,
        or, for a cell of its own database, the instance taken out of the API database with
        them (into ``taken``); False when it was deleted (or changed) meanwhile, and nothing
        was written."""
        if cell_id is not None and not self.db.cells.is_api(self.db.cells.by_id(cell_id)):
            row = moves.take_waiting(session, uuid, values)
            if row is not None:
                taken[uuid] = row
            return row is not None
        try:
            db_api.instance_update(
                session,
                uuid,
                values,
                expected_task_state=[TaskState.SCHEDULING],
                expected_vm_state=[VmState.BUILDING],
                fetch=False,
            )
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound):
            return False
        return True

    def _cells_of_hosts(self, placed: list[tuple[str, list[Any]]]) -> dict[str, int]:
        """The cell id of each chosen and alternate host (a host of no cell is not in the
        answer), as the registry keeps the host mappings (``novakit.cells.registry``: a host
        it does not know is read): where each server goes and which alternates it keeps."""
        hosts = {h.host for _, choices in placed for h in choices}
        cells = self.db.cells.host_cells(hosts)
        return {host: cell.id for host, cell in cells.items() if cell.id is not None}

    def _waiting_records(self, instance_uuids: list[str]) -> dict[str, tuple[Instance, RequestSpec]]:
        """The instances (not deleted) and their request specs, by uuid."""
        with self.db.reader() as session:
            return {
                inst.uuid: (inst, rs)
                for inst, rs in session.execute(
                    select(Instance, RequestSpec)
                    .join(RequestSpec, RequestSpec.instance_uuid == Instance.uuid)
                    .where(db_api.one_of(Instance.uuid, instance_uuids), Instance.deleted == 0)
                ).all()
            }

    def _fail_unplaced(
        self,
        ctx: RequestContext,
        unplaced: list[str],
        over_quota: dict[str, exceptions.OverQuota],
        asked: int,
    ) -> None:
        """min_count was met but not every instance was placed: those go to error, saying why
        (the quota recheck's error, or that they did not fit)."""
        trimmed = [u for u in unplaced if u in over_quota]
        if trimmed:
            self._fail_unscheduled(ctx, trimmed, over_quota[trimmed[0]])
        unfitted = [u for u in unplaced if u not in over_quota]
        if unfitted:
            self._fail_unscheduled(
                ctx,
                unfitted,
                exceptions.NoValidHost(
                    reason=f"{len(unfitted)} of {asked} instances did not fit (min_count was met)"
                ),
            )

    def _trimmed_by_quota(
        self, session: Session, spec: Any, uuids: list[str]
    ) -> dict[str, exceptions.OverQuota]:
        """The instances the quota recheck left out of a request that met its min_count, and why.

        Asked in the claims' transaction, under the project lock the recheck took, with the
        recheck's own question (``quota.allowed_instances``): the answer is the one it got.
        """
        from novakit import quota

        per_instance = quota.per_instance(spec.resources())
        allowed, error = quota.allowed_instances(
            session, self.services.conf, spec.project_id, per_instance, len(uuids), exclude_consumers=uuids
        )
        return dict.fromkeys(uuids[allowed:], error) if error is not None else {}

    def _claimed(
        self,
        session: Session,
        found: dict[str, tuple[Instance, RequestSpec]],
        placed: list[tuple[str, list[Any]]],
        gone: list[str],
        lease: dt.datetime,
        cell_of: dict[str, int],
        taken: dict[str, dict[str, Any]],
    ) -> list[tuple[str, InstanceSpec]]:
        """Record each claimed instance's host and alternates (inside the claim transaction).

        An instance that was deleted meanwhile fails its guarded write: its claim is
        removed in the same transaction and it is skipped; the others go ahead. The
        same write renews the build's lease for the round that follows. ``cell_of``: the
        cell id of each chosen and alternate host (``_cells_of_hosts``). One going to a cell
        of its own database is taken out of the API database instead, with its host
        (``moves.take_waiting``, the same guard), into ``taken`` for ``_map_placed``.
        """
        from novakit.placement.allocations import remove_allocations_in_session

        gone.clear()
        out = []
        images_seen: dict[str, Any] = {}
        now = utcnow()
        zones: dict[str, str] = {}  # the zone each chosen host is in: what its servers record
        for uuid, choices in placed:
            chosen = choices[0]
            inst, rs = found[uuid]
            spec = rs.spec or {}
            if chosen.host not in zones:
                zones[chosen.host] = fleet_aggregates.zone_of_host(session, self.services.conf, chosen.host)
            values = {
                "host": chosen.host,
                "node": chosen.nodename,
                "availability_zone": zones[chosen.host],
                "scheduled_at": now,
                "task_lease_until": lease,
            }
            if not self._record_host(session, uuid, values, cell_of.get(chosen.host), taken):
                gone.append(uuid)
                remove_allocations_in_session(session, uuid)
                continue
            # Its ports are bound to the host with its claim (Neutron's binding:host_id).
            ports.bind_host(session, [uuid], chosen.host, "BUILD")
            # A new root volume is made for the host with the claim, and holds its DISK_GB.
            boot.create_root_volume(session, inst, spec, chosen.host, conf=self.services.conf)
            # Alternates stay in the chosen host's cell, as Nova keeps them: a reschedule moves
            # the build to another host, never its records to another database.
            session.execute(
                _RS_SCHEDULED,
                {
                    "uuid": uuid,
                    "alternates": [
                        a.model_dump() for a in choices[1:] if cell_of.get(a.host) == cell_of.get(chosen.host)
                    ],
                    "attempts": (rs.attempts or 0) + 1,
                    "tried": [*(rs.tried_hosts or []), chosen.host],
                },
            )
            known = spec.get("image")
            out.append(
                (
                    chosen.host,
                    instance_spec(
                        session,
                        inst,
                        images_seen,
                        # The image the create checked, as its request spec keeps it: not read again.
                        image=ImageSpec.model_validate(known) if known else None,
                        # A server whose request named no root volume has no volume while it builds
                        # (volumes attach to built servers only): none to read.
                        volumes=None if _has_root_volume(spec) else [],
                    ),
                )
            )
        return out

    def _fail_unscheduled(self, ctx: RequestContext, uuids: list[str], exc: exceptions.NovakitError) -> None:
        fault = fault_from_exception(exc)
        event = actions.instant_event(SCHEDULE_EVENT, ok=False, details=fault.message)
        for uuid in uuids:
            self._set_error(ctx, uuid, fault, [event], expected=[TaskState.SCHEDULING])
        # What could not be scheduled lives in cell0, with its fault (Nova's super conductor).
        move_to_cell(self.db, uuids, self.db.cells.cell0())

    def record_build_results(
        self,
        answers: list[tuple[RequestContext, ComputeRequest, ComputeResult]],
        rows: dict[str, Instance] | None = None,
    ) -> list[ComputeRequest]:
        """Record the answers of a round's builds, each under its request (``ctx``); returns what
        must be sent next (reschedules, clean-ups), each follow-up its request's. ``rows``: where
        to keep each instance that built as the recording transaction left it (what the caller
        shows, without reading it again).

        The instances that built are recorded in one transaction for the whole round (per cell,
        ``_build_succeeded``); a failed one goes its own way (``_build_failed``: the next
        alternate, or error); an answer with no build that succeeded is still the host's report."""
        follow_up: dict[tuple[str, str, str], list[InstanceSpec]] = defaultdict(list)
        built: list[_Built] = []
        for ctx, request, result in answers:
            by_uuid = {r.uuid: r for r in result.results}
            succeeded: list[tuple[InstanceSpec, InstanceResult]] = []
            for spec in request.instances:
                res = by_uuid.get(spec.uuid) or InstanceResult(
                    uuid=spec.uuid,
                    ok=False,
                    fault=result.error or rounds.no_result_fault(request.host),
                )
                if res.ok:
                    succeeded.append((spec, res))
                else:
                    nxt = self._build_failed(ctx, request.host, spec, res)
                    if nxt is not None:
                        follow_up[(ctx.request_id, nxt[0], "build")].append(nxt[1])
            if succeeded:
                built.append(_Built(ctx, request.host, succeeded, result, list(by_uuid.values())))
            else:
                hosts.report(self.db, request.host, result, list(by_uuid.values()))
        if built:
            for _cell, group in grouped(self.db, [s.uuid for b in built for s, _ in b.instances]):
                in_cell = [b.only(set(group)) for b in built]
                part = [b for b in in_cell if b.instances]
                for answer, spec in self._build_succeeded(part, rows):
                    follow_up[(answer.ctx.request_id, answer.host, "destroy")].append(spec)
        return [
            ComputeRequest(request_id=request_id, host=host, operation=op, instances=specs)  # type: ignore[arg-type]
            for (request_id, host, op), specs in follow_up.items()
        ]

    def _build_succeeded(
        self, answers: list[_Built], rows: dict[str, Instance] | None = None
    ) -> list[tuple[_Built, InstanceSpec]]:
        """Mark built instances active and take in each host's report, in one transaction for
        all of ``answers`` (the servers of one cell), each answer's events under its request.

        Returns the instances whose guests must go, with their answers: deleted while they built,
        or recorded elsewhere meanwhile (see ``actions.fate``). A build someone else recorded on
        this host (heal adopted it) keeps its guest and claim; its events still go to its action.
        """
        now = utcnow()
        gone: list[tuple[_Built, InstanceSpec]] = []
        release: list[str] = []
        changed: list[tuple[_Built, str, tuple[str, str | None]]] = []
        touched: list[str] = []
        written: list[Instance] = []
        every = [(answer, spec, res) for answer in answers for spec, res in answer.instances]

        def write(session: Session) -> None:
            gone.clear()
            release.clear()
            changed.clear()
            written.clear()
            # The old states are read only for a notification someone receives.
            olds = (
                _states_of(session, [s.uuid for _, s, _ in every]) if self.services.notifier.listening else {}
            )
            events: dict[str, dict[str, list[Event]]] = defaultdict(dict)
            for answer, spec, res in every:
                try:
                    db_api.instance_update(
                        session,
                        res.uuid,
                        _built_values(res, answer.host, now),
                        expected_task_state=BUILD_TASK_STATES,
                        expected_vm_state=[VmState.BUILDING],
                        fetch=False,
                    )
                except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound) as exc:
                    # The failed UPDATE changed nothing: this transaction records the rest.
                    destroy, free = self._record_lost_build(session, answer.ctx, answer.host, res, exc)
                    if destroy:
                        gone.append((answer, spec))
                    if free:
                        release.append(spec.uuid)
                    continue
                events[answer.ctx.request_id][res.uuid] = res.events
                changed.append((answer, res.uuid, olds.get(res.uuid, ("building", None))))
            by_request = {answer.ctx.request_id: answer.ctx for answer in answers}
            for request_id, of_request in events.items():
                actions.record_events_many(session, by_request[request_id], of_request, finish="create")
            uuids = [uuid for _, uuid, _ in changed]
            ports.set_status(session, uuids, "ACTIVE")
            # Only a server that built with volumes (its request's) has root volumes to settle.
            with_volumes = {s.uuid for _, s, _ in every if s.volumes}
            boot.built(session, [uuid for uuid in uuids if uuid in with_volumes])
            for answer in answers:
                hosts.record_report(session, answer.host, answer.result, answer.builds)
            # The other ports whose filters name the new members' groups, asked in the change's
            # own transaction (``filter_sync.members_touched``), pushed once it committed.
            # A server with no port of a novakit network joined no group: nothing to ask.
            with_ports = {s.uuid for _, s, _ in every if any(n.port_id for n in s.networks)}
            touched[:] = filter_sync.members_touched(session, [u for u in uuids if u in with_ports])
            if rows is not None and changed:
                written.extend(
                    session.execute(
                        select(Instance)
                        .where(Instance.uuid.in_(uuids))
                        .execution_options(populate_existing=True)
                    ).scalars()
                )

        self.db.run_in_transaction(write)
        if rows is not None:
            rows.update({inst.uuid: inst for inst in written})
        for uuid in release:
            self._release(uuid)
        # Notifications go out once the change is committed, never from inside a retried transaction.
        timings = {res.uuid: res.timings for _, _, res in every}
        for answer, uuid, old_state in changed:
            host = answer.host
            self.services.notifier.state_update(uuid, old_state, (VmState.ACTIVE.value, None), host=host)
            self.services.notifier.emit("instance.create.end", uuid, host=host, timings=timings[uuid])
        if touched:
            filter_sync.push_filters(self.services.rpc, answers[0].ctx.request_id, touched)
        return gone

    @staticmethod
    def _record_lost_build(
        session: Session, ctx: RequestContext, host: str, res: InstanceResult, exc: exceptions.NovakitError
    ) -> tuple[bool, bool]:
        """A build that changed while it built (see ``actions.fate``): its events recorded, and
        whether its guest must go and its claim be freed."""
        destroy, free = actions.fate(session, res.uuid, host)
        LOG.info(
            "instance %s changed while it built on %s (%s); its guest %s",
            res.uuid,
            host,
            exc.format_message(),
            "is removed" if destroy else "stays",
        )
        lost = actions.lost_race(exc)
        actions.record_outcome(session, ctx, res.uuid, events=res.events, finish="create", message=lost)
        return destroy, free

    def _build_failed(
        self, ctx: RequestContext, host: str, spec: InstanceSpec, res: InstanceResult
    ) -> tuple[str, InstanceSpec] | None:
        """Free the failed host's claim; claim the next alternate or put the instance in error.

        A build no longer building on ``host`` (deleted, or recorded by someone else meanwhile)
        only gets its events recorded: its claims are no longer this build's to move.
        """
        from novakit.placement import api as placement

        fault = res.fault or fault_from_exception(exceptions.ComputeError(reason="build failed"), host)
        if not res.events:
            # The host never ran the build (unreachable, no answer): the audit trail still
            # shows an attempt on that host, failed, as for a build that raised there.
            event = actions.instant_event(BUILD_EVENT, ok=False, host=host, details=fault.message)
            res = res.model_copy(update={"events": [event]})
        if not self._still_building(ctx, spec.uuid, host, res.events, fault):
            return None
        placement.remove_allocations(self.db, spec.uuid)
        with self.db.reader() as session:
            rs = session.execute(
                select(RequestSpec).where(RequestSpec.instance_uuid == spec.uuid)
            ).scalar_one_or_none()
            stay = boot.must_stay_on(session, spec.uuid) if fault.reschedule else None
        if stay is not None:
            fault = _aborted(fault, spec.uuid, stay)
        if fault.reschedule and any(v.boot_index == 0 for v in spec.volumes):
            # Its new root volume was made for the failed host (which removed it): it goes, and
            # the next host's is written with the server's move there (``_rescheduled``).
            self.db.run_in_transaction(lambda s: boot.release_failed_build(s, spec.uuid))
        if fault.reschedule and rs is not None:
            return self._reschedule(ctx, host, spec, res, rs, fault)
        self._set_error(ctx, spec.uuid, fault, res.events, expected=BUILD_TASK_STATES)
        return None

    def _reschedule(
        self,
        ctx: RequestContext,
        host: str,
        spec: InstanceSpec,
        res: InstanceResult,
        rs: RequestSpec,
        fault: Fault,
    ) -> tuple[str, InstanceSpec] | None:
        """Claim the next alternate that has room, up to ``scheduler.max_attempts`` hosts, and
        move the build there; none left: the instance in error with the build's fault."""
        from novakit.placement import api as placement

        alternates = list(rs.alternates or [])
        tried = list(rs.tried_hosts or [])
        while alternates and len(tried) < self.services.conf.scheduler.max_attempts:
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
                if spec.volumes:  # a new root volume is another one on the next host
                    with self.db.reader() as session:
                        spec = spec.model_copy(update={"volumes": specs_of_server(session, spec.uuid)})
                return alt["host"], spec
            # Changed meanwhile (_rescheduled recorded what and why): the new claim goes.
            placement.remove_allocations(self.db, spec.uuid)
            return None
        self._set_error(ctx, spec.uuid, fault, res.events, expected=BUILD_TASK_STATES)
        return None

    @in_cell_of("uuid")
    def _rescheduled(
        self,
        ctx: RequestContext,
        uuid: str,
        res: InstanceResult,
        alt: dict[str, Any],
        alternates: list[dict[str, Any]],
        tried: list[str],
    ) -> bool:
        with self.db.reader() as api_session:  # zones are the API database's
            zone = fleet_aggregates.zone_of_host(api_session, self.services.conf, alt["host"])

        def write(session: Session) -> None:
            inst = db_api.instance_update(
                session,
                uuid,
                {
                    "host": alt["host"],
                    "node": alt.get("nodename", alt["host"]),
                    "availability_zone": zone,
                    "task_state": TaskState.SCHEDULING,
                    "task_lease_until": self.services.lease_until(),  # the next round's host call
                },
                expected_task_state=BUILD_TASK_STATES,
                expected_vm_state=[VmState.BUILDING],
            )
            ports.bind_host(session, [uuid], alt["host"], "BUILD")
            actions.record_outcome(session, ctx, uuid, events=res.events, fault=res.fault)
            rs = session.execute(select(RequestSpec).where(RequestSpec.instance_uuid == uuid)).scalar_one()
            rs.alternates = alternates
            rs.tried_hosts = tried
            rs.attempts = len(tried)
            # A new root volume is made on the next host, holding its part of the new claim.
            boot.create_root_volume(session, inst, rs.spec or {}, alt["host"])

        try:
            self.db.run_in_transaction(write)
            return True
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound) as exc:
            actions.record_lost_race(self.db, ctx, uuid, "create", res.events, res.fault, exc)
            return False

    @in_cell_of("uuid")
    def _still_building(
        self, ctx: RequestContext, uuid: str, host: str, events: list[Event], fault: Any
    ) -> bool:
        """Whether ``uuid`` is still a build on ``host``; if not, its events are recorded (and a
        deleted one's claims freed) and its failure is nobody's to handle any more."""
        with self.db.reader() as session:
            row = session.execute(_BUILD_OF, {"uuid": uuid}, bind_arguments=db_api.ON_INSTANCES).first()
        if row is not None and not row.deleted and row.vm_state == VmState.BUILDING and row.host == host:
            return True
        exc = exceptions.UnexpectedTaskStateError(
            instance_uuid=uuid,
            expected=f"building on {host}",
            actual="deleted" if row is None or row.deleted else f"{row.vm_state} on {row.host or 'no host'}",
        )
        actions.record_lost_race(self.db, ctx, uuid, "create", events, fault, exc)
        return False

    @in_cell_of("uuid")
    def _set_error(
        self, ctx: RequestContext, uuid: str, fault: Any, events: list[Event], expected: list[TaskState]
    ) -> None:
        """A build that failed for good: error, its fault, its create action finished, its claim
        freed and its host let go (Nova's ``_nil_out_instance_obj_host_and_node``)."""
        from novakit.placement import api as placement

        def write(session: Session) -> None:
            db_api.instance_update(
                session,
                uuid,
                # Its NICs go with its ports: an error server shows no address someone else may get.
                {"vm_state": VmState.ERROR, "task_state": None, "host": None, "node": None, "networks": []},
                expected_task_state=expected,
            )
            # Nova deallocates a failed build's network: its addresses go back to the pools.
            ports.free_for_instance(session, uuid)
            # And its root volume: a new one goes with its claim, an existing one is available again.
            boot.release_failed_build(session, uuid)
            actions.record_outcome(session, ctx, uuid, events=events, fault=fault, finish="create")

        try:
            self.db.run_in_transaction(write)
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound) as exc:
            LOG.info("instance %s changed while its build failed; leaving it to that change", uuid)
            if not actions.record_lost_race(self.db, ctx, uuid, "create", events, fault, exc):
                return  # someone else recorded it and holds its claim
        placement.remove_allocations(self.db, uuid)
        self.services.notifier.emit("instance.create.error", uuid, fault=fault.message)

    def _release(self, uuid: str) -> None:
        from novakit.placement import api as placement

        placement.remove_allocations(self.db, uuid)


# The statements of the hot path, built once (building a statement costs more than running it).
_RS_SCHEDULED = text(
    "UPDATE request_specs SET alternates = :alternates, attempts = :attempts, tried_hosts = :tried "
    "WHERE instance_uuid = :uuid"
).bindparams(bindparam("alternates", type_=JSON), bindparam("tried", type_=JSON))
_STATES_OF_ONE = text("SELECT uuid, vm_state, task_state FROM instances WHERE uuid = :uuid")
_BUILD_OF = text("SELECT deleted, vm_state, host FROM instances WHERE uuid = :uuid")


@dataclass
class BuildJob:
    """A recorded create's build waiting for its first round: its request's context, its servers
    and, when the caller has them, their records as written (``Builds.first_round``)."""

    ctx: RequestContext
    uuids: list[str]
    records: dict[str, tuple[Instance, RequestSpec]] | None = None


@dataclass
class _Built:
    """One answer's builds that succeeded, as ``Builds._build_succeeded`` records them."""

    ctx: RequestContext
    host: str
    instances: list[tuple[InstanceSpec, InstanceResult]]
    result: ComputeResult
    builds: list[InstanceResult]

    def only(self, uuids: Collection[str]) -> _Built:
        """This answer with only the instances of ``uuids`` (those of one cell)."""
        kept = [(s, r) for s, r in self.instances if s.uuid in uuids]
        return _Built(self.ctx, self.host, kept, self.result, self.builds)


@dataclass
class _Claims:
    """What one scheduling round claimed (``Builds._select_and_claim``)."""

    recorded: list[tuple[str, InstanceSpec]] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    infos: dict[str, dict[str, Any]] = field(default_factory=dict)
    over_quota: dict[str, exceptions.OverQuota] = field(default_factory=dict)
    placed_in: dict[Cell, list[str]] = field(default_factory=dict)
    unplaced: list[str] = field(default_factory=list)


def _build_requests(ctx: RequestContext, recorded: list[tuple[str, InstanceSpec]]) -> list[ComputeRequest]:
    """One build request of ``ctx``'s per host, with the servers placed there."""
    by_host: dict[str, list[InstanceSpec]] = defaultdict(list)
    for host, spec in recorded:
        by_host[host].append(spec)
    return [
        ComputeRequest(request_id=ctx.request_id, host=host, operation="build", instances=specs)
        for host, specs in by_host.items()
    ]


def _driver_infos(
    rpc: Any, session: Session, placed: list[tuple[str, list[Any]]], hosts: set[str]
) -> dict[str, dict[str, Any]]:
    """How to reach each host a build goes to: as the scheduler read it with the host's state
    (its selection carries it), else read in the claims' transaction."""
    infos = {sel[0].host: dict(sel[0].driver) for _, sel in placed if sel[0].driver and sel[0].host in hosts}
    missing = hosts - infos.keys()
    if missing:
        infos.update(rpc.driver_infos(missing, session))
    return infos


def _states_of(session: Session, uuids: list[str]) -> dict[str, tuple[str, str | None]]:
    """(vm_state, task_state) of each instance, by uuid."""
    if len(uuids) == 1:
        rows = session.execute(_STATES_OF_ONE, {"uuid": uuids[0]}, bind_arguments=db_api.ON_INSTANCES).all()
    else:
        rows = session.execute(
            select(Instance.uuid, Instance.vm_state, Instance.task_state).where(Instance.uuid.in_(uuids))
        ).all()
    return {uuid: (vm_state, task_state) for uuid, vm_state, task_state in rows}


def _has_root_volume(spec: dict[str, Any]) -> bool:
    """Whether a request spec (as stored) asks for a root volume: a new one or an existing one."""
    return bool(spec.get("new_root_volume_gb") or spec.get("boot_volume"))


def _built_values(res: InstanceResult, host: str, now: dt.datetime) -> dict[str, Any]:
    """What a successful build writes on its instance."""
    return {
        "vm_state": VmState.ACTIVE,
        "task_state": None,
        "power_state": res.power_state if res.power_state is not None else int(PowerState.RUNNING),
        "launched_at": now,
        "addresses": res.addresses,
        "host": host,
    }


def _aborted(fault: Fault, uuid: str, stay: str) -> Fault:
    """A build that must stay on its host (``boot.must_stay_on``) is not rescheduled: its fault
    becomes a ``BuildAbortError`` saying why."""
    abort = exceptions.BuildAbortError(
        instance_uuid=uuid, reason=f"{stay}, so no other host can build it ({fault.message})"
    )
    return fault.model_copy(
        update={"message": abort.format_message(), "exception_class": "BuildAbortError", "reschedule": False}
    )
