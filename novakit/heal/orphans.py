"""Orphans: allocations no live instance holds, guests no server owns, copies no mapping points
at, and guests novakit did not create.

Whether a live server holds a guest or a claim is asked of its mapping and its cell
(``Orphans._holders``): a server's record is in one cell's database, its guest on a
host and its claim in the API database, and a server may be moving between cells.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import select

from novakit.cells import moves
from novakit.cells.registry import Cell
from novakit.context import RequestContext
from novakit.db.models import Allocation, Instance, InstanceMapping, ResourceProvider
from novakit.heal.base import (
    LOST_RACE,
    Correction,
    HealerBase,
    HealReport,
    _power,
    _Seen,
    apply,
    bare_spec,
    skipped,
)
from novakit.host.messages import (
    ComputeRequest,
)

#: uuids per IN list: well under every backend's limit on bound parameters
_CHUNK = 500


def _chunks(uuids: Sequence[str]) -> Iterator[list[str]]:
    items = sorted(set(uuids))
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]


def _since(since: dt.datetime | None, *times: dt.datetime | None) -> bool:
    """Whether any of ``times`` is at or after ``since`` (never, without one)."""
    return since is not None and any(t is not None and t >= since for t in times)


@dataclass
class _Held:
    """``Orphans._holders``' answer. A uuid in neither set is not known: never an orphan."""

    gone: set[str] = field(default_factory=set)  # no live server holds it
    hosts: dict[str, str | None] = field(default_factory=dict)  # the live server's host


