"""Brownfield import: guests on a host that novakit did not create become servers with claims.

``novakit host import HOST`` (and ``novakit heal --import-unmanaged``) asks the
host for its unmanaged guests (``list_unmanaged``: every domain that is neither
``novakit-<uuid>`` nor carries novakit's metadata) and records each as a server,
so that it counts in scheduling and can be stopped, started, rebooted and deleted
like any other. The choices, each for a reason:

* **The instance uuid is the domain's uuid**, as Nova's is: the uuid is what the
  host looks a guest up by after ``adopt`` marked it, and the unique key on the
  instance mapping's uuid (``instance_mappings``, one for every server of every
  cell) is what makes two imports of one host at the same moment create one
  server (the other skips it as already imported).
* **Cell**: the records go where a new server of that host goes, the same way
  (``novakit.cells``): written with their instance mapping and the claim where
  servers wait to be scheduled (the API database, one transaction), then moved
  into the cell the host is mapped to, as a boot's are once its host is chosen
  (``cells.moves``: a move cut off half way leaves the server where it waited, and
  heal removes the copy). A cell that does not answer refuses the guest, its
  records and claim removed again.
* **Flavor**: an enabled flavor whose vCPUs, RAM, root disk (the first disk's
  virtual size, rounded up to GiB) and ephemeral disk (the other disks) match
  exactly, with no swap (a public one before a private one, then by name); else a
  private flavor ``imported-<vcpus>c-<ram>m-<root>g[-<ephemeral>e]``, recorded once
  and shared by every guest of that size, so the server shows a real size and a
  later resize has something to start from.
* **Image**: none (``image_ref`` null): nobody knows what the guest was made from,
  and a placeholder image would be a record that lies. A rebuild gives it one.
* **Claims**: VCPU, MEMORY_MB and DISK_GB on the host's provider, with the claim
  code the scheduler uses (``placement.allocations.claim_in_session``), in the
  transaction that inserts the records. A guest whose claim does not fit (the host
  runs more than its allocation ratios allow) is **refused** with placement's
  reason, as Nova's placement refuses any claim beyond capacity: importing it
  anyway would let every later boot over-commit the host further. Raise the
  ratio (``host add --cpu-allocation-ratio``...) and import again.
* **States**: RUNNING -> ``active``, SHUTDOWN or CRASHED -> ``stopped``, PAUSED ->
  ``paused``, SUSPENDED -> ``suspended``, task_state none; the power state is the
  guest's. An ``import`` instance action with the host's
  ``compute_import_instance`` event is the audit trail.
* **Project**: the caller's, or ``project``. Quota is not checked: the guests run
  already, refusing them would not make them go away; they count from now on.
* **A name taken** in the project (in any cell) refuses that guest (rename the domain or import
  into another project); a guest the host cannot size (a disk whose size it cannot
  read, a transient domain) is refused with the host's reason.

The order makes every interruption safe: the records and claims are written first
(vm_state ``building``, task ``spawning``, owned by this request with a lease) and
moved into the host's cell, then the host adopts the guest, then the server is
recorded as it runs. If the
host refuses, the records and claims are removed again (nothing happened). If the
process dies in between, heal finds a build whose owner is gone: adopted, the
guest is listed and heal records the build as done (``build_adopted``); not
adopted, the server goes to error and its claim is freed, and the guest itself is
never touched (a delete of that server destroys nothing on the host).

A dry run reads the same things and makes the same decisions, and writes nothing:
no rows, no claims, nothing on the host.
"""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, Field
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.catalog import flavors
from novakit.cells import mappings
from novakit.cells.moves import move_to_cell
from novakit.cells.registry import UNSCHEDULED, Cell, in_cell_of
from novakit.compute import actions
from novakit.compute.names import hostname_for
from novakit.compute.rpc import ComputeRPC, instance_spec
from novakit.compute.states import POWER_STATE_NAMES, PowerState, TaskState, VmState
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.engine import Database
from novakit.db.models import (
    ComputeNode,
    Flavor,
    Instance,
    InstanceAction,
    InstanceActionEvent,
    InstanceMapping,
    utcnow,
)
from novakit.host.messages import ComputeRequest, Event, UnmanagedGuest
from novakit.placement.allocations import claim_in_session, remove_allocations, why_not_claimable
from novakit.placement.providers import lookup_provider

