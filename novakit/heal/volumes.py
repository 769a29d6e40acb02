"""Volumes whose caller is gone, settled as Cinder's volume manager settles them when it starts
(``init_host``) and as Nova's compute does a server's volumes in ``_init_instance``.

A volume has no owner or lease: the request that put it in a transitional status moves it on
within ``compute.build_timeout`` or was killed in between (``novakit.volume.states.abandoned``
decides which). Once abandoned, heal settles it by ``RULES``; the guest's definition, as its
host reports it (``get_info``), decides whether an interrupted attach or detach happened. Every
write expects the status and the last change heal read (``set_status(unchanged_since=...)``),
so a caller that comes back, or a new one, wins and heal reports the volume skipped.

A volume attached to a server that is still building belongs to the build (a root volume,
``creating`` or ``reserved``): heal's stuck-build rule frees it with the server. One whose
host does not answer, or whose server's cell is down, is left as it is: the rule waits for
the truth.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.compute.states import VmState
from novakit.db.models import Volume, VolumeAttachment
from novakit.heal.base import Correction, HealerBase, HealReport, _Seen, bare_spec
from novakit.host.messages import (
    ComputeRequest,
    InstanceResult,
)
from novakit.volume import attachments, volumes
from novakit.volume.states import TRANSITIONAL, VolumeStatus, abandoned, set_status

S = VolumeStatus

#: what heal does with an abandoned volume, by its status and what its guest shows ("-": the
#: host is not asked); the table of ``novakit.heal``'s docstring and of README's heal section
RULES: dict[VolumeStatus, dict[str, str]] = {
    S.CREATING: {"-": "error, interrupted (Cinder); its claim stays until the volume is deleted"},
    S.RESERVED: {"-": "available, the attachment removed: the attach never started"},
    S.ATTACHING: {
        "attached": "in-use: the attach happened",
        "not attached": "available, the attachment removed: it did not",
    },
    S.DETACHING: {
        "attached": "in-use again: the detach did not happen",
        "not attached": "available, the attachment removed: it happened",
    },
    S.DELETING: {"-": "deleted again on its host, then its row and claim go (Cinder deletes again)"},
}


@dataclass
class _Stuck:
    """An abandoned volume as heal read it, with its live attachment if any."""

    volume: Volume
    changed_at: dt.datetime
    server: str | None

    @property
    def status(self) -> VolumeStatus:
        return VolumeStatus(self.volume.status)


class VolumeRecovery(HealerBase):
    """Settle the volumes that their callers left in a transitional status."""

    def _interrupted_volumes(
        self, hosts: set[str] | None, seen: dict[str, _Seen], report: HealReport, dry_run: bool
    ) -> list[Correction]:
        """``hosts``: only the volumes of these (None: every host's); ``seen``: the live servers
        heal read, for the build a volume may belong to and the host its guest is on."""
        stuck = [
            v
            for v in self._abandoned_volumes(hosts)
            if not self._host_down(v.volume.host)
            # A server not read is gone (its attachments are heal's orphans) or in a cell down.
            and (v.server is None or v.server in seen)
            and (v.server is None or seen[v.server].vm_state != VmState.BUILDING.value)
        ]
        # Where each volume's guest is: its server's host (none: no guest), else the volume's.
        where = {v.volume.id: (seen[v.server].host if v.server is not None else v.volume.host) for v in stuck}
        # The guests of the servers whose attach or detach was cut off, asked once per host.
        asked: dict[str, set[str]] = defaultdict(set)
        for v in stuck:
            host = where[v.volume.id]
            if v.status in (S.ATTACHING, S.DETACHING) and v.server is not None and host:
                asked[host].add(v.server)
        guests, silent = self._guests(asked, report)
        return [
            self._settle(
                v,
                where[v.volume.id],
                guests.get(v.server or ""),
                silent.get(where[v.volume.id] or ""),
                dry_run,
            )
            for v in stuck
        ]

    def _abandoned_volumes(self, hosts: set[str] | None) -> list[_Stuck]:
        now, timeout = self.clock(), self.conf.compute.build_timeout
        stmt = (
            select(Volume, VolumeAttachment.instance_uuid)
            .outerjoin(
                VolumeAttachment,
                (VolumeAttachment.volume_id == Volume.id) & (VolumeAttachment.deleted == 0),
            )
            .where(Volume.deleted == 0, Volume.status.in_(sorted(TRANSITIONAL)))
            .order_by(Volume.id)
        )
        if hosts:
            stmt = stmt.where(Volume.host.in_(sorted(hosts)))
        with self.db.reader() as session:
            rows = session.execute(stmt).all()
        return [
            _Stuck(v, v.updated_at or v.created_at, server)
            for v, server in rows
            if abandoned(v.status, v.updated_at or v.created_at, now, timeout)
        ]

    def _guests(
        self, asked: dict[str, set[str]], report: HealReport
    ) -> tuple[dict[str, InstanceResult], dict[str, str]]:
        """Each asked server's guest as its host reports it (``get_info``), and the hosts that did
        not answer (host -> why); a host heal could not reach before is not asked again."""
        silent = dict(report.unreachable)
        requests = [
            ComputeRequest(
                request_id=self.ctx.request_id,
                host=host,
                operation="get_info",
                instances=[bare_spec(u, f"heal-{u}", "heal") for u in sorted(uuids)],
            )
            for host, uuids in sorted(asked.items())
            if host not in silent
        ]
        found: dict[str, InstanceResult] = {}
        for req, result in zip(requests, self.rpc.send_all(requests) if requests else [], strict=True):
            if result.error is not None:
                silent[req.host] = result.error.message
                continue
            found.update({r.uuid: r for r in result.results})
        return found, silent

    def _settle(
        self, v: _Stuck, host: str | None, guest: InstanceResult | None, silent: str | None, dry_run: bool
    ) -> Correction:
        """The correction of one abandoned volume (``host``: where its guest is; ``guest``: what
        that host reported of it; ``silent``: why the host did not answer), applied unless
        ``dry_run``."""
        vol = v.volume
        c = Correction(
            kind="volume_recovered",
            instance=vol.uuid,
            host=vol.host,
            before=vol.status,
            after=vol.status,
            detail=f"volume {vol.name} has been {vol.status} since {v.changed_at:%Y-%m-%d %H:%M:%S} UTC, "
            "longer than compute.build_timeout: the request that put it there is gone",
        )
        write: Callable[[Session], None]
        if v.status == S.DELETING:
            return self._delete_again(c, v, silent, dry_run)
        if v.status == S.CREATING:
            write = self._create_interrupted(v)
            c.after, says = S.ERROR.value, RULES[S.CREATING]["-"]
        elif v.status == S.RESERVED:
            write = partial(attachments.unreserve, volume_row_id=vol.id, unchanged_since=v.changed_at)
            c.after, says = S.AVAILABLE.value, RULES[S.RESERVED]["-"]
        else:  # attaching, detaching: the guest's definition decides
            attached, unknown = self._attached_on(v, host, guest, silent)
            if attached is None:
                return self._left(c, unknown)
            shows = "attached" if attached else "not attached"
            c.detail += f"; server {v.server or '(none)'} on {host or '(no host)'} has it {shows}"
            c.after = (S.IN_USE if attached else S.AVAILABLE).value
            says = RULES[v.status][shows]
            write = _end_attachment(v, attached)
        c.detail += ": " + says
        if not dry_run:
            self._apply(c, write)
        return c

    def _create_interrupted(self, v: _Stuck) -> Callable[[Session], None]:
        """A create that never finished: the volume in error, to be deleted to free its space."""
        reason = (
            f"interrupted: its create never finished (found by heal {self.ctx.request_id}); "
            "delete it to free its space"
        )[:255]
        return partial(
            set_status,
            volume_id=v.volume.id,
            step="create_interrupted",
            name=v.volume.name,
            reason=reason,
            unchanged_since=v.changed_at,
        )

    def _attached_on(
        self, v: _Stuck, host: str | None, guest: InstanceResult | None, silent: str | None
    ) -> tuple[bool | None, str]:
        """Whether the server's guest has the volume; None, with why, when that cannot be told."""
        if v.server is None:
            return False, ""  # no attachment: no server can have it
        if not host:
            return False, ""  # its server has no host, so no guest
        if silent is not None:
            return None, f"host {host} did not answer ({silent})"
        attached = self._attached(v.volume.uuid, guest)
        return attached, f"host {host}'s driver does not report the volumes of its guests"

    def _delete_again(self, c: Correction, v: _Stuck, silent: str | None, dry_run: bool) -> Correction:
        """Cinder's init_host deletes a ``deleting`` volume again: the host's delete (idempotent),
        then the row and its claim; a host that refuses leaves ``error_deleting`` with its reason,
        for the user to delete again."""
        vol = v.volume
        c.after = "deleted"
        c.detail += ": " + RULES[S.DELETING]["-"]
        if silent is not None:
            return self._left(c, f"host {vol.host} did not answer ({silent})")
        if dry_run:
            return c
        if vol.host:
            result = volumes.delete_on_host(self, self.ctx.request_id, vol)
            if result.error is not None:
                return self._left(c, f"host {vol.host} did not answer ({result.error.message})")
            fault = volumes.outcome(result, vol.uuid)
            if fault is not None:
                c.after = S.ERROR_DELETING.value
                self._apply(
                    c,
                    lambda s: set_status(
                        s,
                        vol.id,
                        "delete_failed",
                        name=vol.name,
                        reason=fault.message[:255],
                        unchanged_since=v.changed_at,
                    ),
                )
                return c
        self._apply(c, lambda s: volumes.finish_delete(s, vol))
        return c

    @staticmethod
    def _attached(volume_uuid: str, guest: InstanceResult | None) -> bool | None:
        """Whether the guest's definition has the volume; None: its host cannot tell."""
        if guest is None:
            return None
        if not guest.ok:
            gone = guest.fault is not None and guest.fault.exception_class == "InstanceNotFound"
            return False if gone else None  # no guest: nothing has the volume
        return None if guest.volumes is None else volume_uuid in guest.volumes

    @staticmethod
    def _left(c: Correction, why: str) -> Correction:
        c.after = c.before
        c.error = f"left as it is: {why}"
        return c

    def _apply(self, c: Correction, write: Callable[[Session], None]) -> None:
        try:
            self.db.run_in_transaction(write)
        except exceptions.InvalidVolume as exc:
            c.error = f"skipped: the volume changed meanwhile ({exc.format_message()})"
            return
        c.applied = True


def _end_attachment(v: _Stuck, attached: bool) -> Callable[[Session], None]:
    """An attach or a detach ended as the guest's definition shows it."""
    if v.status == S.ATTACHING:
        return partial(
            attachments.end_attach, volume_row_id=v.volume.id, attached=attached, unchanged_since=v.changed_at
        )
    return partial(
        attachments.end_detach,
        volume_row_id=v.volume.id,
        still_attached=attached,
        unchanged_since=v.changed_at,
    )
