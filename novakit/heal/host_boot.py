"""A host that booted: its guests come back as the records hold them (Nova's
``resume_guests_state_on_host_boot``).

After a host's reboot its guests are shut off until something starts them, while their
servers are recorded ACTIVE. Nova's compute service, starting on that host, hard-reboots
each instance whose recorded power state is RUNNING and whose guest is not (when
``resume_guests_state_on_host_boot`` is set); without that, its power-state sync would
record them stopped. Heal does the same: each host's answer carries its boot id
(``ComputeDriver.host_boot_id``), heal keeps the last one it saw in the host's
``compute_nodes.stats["boot_id"]``, and a host whose boot id changed is one that booted
since. Its servers recorded ACTIVE and RUNNING whose guest is found off get a hard reboot
(``compute.resume_guests_state_on_host_boot``, on by default; off: the power-state sync
records them stopped, as before); one that fails to come back is set to ERROR with a fault,
as Nova does.

Taking a boot is a guarded write of the new boot id (on the node's ``updated_at``) with a
lease (``resuming_until``, ``build_timeout`` ahead), ended when its guests are dealt with:
of two heals at once only one resumes the guests, and another heal leaves that host's
servers alone while the lease runs (not even its power-state sync, which would stop a
guest not started yet). A boot id is recorded before the guests are started: a heal cut
off in between leaves them, once its lease is out, to the power-state sync of the next one
(recorded stopped, nothing started twice). Without ``resume_guests_state_on_host_boot``
a boot is recorded with no lease: there is nothing to start. A host reached over the
network (a remote libvirt URI) reports no boot id, and nothing here applies to it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from novakit.compute import actions
from novakit.compute.rpc import instance_spec
from novakit.compute.states import PowerState, VmState
from novakit.db import api as db_api
from novakit.db.models import ComputeNode, utcnow
from novakit.exceptions import ComputeError
from novakit.heal.base import Correction, HealerBase, _power, _Seen, recover_event
from novakit.host.faults import fault_from_exception
from novakit.host.messages import ComputeRequest, Event

RESUME_EVENT = "compute_resume_guests_state_on_host_boot"
#: in a node's stats while a heal starts the guests of the boot it took (an ISO time: its lease)
RESUMING_UNTIL = "resuming_until"
#: what a guest of a host that booted is found as, when nothing started it again
_NOT_STARTED = (PowerState.SHUTDOWN, PowerState.CRASHED, PowerState.NOSTATE)


class HostBoot(HealerBase):
    """Hosts that booted since heal last saw them, and their guests brought back."""

    def _take_boots(self, boot_ids: dict[str, str], dry_run: bool) -> tuple[set[str], set[str]]:
        """The hosts that booted since their last recorded boot id: (taken here, being resumed by
        another heal). A host seen for the first time has its boot id recorded and counts as not
        booted. In a dry run nothing is recorded and every boot is "taken"."""
        if not boot_ids:
            return set(), set()
        with self.db.reader() as session:
            nodes = session.execute(
                select(ComputeNode.id, ComputeNode.host, ComputeNode.stats, ComputeNode.updated_at).where(
                    ComputeNode.host.in_(sorted(boot_ids)), ComputeNode.deleted == 0
                )
            ).all()
        now = self.clock()
        taken: set[str] = set()
        lost: set[str] = set()
        for node_id, host, stats, updated_at in nodes:
            stats = dict(stats or {})
            seen = stats.get("boot_id")
            if seen == boot_ids[host]:
                until = stats.get(RESUMING_UNTIL)
                if until and dt.datetime.fromisoformat(until) > now:
                    lost.add(host)  # another heal took this boot and is starting its guests
                continue
            if dry_run:
                if seen is not None:
                    taken.add(host)
                continue
            new = {**stats, "boot_id": boot_ids[host]}
            if seen is not None and self.conf.compute.resume_guests_state_on_host_boot:
                lease = now + dt.timedelta(seconds=self.conf.compute.build_timeout)
                new[RESUMING_UNTIL] = lease.isoformat()
            won = self._write_stats(node_id, updated_at, new)
            if seen is None:
                continue  # first sight of this host: nothing to compare with
            (taken if won else lost).add(host)
        return taken, lost

    def _end_boots(self, hosts: set[str]) -> None:
        """The guests of these hosts' boots are all dealt with: other heals may sync them again."""
        for host in sorted(hosts):

            def write(session: Session, host: str = host) -> None:
                node = session.execute(
                    select(ComputeNode).where(ComputeNode.host == host, ComputeNode.deleted == 0)
                ).scalar_one_or_none()
                if node is not None and RESUMING_UNTIL in (node.stats or {}):
                    node.stats = {k: v for k, v in node.stats.items() if k != RESUMING_UNTIL}

            self.db.run_in_transaction(write)

    def _write_stats(self, node_id: int, updated_at: dt.datetime | None, stats: dict[str, Any]) -> bool:
        """Write a node's stats if the node is as it was read (its ``updated_at``)."""

        def write(session: Session) -> int:
            same = (
                ComputeNode.updated_at.is_(None)
                if updated_at is None
                else ComputeNode.updated_at == updated_at
            )
            done = session.execute(
                update(ComputeNode)
                .where(ComputeNode.id == node_id, same)
                .values(stats=stats, updated_at=utcnow())
            )
            return int(done.rowcount)  # type: ignore[attr-defined]

        return bool(self.db.run_in_transaction(write) == 1)

    def _resumes(self, s: _Seen, reported: int | None) -> bool:
        """Whether ``s``, on a host that booted, is one to bring back: idle, ACTIVE and RUNNING
        in the records, its guest there and not running."""
        return (
            self.conf.compute.resume_guests_state_on_host_boot
            and s.task_state is None
            and s.vm_state == VmState.ACTIVE.value
            and s.power_state == PowerState.RUNNING
            and reported in {int(p) for p in _NOT_STARTED}
        )

    def _resume_on_boot(self, s: _Seen, reported: int, host: str, dry_run: bool) -> Correction:
        c = Correction(
            kind="resumed_after_host_boot",
            instance=s.uuid,
            host=host,
            before=f"{s.vm_state}/{_power(reported)}",
            after=f"{s.vm_state}/{_power(int(PowerState.RUNNING))}",
            detail=f"host {host} booted and left the guest {_power(reported)}; started again with a hard "
            "reboot as the records hold it running (Nova's resume_guests_state_on_host_boot)",
        )
        if dry_run:
            return c
        result = self._hard_reboot(s.uuid, host)
        res = result.results[0] if result.results else None
        ok = res is not None and res.ok
        events = [
            recover_event(c.detail, ok=ok, host=host, event=RESUME_EVENT),
            *(res.events if res is not None else []),
        ]
        if res is not None and res.ok:
            power = res.power_state if res.power_state is not None else int(PowerState.RUNNING)

            def started(session: Session) -> None:
                self._guarded(s, {"power_state": power}, session)
                actions.record_outcome(
                    session, self.ctx, s.uuid, start="reboot", events=events, finish="reboot"
                )

            c.applied = self._write(c, started)
            return c
        fault = (res.fault if res is not None else None) or result.error
        self._not_resumed(
            c, s, reported, host, events, fault.message if fault else "the host did not start the guest"
        )
        return c

    def _hard_reboot(self, uuid: str, host: str) -> Any:
        with self.db.reader() as session:
            spec = instance_spec(session, db_api.instance_get(session, self.ctx, uuid))
        return self.rpc.send(
            ComputeRequest(
                request_id=self.ctx.request_id,
                host=host,
                operation="reboot",
                instances=[spec],
                options={"reboot_type": "HARD"},
            )
        )

    def _not_resumed(
        self, c: Correction, s: _Seen, reported: int, host: str, events: list[Event], why: str
    ) -> None:
        """A guest that did not come back: its server in ERROR with a fault, as Nova's."""
        c.error = why
        c.after = "error/" + _power(reported)
        failure = fault_from_exception(ComputeError(reason=why), host)
        failure.message = f"Instance {s.uuid} did not come back after host {host} booted: {why}"

        def failed(session: Session) -> None:
            self._guarded(s, {"vm_state": VmState.ERROR, "power_state": reported}, session)
            actions.record_outcome(
                session, self.ctx, s.uuid, start="reboot", events=events, fault=failure, finish="reboot"
            )

        if self._write(c, failed):
            self.notifier.state_update(s.uuid, (s.vm_state, None), (VmState.ERROR.value, None), host=host)
