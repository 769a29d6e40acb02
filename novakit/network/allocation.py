"""What a boot asks of the network: Nova's allocate_for_instance (its deallocate_for_instance is
``ports.free_for_instance``).

``plan`` reads and checks a create request's NICs (the network exists, a given
port is free, a requested fixed IP lies in a subnet and is free, the pools hold
enough addresses for every server): the dry run asks it alone, the real create
asks it and then ``allocate``s in the transaction that writes the servers, so
the two cannot disagree and a refused request leaves no port and no address.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.context import RequestContext
from novakit.db.models import Network, Port
from novakit.host.messages import NetworkSpec
from novakit.network import ipam, networks, ports


@dataclass
class Nic:
    """One NIC of each server of a request, resolved."""

    field: str  # where it sits in the request, for errors: "networks[0]"
    network: Network | None = None  # a novakit network: a port on it
    port: Port | None = None  # a port the user made (with its network in ``network``)
    fixed_ip: str | None = None
    legacy: NetworkSpec | None = None  # the type/source form: no port


def plan(session: Session, ctx: RequestContext, requests: list[Any], count: int) -> list[Nic]:
    """The NICs of ``requests`` (``schemas.NetworkRequest``) for ``count`` servers, checked.

    No NIC asked for: a port on the default network, if there is one.
    """
    if not requests:
        default = networks.get_default(session)
        nics = [Nic(field="networks", network=default)] if default is not None else []
    else:
        nics = [_resolve(session, ctx, f"networks[{i}]", r, count) for i, r in enumerate(requests)]
    needed: dict[int, int] = {}
    by_id: dict[int, Network] = {}
    for nic in nics:
        if nic.network is not None and nic.port is None and nic.fixed_ip is None:
            needed[nic.network.id] = needed.get(nic.network.id, 0) + count
            by_id[nic.network.id] = nic.network
    for network_id, amount in needed.items():
        network = by_id[network_id]
        if ipam.has_subnets(session, network) and ipam.free_count(session, network) < amount:
            raise exceptions.IpAddressGenerationFailure(network=network.name)
    return nics


def _resolve(session: Session, ctx: RequestContext, field: str, req: Any, count: int) -> Nic:
    if req.port_id is not None:
        if count > 1:
            raise exceptions.ValidationError(
                f"{field}.port_id", "a port serves one server: create one server (no count) with a port"
            )
        port = ports.get(session, ctx, req.port_id)
        if port.device_id:
            raise exceptions.PortInUse(port=port.name or port.uuid, device_id=port.device_id)
        return Nic(field=field, port=port, network=session.get(Network, port.network_id))
    if req.net_id is not None:
        # A network the caller may see: its project's or a shared one (another project's is not found).
        network = networks.get_visible(session, ctx, req.net_id)
        if req.fixed_ip is not None:
            if count > 1:
                raise exceptions.ValidationError(
                    f"{field}.fixed_ip", "an address serves one server: create one server (no count) with it"
                )
            ipam.check_requested(session, network, req.fixed_ip, f"{field}.fixed_ip")
        return Nic(field=field, network=network, fixed_ip=req.fixed_ip)
    return Nic(field=field, legacy=NetworkSpec(type=req.type, source=req.source))


def sources(nics: list[Nic]) -> list[str]:
    """The host-side names of the novakit networks the servers need (``NetworkFilter``)."""
    out: list[str] = []
    for nic in nics:
        if nic.network is not None and nic.network.source not in out:
            out.append(nic.network.source)
    return out


def allocate(
    session: Session,
    ctx: RequestContext,
    nics: list[Nic],
    instance_uuid: str,
    security_groups: list[str] | None = None,
) -> list[dict[str, Any]]:
    """The server's ports, made or taken, with their addresses; its NICs as ``NetworkSpec`` dumps
    (what ``instances.networks`` keeps and the host gets unchanged). A port made here carries
    ``security_groups`` (``default`` when None); a port the user gave keeps its own (Nova)."""
    from novakit.network import security_groups as groups

    names = groups.resolve_for_boot(session, ctx, security_groups)
    out: list[dict[str, Any]] = []
    for nic in nics:
        if nic.legacy is not None:
            out.append(nic.legacy.model_dump())
            continue
        assert nic.network is not None
        if nic.port is not None:
            taken = session.execute(
                update(Port)
                .where(Port.id == nic.port.id, Port.device_id.is_(None))
                .values(device_id=instance_uuid, device_owner=ports.DEVICE_OWNER)
            )
            if taken.rowcount != 1:  # type: ignore[attr-defined]
                raise exceptions.PortInUse(port=nic.port.name or nic.port.uuid, device_id="(another server)")
            port = nic.port
        else:
            port = ports.insert_port(
                session, ctx, nic.network, device_id=instance_uuid, preserve_on_delete=False
            )
            ipam.allocate(session, port.id, nic.network, nic.fixed_ip, f"{nic.field}.fixed_ip")
            groups.bind_port(session, ctx, port, names)
        ips = ports.fixed_ips(session, [port.id])[port.id]
        out.append(
            NetworkSpec(
                type=nic.network.provider,  # type: ignore[arg-type]
                source=nic.network.source,
                mac=port.mac_address,
                port_id=port.uuid,
                fixed_ips=ports.fixed_ip_specs(ips),
            ).model_dump()
        )
    return out


# openstack's spellings of a NIC (``--nic`` of ``openstack server create``, openstack.cloud's
# ``nics``) -> the request's (``schemas.NetworkRequest``).
_NIC_KEYS = {
    "net-id": "net_id",
    "net-name": "net_id",
    "port-id": "port_id",
    "v4-fixed-ip": "fixed_ip",
    "fixed_ip": "fixed_ip",
}


def nic_request(given: dict[str, Any] | str, field: str = "nic") -> dict[str, Any]:
    """One NIC as the CLI (``net-id=NET,v4-fixed-ip=IP`` or ``port-id=PORT``) or the server module
    (``{"net-name": NET, "fixed_ip": IP}``) spells it, as the request's ``networks`` entry."""
    if isinstance(given, str):
        pairs: dict[str, Any] = {}
        for part in given.split(","):
            key, sep, value = part.strip().partition("=")
            if not sep:
                raise exceptions.ValidationError(
                    field, f"{part!r} is not key=value (net-id=NET or port-id=PORT)"
                )
            pairs[key] = value
        given = pairs
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key not in _NIC_KEYS:
            known = ", ".join(sorted(_NIC_KEYS))
            raise exceptions.ValidationError(field, f"{key!r} is not a NIC key (known: {known})")
        if value in (None, ""):
            continue
        if _NIC_KEYS[key] in out:
            raise exceptions.ValidationError(
                field, f"{key} given twice (net-id and net-name name one network)"
            )
        out[_NIC_KEYS[key]] = value
    if "net_id" not in out and "port_id" not in out:
        raise exceptions.ValidationError(field, "needs net-id (or net-name) or port-id")
    return out


def nic_requests(given: list[Any] | str | None, field: str = "nics") -> list[dict[str, Any]]:
    """A list of NICs as a module or a playbook variable gives them, as the request's ``networks``:
    openstack's spellings (``{"net-name": NET}``, ``"net-id=NET,v4-fixed-ip=IP"``), a bare network
    name (``"lan"``), or the request's own form (``{"net_id": ...}``, ``{"type": ..., "source": ...}``)
    left as it is. A string is a space-separated list (a survey's answer)."""
    if not given:
        return []
    entries = given.split() if isinstance(given, str) else list(given)
    own = {"type", "source", "net_id", "port_id", "fixed_ip"}
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(entries):
        where = f"{field}[{i}]"
        if isinstance(entry, str) and "=" not in entry:
            out.append({"net_id": entry})
        elif isinstance(entry, dict) and set(entry) <= own:
            out.append(dict(entry))
        elif isinstance(entry, str | dict):
            out.append(nic_request(entry, where))
        else:
            raise exceptions.ValidationError(where, "must be a network name, key=value pairs or a mapping")
    return out