class Orphans(HealerBase):
    """Remove orphan allocations, report (or destroy) orphan guests, import unmanaged ones."""

    # ------------------------------------------------------------------ orphans

    def _orphan_guests(
        self, host: str, guests: dict[str, int], reported_at: dt.datetime, dry_run: bool, destroy: bool
    ) -> list[Correction]:
        if not guests:
            return []
        held = self._holders(list(guests), reported_at)
        # A guest of a live server on another host is a leftover (a reschedule's, an evacuation's).
        orphans = held.gone | {u for u, on in held.hosts.items() if on != host}
        out = []
        for uuid in sorted(orphans):
            c = Correction(
                kind="orphan_guest",
                instance=uuid,
                host=host,
                before=_power(guests[uuid]),
                after="destroyed" if destroy else _power(guests[uuid]),
                detail=f"a guest on {host} that no live instance on that host owns",
            )
            if destroy and not dry_run:
                spec = bare_spec(uuid, f"orphan-{uuid}", "orphan")
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
        from novakit.placement import api as placement

        with self.db.reader() as session:
            stmt = (
                select(Allocation.consumer_id, ResourceProvider.name)
                .distinct()
                .join(ResourceProvider, ResourceProvider.id == Allocation.resource_provider_id)
            )
            if hosts:
                stmt = stmt.where(ResourceProvider.name.in_(sorted(hosts)))
            held = [(c, p) for c, p in session.execute(stmt).all() if not self._host_down(p)]
            # A live volume's claim (its DISK_GB, consumer = the volume) is no orphan.
            from novakit.db.models import Volume

            volumes = set(
                session.execute(
                    select(Volume.uuid).where(Volume.deleted == 0, Volume.uuid.in_([c for c, _ in held]))
                ).scalars()
            )
            # Nor is a move's claim on its source (consumer = the migration) while the move holds it.
            from novakit.db.models import Migration
            from novakit.moves.migrations import IN_PROGRESS

            moving = set(
                session.execute(
                    select(Migration.uuid).where(
                        Migration.status.in_(IN_PROGRESS), Migration.uuid.in_([c for c, _ in held])
                    )
                ).scalars()
            )
            held = [(c, p) for c, p in held if c not in volumes and c not in moving]
        gone = self._holders([c for c, _ in held], None).gone
        found = sorted((c, p) for c, p in held if c in gone)
        return [
            apply(
                Correction(
                    kind="orphan_allocation",
                    instance=consumer,
                    host=provider,
                    before="allocated",
                    after="freed",
                    detail=f"resources on {provider} held by no live instance",
                ),
                dry_run,
                partial(placement.remove_allocations, self.db, consumer),
            )
            for consumer, provider in found
        ]

    def _orphan_attachments(self, dry_run: bool) -> list[Correction]:
        """Volumes attached in the records to servers that are gone: released (Cinder's
        attachment of a deleted server, which Nova's delete would have removed)."""
        from novakit.volume import attachments

        return [
            apply(
                Correction(
                    kind="orphan_attachment",
                    instance=server,
                    before="attached",
                    after="available",
                    detail=f"volume {volume} attached to a server that no longer exists",
                ),
                dry_run,
                partial(attachments.release_server, self, self.ctx, server),
            )
            for volume, server in attachments.attached_to_gone_servers(self)
        ]

    def _orphan_ports(self, dry_run: bool) -> list[Correction]:
        """Ports bound to servers that are gone (deleted, or never known): freed as the server's
        delete would have freed them (``ports.free_for_instance``: made for it, deleted with
        their addresses; given to it, unbound). The ports are read before their servers: a
        port is written with its server's mapping, so a server being created now is never
        taken for gone."""
        from novakit.db.models import Port
        from novakit.network import ports

        with self.db.reader() as session:
            devices = sorted(
                {
                    d
                    for d in session.execute(
                        select(Port.device_id).where(Port.device_id.isnot(None))
                    ).scalars()
                    if d
                }
            )
        gone = self._holders(devices, None).gone if devices else set()
        return [
            apply(
                Correction(
                    kind="orphan_port",
                    instance=uuid,
                    before="bound",
                    after="freed",
                    detail="ports bound to a server that no longer exists",
                ),
                dry_run,
                partial(self.db.run_in_transaction, partial(ports.free_for_instance, instance_uuid=uuid)),
            )
            for uuid in sorted(gone)
        ]

    def _holders(self, uuids: Sequence[str], since: dt.datetime | None) -> _Held:
        """Which of ``uuids`` (guests, consumers of claims) a live server holds, and on which host.

        The one place heal decides what has no server: the instance mapping says which
        cell to ask (a server may be in another database than its host's, moving), and
        that cell's record whether the server lives. Never mapped, or its record deleted:
        gone. Not known, and so never an orphan: its cell is down, its record changed
        at or after ``since`` (the guest list is older than the record), or the mapped
        cell has no record of it (a move between databases, between its two steps).
        """
        out = _Held()
        mapped: dict[str, Any] = {}
        with self.db.reader() as session:
            for chunk in _chunks(uuids):
                for m in session.execute(
                    select(
                        InstanceMapping.instance_uuid,
                        InstanceMapping.cell_id,
                        InstanceMapping.deleted,
                        InstanceMapping.deleted_at,
                    ).where(InstanceMapping.instance_uuid.in_(chunk))
                ):
                    mapped[m.instance_uuid] = m
        by_cell: dict[Cell, list[str]] = defaultdict(list)
        for uuid in uuids:
            if uuid in mapped:
                by_cell[self.db.cells.by_id(mapped[uuid].cell_id)].append(uuid)
            else:
                out.gone.add(uuid)
        for cell, group in by_cell.items():
            records = self._in_cell(cell, self._records, group)
            if records is None:
                continue  # its cell is down
            for uuid in group:
                row, mapping = records.get(uuid), mapped[uuid]
                if row is None:
                    if mapping.deleted and not _since(since, mapping.deleted_at):
                        out.gone.add(uuid)  # deleted, and its record since removed
                elif _since(since, row.updated_at or row.created_at, row.deleted_at):
                    continue
                elif row.deleted:
                    out.gone.add(uuid)
                else:
                    out.hosts[uuid] = row.host
        return out

    def _records(self, uuids: Sequence[str]) -> dict[str, Any]:
        """The targeted cell's records of ``uuids``, deleted or not."""
        with self.db.reader() as session:
            return {
                row.uuid: row
                for chunk in _chunks(uuids)
                for row in session.execute(
                    select(
                        Instance.uuid,
                        Instance.host,
                        Instance.deleted,
                        Instance.created_at,
                        Instance.updated_at,
                        Instance.deleted_at,
                    ).where(Instance.uuid.in_(chunk))
                )
            }

    def _stray_copies(self, dry_run: bool) -> list[Correction]:
        """Remove the copies cut-off moves left (``HealerBase._is_copy``), once the move is over.

        A copy carries the lease of the server it was copied from, renewed just before the
        move (in the claims' transaction): a move still running holds it, as any owner holds
        its task. With the lease run out (or, without one, the row older than
        ``build_timeout``) and the mapping still naming another database when heal writes,
        the copy is nobody's, and no move can make it the server later: a move into its cell
        would first have to insert the same uuid there.
        """
        now = self.clock()
        older = now - dt.timedelta(seconds=self.conf.compute.build_timeout)
        out = []
        for s in self._copies:
            lease = s.task_lease_until
            if (lease >= now) if lease is not None else (s.changed_at >= older):
                continue  # its move may still be running
            home = self.db.cells.by_id(self._mapped[s.uuid])
            c = Correction(
                kind="stray_copy",
                instance=s.uuid,
                host=s.host,
                before=f"copy in {s.cell.name}",
                after="removed",
                detail=f"a copy of the server in the database of {s.cell.name}, which its mapping does "
                f"not point at (a move cut off between its copy and its swap); the server is in {home.name}",
            )
            if not dry_run:
                try:
                    done = self._in_cell(s.cell, self._remove_copy, s)
                except LOST_RACE as exc:
                    skipped(c, exc)
                    out.append(c)
                    continue
                if done is None:
                    continue  # its cell stopped answering: left as it is, the cell reported
                c.applied = done
                if not done:
                    c.error = "skipped: its mapping changed meanwhile"
            out.append(c)
        return out

    def _remove_copy(self, s: _Seen) -> bool:
        """Remove the copy ``s`` if its mapping (read afresh) still names another database."""
        found = self.db.cells.of_instances([s.uuid])
        if not found or self.db.cells.url_of(next(iter(found))) == self.db.cells.url_of(s.cell):
            return False
        moves.remove_copies(self.db, s.cell, [s.uuid])
        return True

    def _import_unmanaged(self, report: HealReport, dry_run: bool, project: str | None) -> list[Correction]:
        from novakit.fleet import importer

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