ACTION = "import"
IMPORT_EVENT = "conductor_import_instance"

#: the vm_state an imported guest's power state puts its server in
VM_STATE_BY_POWER: dict[PowerState, VmState] = {
    PowerState.RUNNING: VmState.ACTIVE,
    PowerState.SHUTDOWN: VmState.STOPPED,
    PowerState.CRASHED: VmState.STOPPED,
    PowerState.PAUSED: VmState.PAUSED,
    PowerState.SUSPENDED: VmState.SUSPENDED,
}

Outcome = Literal["imported", "would_import", "skipped", "refused"]


class ImportedGuest(BaseModel):
    """One unmanaged guest and what the import did (or, in a dry run, would do) with it."""

    uuid: str
    name: str
    vcpus: int
    memory_mb: int
    root_gb: int
    ephemeral_gb: int
    power_state: str
    outcome: Outcome
    flavor: str | None = None
    flavor_created: bool = False  # a custom flavor was (or would be) recorded for it
    vm_state: str | None = None  # where its server ends
    fits: bool | None = None  # whether its claim fits the host (None: not asked)
    reason: str = ""  # why it was skipped or refused


class ImportReport(BaseModel):
    request_id: str
    host: str
    project_id: str
    dry_run: bool
    guests: list[ImportedGuest] = Field(default_factory=list)


class _Refused(Exception):
    """Internal: roll this guest's transaction back and report why."""

    def __init__(self, outcome: Outcome, reason: str, fits: bool | None = None) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason
        self.fits = fits


def custom_flavor_name(g: UnmanagedGuest) -> str:
    name = f"imported-{g.vcpus}c-{g.memory_mb}m-{g.root_gb}g"
    return name + (f"-{g.ephemeral_gb}e" if g.ephemeral_gb else "")


def resources_of(g: UnmanagedGuest) -> dict[str, int]:
    wanted = {"VCPU": g.vcpus, "MEMORY_MB": g.memory_mb, "DISK_GB": g.root_gb + g.ephemeral_gb}
    return {rc: amount for rc, amount in wanted.items() if amount > 0}


def validate_project(project: str) -> str:
    """The project imported servers go to: a bad one is refused before anything is asked."""
    cleaned = project.strip()
    if not cleaned or len(cleaned) > 255 or any(ord(ch) < 0x20 for ch in cleaned):
        raise exceptions.ValidationError("project", "must be 1 to 255 printable characters")
    return cleaned


