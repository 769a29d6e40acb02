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

* **Orphan allocations** (their consumer is no live instance, nor a live volume, nor a move
  that holds its source's claim) are removed.

* **Moves** (``novakit.heal.moves``): an interrupted resize, migration, evacuation, snapshot,
  shelve or rescue is settled by where its guest is (rolled back to its source while the
  source has it; the records follow a guest that only its destination has); a host back up
  loses the old guests of servers evacuated from it; resizes past
  ``compute.resize_confirm_window`` are confirmed and servers shelved longer than
  ``compute.shelved_offload_time`` are offloaded; a guest a move keeps on its source, or
  brings to its destination, is no orphan. An interrupted offload or unshelve ends where its
  guest says (``MoveRecovery._settle_unshelve``); a ``shelved`` server whose guest left its
  host is offloaded, not in error; a move whose server no longer exists (a delete cut off
  after the record went) ends as the delete would have ended it: guests and claims gone.

* **Orphan attachments**: a volume attached (in the records) to a server that no longer exists
  is detached in the records and ``available`` again (``novakit.volume.attachments``).

* **Interrupted volume operations** (``novakit.heal.volumes``): a volume left in a transitional
  status for longer than ``conf.compute.build_timeout`` (``novakit.volume.states.abandoned``;
  volumes have no owner or lease, so their last change counts) is settled as Cinder's volume
  manager does at start-up (``init_host``), the guest's definition on its host deciding an
  attach or a detach (``get_info`` reports the volumes in it):

  ==============  ==========================  ===========================================
  volume status   found                       heal does
  ==============  ==========================  ===========================================
  creating        (the host is not asked)     ``error``, "interrupted" (Cinder); its claim
                                              stays until the volume is deleted
  reserved        (the host is not asked)     ``available``, the attachment removed (the
                                              attach never started)
  attaching       in the guest's definition   ``in-use``
                  not (or no guest)           ``available``, the attachment removed
  detaching       in the guest's definition   ``in-use`` again
                  not (or no guest)           ``available``, the attachment removed
  deleting        (the host deletes again)    the row soft-deleted, its claim freed; a host
                                              that refuses: ``error_deleting`` (its reason)
  error_deleting  -                           left for the user to delete again (Cinder)
  ==============  ==========================  ===========================================

  A root volume of a server still building is the build's (see *builds*). A volume whose host
  does not answer (or whose driver cannot list a guest's volumes) is left as it is and
  reported with the reason; each write expects the status and last change heal read.

* **Stray copies**: a move into a cell copies a server's records there and then
  points its mapping at them (``novakit.cells.moves``); one cut off in between
  leaves a copy the mapping does not point at. Once the copy's lease ran out
  (the move is over), it is removed; the server is where its mapping says.

* **Orphan guests** (no live instance on that host owns them) are reported and
  destroyed only when ``destroy_orphans`` is set.

* **Unmanaged guests** (domains novakit did not create, which no host lists as
  novakit's) are left alone, unless ``import_unmanaged`` is set: then every host
  that answered has them imported as servers with claims, by
  ``novakit.fleet.importer`` (the same decisions as ``novakit host import``),
  into ``import_project`` (default the caller's); each is an ``imported_guest``
  correction, not applied when refused (its ``error`` says why).

**Cells** (``novakit.cells``): the instances of every cell are read, and each
correction is written in the cell of its instance; stuck builds and abandoned
actions are looked for in every cell. A cell whose database does not answer is
reported (``down_cells``) and left as it is, as Nova's heal does per cell: its
servers are not corrected, the hosts mapped to it are not asked, and no guest
or claim is called an orphan while the cell that may hold its server is down.
Whether a guest or a claim has a live server is decided by its instance mapping
and the mapped cell's record, never by one database's rows: a server may be
moving between databases.

**Heals at once** (a timer and a playbook, two operators): every write is guarded, so of two
heals that found the same thing one wins each write; the loser records that correction as
skipped (``HealerBase._write``, ``base.LOST_RACE``) and goes on, and a step cut short by a lost
race outside its own writes ends there without ending the run (``HealerBase._tolerant``).

An instance whose row changed after the hosts were asked is skipped: its
guest list is older than its record. Every write is guarded by the states it
read (and a take-over by the owner it read), so a user's concurrent action
wins and heal skips that instance. ``clock`` is heal's "now", for its leases
and their expiry (tests move it instead of sleeping).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any, TypedDict, Unpack

from sqlalchemy import select

from novakit import exceptions, policy
from novakit.compute.rpc import ComputeRPC
from novakit.compute.states import TaskState, VmState
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db import api as db_api
from novakit.db.engine import Database
from novakit.db.models import ComputeNode, utcnow
from novakit.fleet import aggregates as fleet_aggregates
from novakit.fleet import hosts as host_records
from novakit.heal.base import (
    LOG,
    LOST_RACE,
    RECOVER_EVENT,
    Correction,
    HealReport,
    _Seen,
)
from novakit.heal.builds import StuckBuilds
from novakit.heal.filters import PortFilters
from novakit.heal.host_boot import HostBoot
from novakit.heal.moves import MoveRecovery, Moves, is_unshelve
from novakit.heal.orphans import Orphans
from novakit.heal.recovery import TASK_RULES, TaskRecovery
from novakit.heal.sync import PowerSync
from novakit.heal.volumes import VolumeRecovery
from novakit.host.messages import (
    ComputeRequest,
    ComputeResult,
)

__all__ = [
    "RECOVER_EVENT",
    "TASK_RULES",
    "Correction",
    "HealReport",
    "Healer",
    "heal",
    "reports_from_compute_results",
]


class Healer(
    PowerSync, HostBoot, TaskRecovery, StuckBuilds, Orphans, Moves, MoveRecovery, VolumeRecovery, PortFilters
):
    """One heal run: read the records, ask the hosts, correct what disagrees."""

    # ------------------------------------------------------------------ entry

    def run(self, **options: Unpack[HealOptions]) -> HealReport:
        """Compare, correct, report (``options``: ``HealOptions``)."""
        hosts, reports, boot_ids = options.get("hosts"), options.get("reports"), options.get("boot_ids")
        reported_at, unreachable = options.get("reported_at"), options.get("unreachable")
        dry_run, destroy_orphans = options.get("dry_run", False), options.get("destroy_orphans", False)
        import_unmanaged = options.get("import_unmanaged", False)
        import_project = options.get("import_project")
        report = HealReport(
            request_id=self.ctx.request_id, dry_run=dry_run, unreachable=dict(unreachable or {})
        )
        wanted = set(hosts) if hosts else None
        self.held_filters = {}  # host -> its port filters, from its guest list's answer
        known = self._registered_hosts()
        if wanted and wanted - set(known):
            raise exceptions.ComputeHostNotFound(host=", ".join(sorted(wanted - set(known))))
        targets = sorted(wanted or (set(reports) & set(known) if reports is not None else set(known)))
        # Read the records first, then ask the hosts: a guest list younger than the records
        # cannot make a build that finished in between look vanished.
        started = utcnow()
        seen = self._live_instances()
        # A host of a cell that does not answer is not asked: nothing of it is changed.
        targets = [h for h in targets if not self._host_down(h)]
        if reports is None:
            boot_ids = {}
            reports = self._ask_hosts(targets, report, dry_run, boot_ids)
            reported_at = started
        else:
            reports = {h: g for h, g in reports.items() if h in targets}
            boot_ids = {h: b for h, b in (boot_ids or {}).items() if h in reports}
            if not dry_run:
                # The playbook's hosts answered (or not, with Ansible's reason): record each contact.
                answered = [ComputeResult(request_id="", host=h, operation="list_instances") for h in reports]
                host_records.record_contacts(self.db, answered, report.unreachable)
            reported_at = reported_at or started
        report.hosts = sorted(reports)
        booted, booted_elsewhere = self._take_boots(boot_ids, dry_run)
        step = self._tolerant
        for host, guests in sorted(reports.items()):
            guests = {u: int(p) for u, p in guests.items()}
            mine = [s for s in seen.values() if s.host == host]
            for s in mine:
                if s.changed_at >= reported_at or s.vm_state == VmState.BUILDING.value:
                    continue  # changed after the host answered (its guest list is stale), or a build
                if s.task_state is not None:
                    if not self._owner_gone(s):
                        continue  # its owner will record the outcome (Nova's sync skips it too)
                    c = self._in_cell(s.cell, self._recover, s, guests.get(s.uuid), host, dry_run)
                elif host in booted_elsewhere:
                    continue  # another heal took this host's boot: its guests are that heal's
                elif host in booted and self._resumes(s, guests.get(s.uuid)):
                    c = self._in_cell(s.cell, self._resume_on_boot, s, guests[s.uuid], host, dry_run)
                else:
                    c = self._in_cell(s.cell, self._sync_one, s, guests.get(s.uuid), host, dry_run)
                if c is not None:
                    report.corrections.append(c)
            try:
                moved, handled = self._moved_away(host, guests, dry_run)
            except LOST_RACE as exc:  # a racing heal moved a migration on: its guests are left
                LOG.warning("heal of moves away from %s cut short: %s", host, exc.format_message())
                moved, handled = [], set(guests)
            report.corrections.extend(moved)
            others = {u: p for u, p in guests.items() if u not in handled}
            report.corrections.extend(
                step(self._orphan_guests, host, others, reported_at, dry_run, destroy_orphans)
            )
        if booted and not dry_run:
            self._end_boots(booted)
        # Security groups: each answering host's port filters as the records say (``heal.filters``).
        report.corrections.extend(step(self._port_filters, self.held_filters, dry_run))
        if not wanted:
            # A delete of a server no host holds needs no host's answer; nor does an unshelve cut
            # off before a host was chosen for it (offloaded again).
            for s in seen.values():
                hostless = s.task_state == TaskState.DELETING.value or is_unshelve(s.task_state, s.vm_state)
                if s.host is None and hostless and self._owner_gone(s):
                    c = self._in_cell(s.cell, self._recover, s, None, None, dry_run)
                    if c is not None:
                        report.corrections.append(c)
        # Each step tolerates a racing heal (``HealerBase._tolerant``): one cut short by a lost
        # race leaves the rest of the run to be done.
        report.corrections.extend(step(self._reap_stuck_builds, wanted, dry_run, reports))
        if not wanted:
            # Before the abandoned actions: a confirm cut off is finished in its own action.
            report.corrections.extend(step(self._interrupted_confirms, seen, reports, dry_run))
            report.corrections.extend(step(self._abandoned_actions, dry_run))
            report.corrections.extend(step(self._stray_copies, dry_run))
            report.corrections.extend(step(self._orphan_attachments, dry_run))
            report.corrections.extend(step(self._orphan_ports, dry_run))
            report.corrections.extend(step(self._due_moves, dry_run))
            # A move of a server that is gone ends as its delete would have ended it.
            report.corrections.extend(step(self._moves_of_gone_servers, reports, dry_run))
        # After the orphan attachments: a volume whose server is gone is released there.
        report.corrections.extend(step(self._interrupted_volumes, wanted, seen, report, dry_run))
        report.corrections.extend(step(self._orphan_allocations, wanted, dry_run))
        if import_unmanaged:
            report.corrections.extend(self._import_unmanaged(report, dry_run, import_project))
        report.down_cells = {cell.name: why for cell, why in self.down.items()}
        report.zones_without_enabled_host = fleet_aggregates.zones_without_enabled_host(self.db, self.conf)
        return report

    # ------------------------------------------------------------------ reading

    def _registered_hosts(self) -> list[str]:
        with self.db.reader() as session:
            return list(session.execute(select(ComputeNode.host).where(ComputeNode.deleted == 0)).scalars())

    def _live_instances(self) -> dict[str, _Seen]:
        """Every cell's live instances, each with the cell it lives in; copies are put aside."""
        found = self._gather(
            lambda cell, session: [_Seen(i, cell) for i in db_api.instance_get_all(session, self.ctx)]
        )
        self._read_mappings()
        rows = [s for _cell, seen in found for s in seen]
        self._copies = [s for s in rows if self._is_copy(s.cell, s.uuid)]
        return {s.uuid: s for s in rows if not self._is_copy(s.cell, s.uuid)}

    def _ask_hosts(
        self, hosts: list[str], report: HealReport, dry_run: bool, boot_ids: dict[str, str]
    ) -> dict[str, dict[str, int]]:
        """Each host's guest list (and into ``boot_ids``, its boot id where it has one)."""
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
            if result.host_boot_id:
                boot_ids[req.host] = result.host_boot_id
            if result.port_filters is not None:
                self.held_filters[req.host] = result.port_filters
        return out


class HealOptions(TypedDict, total=False):
    """What one heal run is told (each optional): ``hosts``, the hosts to compare (default:
    all registered); ``reports`` (host -> uuid -> power state): the guest lists, which skips
    asking the hosts; ``reported_at`` (UTC): when they were asked; ``unreachable`` (host -> why):
    the hosts that gave none; ``boot_ids``: with reports, each host's boot id
    (``novakit.heal.host_boot``); ``dry_run``; ``destroy_orphans``; ``import_unmanaged`` and
    ``import_project``: adopt guests novakit did not create, into that project."""

    hosts: Iterable[str] | None
    reports: dict[str, dict[str, int]] | None
    reported_at: dt.datetime | None
    dry_run: bool
    destroy_orphans: bool
    unreachable: dict[str, str] | None
    import_unmanaged: bool
    import_project: str | None
    boot_ids: dict[str, str] | None


def heal(
    db: Database,
    conf: Config,
    *,
    ctx: RequestContext | None = None,
    rpc: ComputeRPC | None = None,
    clock: Callable[[], dt.datetime] | None = None,
    **options: Unpack[HealOptions],
) -> HealReport:
    """Compare each host's guests with the database and correct it (see the module docstring).

    Without ``reports`` the hosts are asked through ``rpc`` (direct mode; a
    ``novakit.compute.rpc.ComputeRPC``); a playbook passes the guest lists its
    ``compute`` tasks returned, the time it asked (``reported_at``, UTC) and the
    hosts it could not reach, and each host's boot id (``boot_ids``) (``options``:
    ``HealOptions``). ``clock``: heal's "now" (naive UTC) for leases.

    ``ctx`` is the caller, who must be an admin (``novakit.policy``): heal changes every
    project's records. Without one, the caller is the library's own (Python code that
    holds the database, an operator by the trust model).
    """
    if ctx is not None:
        policy.authorize(ctx, "heal")
        if options.get("import_unmanaged"):
            policy.authorize(ctx, "host:import")
    project = options.get("import_project")
    if project is not None:
        from novakit.fleet.importer import validate_project

        options["import_project"] = validate_project(project)
    return Healer(db, conf, ctx, rpc, clock).run(**options)


def reports_from_compute_results(
    registered: dict[str, Any],
) -> tuple[dict[str, dict[str, int]], dict[str, str], dict[str, str]]:
    """Guest lists from what the ``compute`` module returned per host (``operation: list_instances``),
    the hosts that gave none (with why), and the boot ids of those that have one.

    A host with no usable answer (unreachable, failed task) is returned as
    unreachable, never as a host without guests: that would make every server
    on it look vanished.
    """
    reports: dict[str, dict[str, int]] = {}
    missing: dict[str, str] = {}
    boot_ids: dict[str, str] = {}
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
        if result.host_boot_id:
            boot_ids[host] = result.host_boot_id
    return reports, missing, boot_ids
