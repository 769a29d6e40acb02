"""``heal`` and its ``Healer``: one heal run (the rules: package docstring, ``novakit.heal``)."""

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
from novakit.heal import uploads
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
from novakit.heal.interfaces import InterfaceRecovery
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
    PowerSync,
    HostBoot,
    TaskRecovery,
    StuckBuilds,
    Orphans,
    Moves,
    MoveRecovery,
    VolumeRecovery,
    PortFilters,
    InterfaceRecovery,
):
    """One heal run: read the records, ask the hosts, correct what disagrees."""

    # ------------------------------------------------------------------ entry

    def run(self, **options: Unpack[HealOptions]) -> HealReport:
        """Compare, correct, report (``options``: ``HealOptions``)."""
        hosts, reports = options.get("hosts"), options.get("reports")
        dry_run, destroy_orphans = options.get("dry_run", False), options.get("destroy_orphans", False)
        report = HealReport(
            request_id=self.ctx.request_id,
            dry_run=dry_run,
            unreachable=dict(options.get("unreachable") or {}),
        )
        wanted = set(hosts) if hosts else None
        self.held_filters = {}  # host -> its port filters, from its guest list's answer
        targets = self._targets(wanted, reports)
        # Read the records first, then ask the hosts: a guest list younger than the records
        # cannot make a build that finished in between look vanished.
        started = utcnow()
        seen = self._live_instances()
        # A host of a cell that does not answer is not asked: nothing of it is changed.
        targets = [h for h in targets if not self._host_down(h)]
        reports, boot_ids, reported_at = self._guest_lists(targets, report, started, options)
        report.hosts = sorted(reports)
        booted, booted_elsewhere = self._take_boots(boot_ids, dry_run)
        step = self._tolerant
        for host, guests in sorted(reports.items()):
            guests = {u: int(p) for u, p in guests.items()}
            for s in seen.values():
                if s.host != host or s.changed_at >= reported_at or s.vm_state == VmState.BUILDING.value:
                    # another host's; changed after the host answered (its guest list is stale); a build
                    continue
                c = self._heal_server(s, guests, host, booted, booted_elsewhere, dry_run)
                if c is not None:
                    report.corrections.append(c)
            report.corrections.extend(
                self._unrecorded_guests(host, guests, reported_at, dry_run, destroy_orphans)
            )
        if booted and not dry_run:
            self._end_boots(booted)
        if not wanted:
            report.corrections.extend(self._hostless_tasks(seen, dry_run))
        # Each step tolerates a racing heal (``HealerBase._tolerant``): one cut short by a lost
        # race leaves the rest of the run to be done.
        report.corrections.extend(step(self._reap_stuck_builds, wanted, dry_run, reports))
        if not wanted:
            report.corrections.extend(self._fleet_wide(seen, reports, dry_run))
        # After the orphan attachments: a volume whose server is gone is released there.
        report.corrections.extend(step(self._interrupted_volumes, wanted, seen, report, dry_run))
        report.corrections.extend(step(self._orphan_allocations, wanted, dry_run))
        # Security groups: each answering host's port filters as the records now say (``heal.filters``),
        # after the steps above have settled them: a build this run ended in error has its ports
        # freed, and a filter applied for them before would be left behind for the next run.
        report.corrections.extend(step(self._port_filters, self.held_filters, dry_run))
        if options.get("import_unmanaged", False):
            report.corrections.extend(self._import_unmanaged(report, dry_run, options.get("import_project")))
        report.down_cells = {cell.name: why for cell, why in self.down.items()}
        report.zones_without_enabled_host = fleet_aggregates.zones_without_enabled_host(self.db, self.conf)
        return report

    # ------------------------------------------------------------------ the run's steps

    def _targets(self, wanted: set[str] | None, reports: dict[str, dict[str, int]] | None) -> list[str]:
        """The hosts this run compares: those asked for (each must be registered), else those
        whose guest list was handed in, else every registered host."""
        known = self._registered_hosts()
        if wanted and wanted - set(known):
            raise exceptions.ComputeHostNotFound(host=", ".join(sorted(wanted - set(known))))
        return sorted(wanted or (set(reports) & set(known) if reports is not None else set(known)))

    def _guest_lists(
        self, targets: list[str], report: HealReport, started: dt.datetime, options: HealOptions
    ) -> tuple[dict[str, dict[str, int]], dict[str, str], dt.datetime]:
        """The guest lists of ``targets``, their hosts' boot ids and when the lists were taken:
        asked of the hosts now, or those the playbook handed in (``options``)."""
        dry_run = options.get("dry_run", False)
        reports = options.get("reports")
        if reports is None:
            boot_ids: dict[str, str] = {}
            return self._ask_hosts(targets, report, dry_run, boot_ids), boot_ids, started
        reports = {h: g for h, g in reports.items() if h in targets}
        boot_ids = {h: b for h, b in (options.get("boot_ids") or {}).items() if h in reports}
        if not dry_run:
            # The playbook's hosts answered (or not, with Ansible's reason): record each contact.
            answered = [ComputeResult(request_id="", host=h, operation="list_instances") for h in reports]
            host_records.record_contacts(self.db, answered, report.unreachable)
        return reports, boot_ids, options.get("reported_at") or started

    def _heal_server(
        self,
        s: _Seen,
        guests: dict[str, int],
        host: str,
        booted: set[str],
        booted_elsewhere: set[str],
        dry_run: bool,
    ) -> Correction | None:
        """One server of ``host`` against the host's guest list: its task ended if its owner is
        gone, its guest resumed if the host booted, else its records synced with its guest."""
        reported = guests.get(s.uuid)
        if s.task_state is not None:
            if not self._owner_gone(s):
                return None  # its owner will record the outcome (Nova's sync skips it too)
            c: Correction | None = self._in_cell(s.cell, self._recover, s, reported, host, dry_run)
        elif host in booted_elsewhere:
            return None  # another heal took this host's boot: its guests are that heal's
        elif host in booted and self._resumes(s, reported):
            c = self._in_cell(s.cell, self._resume_on_boot, s, guests[s.uuid], host, dry_run)
        else:
            c = self._in_cell(s.cell, self._sync_one, s, reported, host, dry_run)
        return c

    def _unrecorded_guests(
        self,
        host: str,
        guests: dict[str, int],
        reported_at: dt.datetime,
        dry_run: bool,
        destroy_orphans: bool,
    ) -> list[Correction]:
        """The guests of ``host`` that belong to a move away from it, then those no record holds."""
        try:
            moved, handled = self._moved_away(host, guests, dry_run)
        except LOST_RACE as exc:  # a racing heal moved a migration on: its guests are left
            LOG.warning("heal of moves away from %s cut short: %s", host, exc.format_message())
            moved, handled = [], set(guests)
        others = {u: p for u, p in guests.items() if u not in handled}
        return moved + self._tolerant(
            self._orphan_guests, host, others, reported_at, dry_run, destroy_orphans
        )

    def _hostless_tasks(self, seen: dict[str, _Seen], dry_run: bool) -> list[Correction]:
        """A delete of a server no host holds needs no host's answer; nor does an unshelve cut
        off before a host was chosen for it (offloaded again)."""
        out = []
        for s in seen.values():
            hostless = s.task_state == TaskState.DELETING.value or is_unshelve(s.task_state, s.vm_state)
            if s.host is None and hostless and self._owner_gone(s):
                c = self._in_cell(s.cell, self._recover, s, None, None, dry_run)
                if c is not None:
                    out.append(c)
        return out

    def _fleet_wide(
        self, seen: dict[str, _Seen], reports: dict[str, dict[str, int]], dry_run: bool
    ) -> list[Correction]:
        """The steps of a run over every host: records that no single host's answer settles."""
        step = self._tolerant
        # Before the abandoned actions: a confirm cut off is finished in its own action.
        out = step(self._interrupted_confirms, seen, reports, dry_run)
        out += step(self._abandoned_actions, dry_run)
        out += step(self._stray_copies, dry_run)
        out += step(self._orphan_attachments, dry_run)
        out += step(self._orphan_ports, dry_run)
        # After the orphan ports: a port whose server is gone is freed there.
        out += step(self._interrupted_interface_attaches, seen, dry_run)
        out += step(self._due_moves, dry_run)
        # A move of a server that is gone ends as its delete would have ended it.
        out += step(self._moves_of_gone_servers, reports, dry_run)
        out += step(uploads.interrupted_uploads, self.db, self.conf, self.clock(), dry_run)
        return out

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