class Importer:
    def __init__(
        self,
        db: Database,
        conf: Config,
        ctx: RequestContext,
        project_id: str,
        rpc: ComputeRPC | None = None,
    ) -> None:
        self.db = db
        self.conf = conf
        self.ctx = ctx
        # The servers belong to the project; the action is the operator's (their user and request).
        self.owner = RequestContext(project_id, ctx.user_id, list(ctx.roles), ctx.request_id)
        self.rpc = rpc or ComputeRPC(db, conf)

    def run(self, host: str, *, dry_run: bool = False, only: list[str] | None = None) -> ImportReport:
        report = ImportReport(
            request_id=self.ctx.request_id, host=host, project_id=self.owner.project_id, dry_run=dry_run
        )
        with self.db.reader() as session:
            node = session.execute(
                select(ComputeNode).where(ComputeNode.host == host, ComputeNode.deleted == 0)
            ).scalar_one_or_none()
            if node is None:
                raise exceptions.ComputeHostNotFound(host=host)
            nodename = node.hypervisor_hostname
        found = self.unmanaged(host)
        if only is not None:
            wanted = set(only)
            missing = wanted - {g.name for g in found} - {g.uuid for g in found}
            if missing:
                raise exceptions.ValidationError(
                    "guests",
                    f"host {host} has no unmanaged guest named {', '.join(sorted(missing))} "
                    "(a name or uuid of a guest novakit did not create)",
                )
            found = [g for g in found if g.name in wanted or g.uuid in wanted]
        cell = self.db.cells.of_host(host)
        for guest in found:
            report.guests.append(self._one(host, nodename, cell, guest, dry_run))
        return report

    def unmanaged(self, host: str) -> list[UnmanagedGuest]:
        result = self.rpc.send(
            ComputeRequest(request_id=self.ctx.request_id, host=host, operation="list_unmanaged")
        )
        if result.error is not None or result.unmanaged is None:
            why = result.error.message if result.error else "no list of unmanaged guests returned"
            raise exceptions.ComputeError(reason=f"host {host} did not list its unmanaged guests: {why}")
        return result.unmanaged

    # ------------------------------------------------------------------ one guest

    def _one(
        self, host: str, nodename: str, cell: Cell | None, g: UnmanagedGuest, dry_run: bool
    ) -> ImportedGuest:
        """Import one guest into ``cell``, its host's (None: the host is mapped to no cell)."""
        power = PowerState(g.power_state) if g.power_state in PowerState._value2member_map_ else None
        item = ImportedGuest(
            uuid=g.uuid,
            name=g.name,
            vcpus=g.vcpus,
            memory_mb=g.memory_mb,
            root_gb=g.root_gb,
            ephemeral_gb=g.ephemeral_gb,
            power_state=POWER_STATE_NAMES.get(power, str(g.power_state))
            if power is not None
            else str(g.power_state),
            outcome="would_import" if dry_run else "imported",
        )
        end = VM_STATE_BY_POWER.get(power) if power is not None else None
        try:
            if g.problem:
                raise _Refused("refused", g.problem)
            if end is None:
                raise _Refused("refused", f"its power state {item.power_state} maps to no server state")
            if g.vcpus < 1 or g.memory_mb < 1 or g.root_gb < 1:
                raise _Refused("refused", "the host reports no vCPU, memory or root disk size for it")
            item.vm_state = end.value
            if dry_run:
                with self.db.reader() as session:
                    self._plan(session, host, g, item)
                return item
            # A concurrent import may record the same custom flavor first: the transaction that
            # lost that race sees the flavor when it runs again.
            for attempt in range(3):
                try:
                    with self.db.target_cell(UNSCHEDULED):
                        self.db.run_in_transaction(lambda s: self._record(s, host, nodename, g, item))
                    break
                except IntegrityError:
                    if attempt == 2:
                        raise
                    item.flavor_created = False
        except _Refused as refused:
            item.outcome, item.reason, item.fits = refused.outcome, refused.reason, refused.fits
            item.vm_state = None
            return item
        if cell is not None:
            try:
                move_to_cell(self.db, [g.uuid], cell)
            except exceptions.CellDown as exc:
                self._forget(g.uuid)
                item.outcome, item.vm_state, item.reason = "refused", None, exc.format_message()
                return item
        self._adopt(host, g, end, item)
        return item

    def _plan(self, session: Session, host: str, g: UnmanagedGuest, item: ImportedGuest) -> None:
        """Every check of the import that reads the database; raises _Refused or sets the flavor.

        Servers are looked up by their mappings, which every cell's servers have."""
        known = session.execute(
            select(InstanceMapping).where(InstanceMapping.instance_uuid == g.uuid)
        ).scalar_one_or_none()
        if known is not None and known.deleted == 0:
            raise _Refused("skipped", f"already server {known.display_name} ({known.instance_uuid})")
        if known is not None:
            raise _Refused("refused", "a deleted server had this uuid; its record keeps the uuid")
        taken = session.execute(
            select(InstanceMapping.instance_uuid).where(
                InstanceMapping.project_id == self.owner.project_id,
                InstanceMapping.display_name == g.name,
                InstanceMapping.deleted == 0,
            )
        ).first()
        if taken is not None and taken[0] == g.uuid:
            # A concurrent import committed it between the two reads (PostgreSQL reads afresh).
            raise _Refused("skipped", f"already server {g.name} ({g.uuid})")
        if taken is not None:
            raise _Refused(
                "refused",
                f"name: project {self.owner.project_id} has a server named {g.name!r} already "
                "(rename the domain or import into another project)",
            )
        flavor = self._matching_flavor(session, g)
        item.flavor = flavor.name if flavor is not None else custom_flavor_name(g)
        item.flavor_created = flavor is None
        provider = lookup_provider(session, host)
        reason = why_not_claimable(session, g.uuid, provider.id, resources_of(g))
        item.fits = not reason
        if reason:
            raise _Refused("refused", f"its claim does not fit host {host}: {reason}", fits=False)

    def _matching_flavor(self, session: Session, g: UnmanagedGuest) -> Flavor | None:
        exact = session.execute(
            select(Flavor)
            .where(
                Flavor.vcpus == g.vcpus,
                Flavor.memory_mb == g.memory_mb,
                Flavor.root_gb == g.root_gb,
                Flavor.ephemeral_gb == g.ephemeral_gb,
                Flavor.swap == 0,
                Flavor.disabled.is_(False),
            )
            .order_by(Flavor.is_public.desc(), Flavor.name)
        ).scalars()
        return next(iter(exact), None)

    def _record(
        self, session: Session, host: str, nodename: str, g: UnmanagedGuest, item: ImportedGuest
    ) -> None:
        """The records, their mapping and the claim, in one transaction of the API database (where
        servers wait to be scheduled); _Refused rolls all back."""
        self._plan(session, host, g, item)
        flavor = self._matching_flavor(session, g)
        if flavor is None:
            flavor = self._custom_flavor(session, g)
        provider = lookup_provider(session, host)
        now = utcnow()
        # The unique keys on the mapping's uuid and (project, name): a concurrent import of this
        # guest, or a server of that name made meanwhile in any cell, fails here.
        mappings.add_instances(
            session,
            [
                {
                    "uuid": g.uuid,
                    "project_id": self.owner.project_id,
                    "user_id": self.owner.user_id,
                    "display_name": g.name,
                }
            ],
        )
        row = Instance(
            uuid=g.uuid,
            display_name=g.name,
            hostname=hostname_for(g.name),
            project_id=self.owner.project_id,
            user_id=self.owner.user_id,
            host=host,
            node=nodename,
            reservation_id=f"r-{uuidlib.uuid4().hex[:8]}",
            launch_index=0,
            flavor=flavors.snapshot(flavor),
            instance_type_id=flavor.id,
            vcpus=flavor.vcpus,
            memory_mb=flavor.memory_mb,
            root_gb=flavor.root_gb,
            ephemeral_gb=flavor.ephemeral_gb,
            image_ref=None,
            vm_state=VmState.BUILDING.value,
            task_state=TaskState.SPAWNING.value,
            task_owner=self.ctx.request_id,
            task_lease_until=now + dt.timedelta(seconds=self.conf.compute.build_timeout),
            power_state=int(PowerState.NOSTATE),
            instance_metadata={},
            config_drive=False,
            networks=[],
            addresses=[],
            scheduled_at=now,
        )
        session.add(row)
        session.flush()
        outcome = claim_in_session(
            session, g.uuid, provider.id, resources_of(g), self.owner.project_id, self.owner.user_id
        )
        if not outcome.claimed:
            raise _Refused("refused", f"its claim does not fit host {host}: {outcome.reason}", fits=False)
        actions.action_start(session, self.owner, g.uuid, ACTION)

    def _custom_flavor(self, session: Session, g: UnmanagedGuest) -> Flavor:
        name = custom_flavor_name(g)
        row = session.execute(select(Flavor).where(Flavor.name == name)).scalar_one_or_none()
        if row is not None:
            return row
        row = Flavor(
            flavorid=name,
            name=name,
            vcpus=g.vcpus,
            memory_mb=g.memory_mb,
            root_gb=g.root_gb,
            ephemeral_gb=g.ephemeral_gb,
            swap=0,
            extra_specs={},
            is_public=False,
            description="recorded by novakit's import for guests that match no flavor",
        )
        session.add(row)
        session.flush()
        return row

    # ------------------------------------------------------------------ the host's half

    @in_cell_of("g")
    def _adopt(self, host: str, g: UnmanagedGuest, end: VmState, item: ImportedGuest) -> None:
        with self.db.reader() as session:
            spec = instance_spec(session, db_api.instance_get(session, self.owner, g.uuid))
        result = self.rpc.send(
            ComputeRequest(request_id=self.ctx.request_id, host=host, operation="adopt", instances=[spec])
        )
        res = next((r for r in result.results if r.uuid == g.uuid), None)
        if res is None or not res.ok:
            fault = (res.fault if res is not None else None) or result.error
            self._forget(g.uuid)
            item.outcome, item.vm_state = "refused", None
            item.reason = f"host {host} did not adopt it: {fault.message if fault else 'no answer'}"
            return
        power = res.power_state if res.power_state is not None else g.power_state
        now = utcnow()
        event = Event(
            event=IMPORT_EVENT,
            start_time=now,
            finish_time=now,
            result="Success",
            host=host,
            details=f"domain {g.name} on {host} imported as flavor {item.flavor}"
            + (" (recorded for it)" if item.flavor_created else ""),
        )

        def write(session: Session) -> None:
            db_api.instance_update(
                session,
                g.uuid,
                {"vm_state": end, "task_state": None, "power_state": int(power), "launched_at": now},
                expected_vm_state=[VmState.BUILDING],
                expected_task_state=[TaskState.SPAWNING],
                expected_owner=self.ctx.request_id,
            )
            actions.record_outcome(session, self.owner, g.uuid, events=[*res.events, event], finish=ACTION)

        try:
            self.db.run_in_transaction(write)
        except (exceptions.UnexpectedTaskStateError, exceptions.InstanceNotFound) as exc:
            # Someone acted on the new server meanwhile (a delete): theirs is the record now.
            item.reason = f"imported, then changed meanwhile: {exc.format_message()}"

    @in_cell_of("uuid")
    def _forget(self, uuid: str) -> None:
        """Remove what ``_record`` wrote for a guest the host would not adopt: nothing happened.
        The mapping goes with the instance only: a server someone acted on meanwhile keeps both."""

        def write(session: Session) -> None:
            action_ids = select(InstanceAction.id).where(InstanceAction.instance_uuid == uuid)
            session.execute(delete(InstanceActionEvent).where(InstanceActionEvent.action_id.in_(action_ids)))
            session.execute(delete(InstanceAction).where(InstanceAction.instance_uuid == uuid))
            removed = session.execute(
                delete(Instance).where(
                    Instance.uuid == uuid,
                    Instance.task_owner == self.ctx.request_id,
                    Instance.vm_state == VmState.BUILDING.value,
                )
            ).rowcount  # type: ignore[attr-defined]
            if removed:
                session.execute(delete(InstanceMapping).where(InstanceMapping.instance_uuid == uuid))

        remove_allocations(self.db, uuid)
        self.db.run_in_transaction(write)


