"""Security groups reaching the hosts: each port's filter sent to the host that runs the port.

The records (``novakit.network.security_groups``) decide what a port's filter is: its groups'
rules, ``remote_group`` expanded into the member ports' fixed IPs (``effective_rules``). What
changes a filter on the controller (a rule added or deleted, a group's membership, a port's
groups) calls ``push_filters`` with the ports whose rules changed; one ``apply_port_filters``
request per host goes out through the one round trip (``novakit.compute.rounds.deliver``),
and the host's driver redefines the filters live. A host that cannot be reached keeps its old
filter until heal (``novakit.heal.filters``) finds it differs and applies it again.

A build gets its ports' rules with its request (``with_filters``, in ``rpc.instance_spec``),
so a guest never starts unfiltered.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from sqlalchemy import select

from novakit.compute import rounds
from novakit.db.models import Port
from novakit.host.messages import ComputeRequest, NetworkSpec, PortFilterSpec
from novakit.network import effective_rules as records
from novakit.network.filter_rules import FilterRule, rules_to_json

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from novakit.compute.rpc import ComputeRPC

LOG = logging.getLogger(__name__)

#: port uuid -> its rules; None: the port is not filtered (any filter of it goes)
PortRules = Mapping[str, "list[FilterRule] | None"]


def effective_rules(session: Session, port_uuids: Iterable[str]) -> dict[str, list[FilterRule]]:
    """The rules of each port (by uuid) with port security enabled ([]: no group, everything is
    dropped); a port with port security disabled is left out (it is not filtered). The records'
    one answer (``effective_rules.effective_rules``)."""
    uuids = sorted(set(port_uuids))
    return records.effective_rules(session, uuids) if uuids else {}


def with_filters(session: Session, networks: list[NetworkSpec]) -> list[NetworkSpec]:
    """A server's NICs, each with its port's rules as they are now (``filter_rules``)."""
    rules = effective_rules(session, [n.port_id for n in networks if n.port_id])
    return [
        n.model_copy(update={"filter_rules": rules_to_json(rules[n.port_id])}) if n.port_id in rules else n
        for n in networks
    ]


def bound_ports(session: Session, port_uuids: Iterable[str]) -> dict[str, tuple[str, str | None, str]]:
    """port uuid -> (its host, its server, its MAC) for each of ``port_uuids`` bound to a host."""
    uuids = sorted(set(port_uuids))
    if not uuids:
        return {}
    rows = session.execute(
        select(Port.uuid, Port.binding_host, Port.device_id, Port.mac_address).where(
            Port.uuid.in_(uuids), Port.binding_host.isnot(None)
        )
    ).all()
    return {uuid: (str(host), device, mac) for uuid, host, device, mac in rows}


def requests_for(
    request_id: str, ports: Mapping[str, tuple[str, str | None, str]], rules: PortRules
) -> list[ComputeRequest]:
    """One ``apply_port_filters`` request per host, for the ports of ``rules`` found in ``ports``."""
    by_host: dict[str, list[PortFilterSpec]] = defaultdict(list)
    for uuid in sorted(rules):
        if uuid not in ports:
            continue  # not on a host: its build will carry its rules
        host, device, mac = ports[uuid]
        wanted = rules[uuid]
        by_host[host].append(
            PortFilterSpec(
                port_id=uuid,
                instance_uuid=device,
                mac=mac,
                rules=rules_to_json(wanted) if wanted is not None else None,
            )
        )
    return [
        ComputeRequest(request_id=request_id, host=host, operation="apply_port_filters", port_filters=specs)
        for host, specs in sorted(by_host.items())
    ]


def push_filters(rpc: ComputeRPC, request_id: str, ports: Iterable[str] | PortRules) -> dict[str, str]:
    """Send the filters of ``ports`` to their hosts, live; port uuid -> why it failed there.

    ``ports``: port uuids, whose rules are read now from the records (a port with port security
    disabled loses its filter; one with no group gets one that drops everything), or port uuid
    -> rules when the caller has them. Ports bound to no host are skipped (their build carries
    their rules). Call it after the change committed: the host then sees what the records say.
    A port that failed keeps its old filter until heal.
    """
    wanted = sorted(set(ports))
    if not wanted:
        return {}
    with rpc.db.reader() as session:
        if isinstance(ports, Mapping):
            rules: dict[str, list[FilterRule] | None] = dict(ports)
        else:
            found = effective_rules(session, wanted)
            rules = {p: found.get(p) for p in wanted}
        bound = bound_ports(session, rules)
    return deliver(rpc, requests_for(request_id, bound, rules))


def push_members(rpc: ComputeRPC, request_id: str, instance_uuids: Iterable[str]) -> dict[str, str]:
    """The servers' new ports joined their groups: the other ports whose rules name those groups
    as remote group get their filters again, with the new members' addresses (Neutron updates a
    group's members on every port change). For servers or ports that go, the ports to push are
    known only before the delete: ``members_touched`` (or ``affected_ports(session, ports=...)``)
    then, ``push_filters`` after."""
    uuids = sorted(set(instance_uuids))
    if not uuids:
        return {}
    with rpc.db.reader() as session:
        touched = members_touched(session, uuids)
    return push_filters(rpc, request_id, touched) if touched else {}


def members_touched(session: Session, instance_uuids: Iterable[str]) -> list[str]:
    """The other ports whose rules name a group the servers' ports carry as remote group: what
    the servers' arrival or departure changes. Ask it before their ports go (a delete), then
    ``push_filters`` them once the change committed."""
    uuids = sorted(set(instance_uuids))
    if not uuids:
        return []
    own = set(session.execute(select(Port.uuid).where(Port.device_id.in_(uuids))).scalars())
    return [p.port_id for p in records.affected_ports(session, ports=own) if p.port_id not in own]


def deliver(rpc: ComputeRPC, requests: list[ComputeRequest]) -> dict[str, str]:
    """Send ``apply_port_filters`` requests through the one round trip; port uuid -> why it failed."""
    failed: dict[str, str] = {}
    for request, result in rounds.deliver(rpc, requests):
        done = {r.uuid: r for r in result.results}
        for spec in request.port_filters:
            res = done.get(spec.port_id)
            if res is None or not res.ok:
                fault = (res.fault if res is not None else None) or result.error
                failed[spec.port_id] = fault.message if fault else rounds.no_result(request.host)
                why = failed[spec.port_id]
                LOG.warning("filter of port %s not applied on %s: %s", spec.port_id, request.host, why)
    return failed
