"""Orphans: allocations no live instance holds, guests no server owns, and guests novakit did not create."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select

from novakit.compute.messages import (
    ComputeRequest,
    FlavorSpec,
    ImageSpec,
    InstanceSpec,
)
from novakit.context import RequestContext
from novakit.db.models import Allocation, Instance, ResourceProvider
from novakit.heal.base import (
    Correction,
    HealerBase,
    HealReport,
    _power,
)


class Orphans(HealerBase):
    """Remove orphan allocations, report (or destroy) orphan guests, import unmanaged ones."""

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