def import_guests(
    db: Database,
    conf: Config,
    host: str,
    *,
    ctx: RequestContext | None = None,
    project: str | None = None,
    guests: Iterable[str] | None = None,
    dry_run: bool = False,
    rpc: ComputeRPC | None = None,
) -> ImportReport:
    """Import the guests on ``host`` that novakit did not create (see the module docstring).

    ``ctx`` must be an admin's (policy ``host:import``); without one the caller is the
    library's own. ``project``: whose servers they become (default the caller's).
    ``guests``: only these (names or uuids); one the host does not list as unmanaged
    fails the whole import before anything is written.
    """
    caller = ctx or RequestContext.admin()
    if ctx is not None:
        policy.authorize(ctx, "host:import")
    project_id = validate_project(project) if project is not None else caller.project_id
    only = None if guests is None else [str(g) for g in guests]
    return Importer(db, conf, caller, project_id, rpc).run(host, dry_run=dry_run, only=only)


def import_hosts(
    db: Database,
    conf: Config,
    hosts: Iterable[str],
    *,
    ctx: RequestContext,
    dry_run: bool,
    rpc: ComputeRPC | None = None,
) -> tuple[list[ImportReport], dict[str, str]]:
    """Each host's import for heal's ``import_unmanaged``; a host that fails is reported, not raised."""
    reports, failed = [], {}
    importer = Importer(db, conf, ctx, ctx.project_id, rpc)
    for host in hosts:
        try:
            reports.append(importer.run(host, dry_run=dry_run))
        except exceptions.NovakitError as exc:
            failed[host] = exc.format_message()
    return reports, failed


__all__ = ["ImportReport", "ImportedGuest", "import_guests", "import_hosts"]
