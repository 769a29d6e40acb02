"""Attaches of a port to a server whose caller is gone (``novakit.compute.interfaces``).

An attach binds its port to the server first and writes the NIC into the server's ``networks``
only once the host attached it, in one transaction with the port's ACTIVE; a boot writes a
server's ``networks`` with the binding of its ports. So a port bound to a live server that does
not list it is an attach cut off between its binding and its end (its process killed, its host
call never answered), or one still under way: heal takes it for cut off once the port is
unchanged for ``compute.build_timeout`` (an attach has no task state, owner or lease; its port
is what it holds, as a volume's status is a volume attach's).

The guest may or may not have the NIC (the host may have attached it before the caller died),
so heal asks the host to detach it (``detach_interface``: idempotent, a NIC not there succeeds)
and then releases the port as the attach's own rollback does (``ports.release_from_server``:
one the attach made deleted with its address, a given one unbound), guarded by the binding and
the port's last change that heal read: a caller that comes back, or a second heal, wins and this
correction is skipped. A server still building owns its ports (its boot's), a server heal did not
read (gone: the orphan ports' rule; in a cell down) is left, and a host that does not answer
leaves the port as it is, reported with the reason, for the next heal.

==============================  ==========================  ======================================
port                            found                       heal does
==============================  ==========================  ======================================
bound to a live server that     unchanged for               the host detaches the NIC (if there),
does not list it among its      ``build_timeout``           then the port is released: the attach
NICs                                                        did not happen
==============================  ==========================  ======================================

A detach cut off needs no rule: the records keep the port attached until the host detached it,
and detaching it again finishes it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.compute.states import VmState
from novakit.db import api as db_api
from novakit.db.models import Network, Port
from novakit.heal.base import Correction, HealerBase, _Seen, apply, bare_spec
from novakit.host.messages import ComputeRequest, NetworkSpec
from novakit.network import ports


class InterfaceRecovery(HealerBase):
    """Release the ports of attaches that were cut off."""

    def _interrupted_interface_attaches(self, seen: dict[str, _Seen], dry_run: bool) -> list[Correction]:
        older = self.clock() - dt.timedelta(seconds=self.conf.compute.build_timeout)
        with self.db.reader() as session:
            rows = session.execute(
                select(Port, Network)
                .join(Network, Network.id == Port.network_id)
                .where(Port.device_id.isnot(None), Port.status == "BUILD")
                .order_by(Port.id)
            ).all()
            candidates = []
            for port, net in rows:
                s = seen.get(str(port.device_id))
                changed = port.updated_at or port.created_at
                if s is None or s.vm_state == VmState.BUILDING.value or self._host_down(s.host):
                    continue
                if changed is not None and changed > older:
                    continue  # an attach may still be under way
                nic = NetworkSpec(
                    type=net.provider,  # type: ignore[arg-type]
                    source=net.source,
                    mac=port.mac_address,
                    port_id=port.uuid,
                    fixed_ips=ports.fixed_ip_specs(ports.fixed_ips(session, [port.id])[port.id]),
                )
                candidates.append((s, nic, changed))
        out = []
        for s, nic, changed in candidates:
            listed = self._in_cell(s.cell, self._lists_port, s.uuid, nic.port_id)
            if listed is None or listed:
                continue  # its cell is down, or the server has it: no attach was cut off
            out.append(self._undo_attach(s, nic, changed, dry_run))
        return out

    def _lists_port(self, uuid: str, port_uuid: str) -> bool:
        with self.db.reader() as session:
            inst = db_api.instance_get(session, self.ctx, uuid)
            return any(n.get("port_id") == port_uuid for n in inst.networks or [])

    def _undo_attach(
        self, s: _Seen, nic: NetworkSpec, changed: dt.datetime | None, dry_run: bool
    ) -> Correction:
        c = Correction(
            kind="interface_recovered",
            instance=s.uuid,
            host=s.host,
            before=f"port {nic.port_id} bound, not among the server's NICs",
            after="released",
            detail="an attach of the port was cut off: its NIC detached on the host, the port released",
        )
        if dry_run:
            return c
        if s.host:
            request = ComputeRequest(
                request_id=self.ctx.request_id,
                host=s.host,
                operation="detach_interface",
                instances=[bare_spec(s.uuid)],
                options={"port_id": nic.port_id, "nic": nic.model_dump(mode="json")},
            )
            result = self.rpc.send(request)
            res = next((r for r in result.results if r.uuid == s.uuid), None)
            if res is None or not res.ok:
                fault = (res.fault if res is not None else None) or result.error
                c.error = (
                    f"left as it is: its host did not detach it ({fault.message if fault else 'no answer'})"
                )
                return c

        def release(session: Session) -> Any:
            port = session.execute(select(Port).where(Port.uuid == nic.port_id)).scalar_one_or_none()
            if port is None or port.device_id != s.uuid or (port.updated_at or port.created_at) != changed:
                raise exceptions.Conflict(reason=f"port {nic.port_id} changed since heal read it")
            ports.release_from_server(session, str(nic.port_id), s.uuid)

        return apply(c, dry_run, lambda: self.db.run_in_transaction(release))
