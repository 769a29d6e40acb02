"""What a port's host enforces: its effective rule set, and which ports a change touches.

A port's effective rules are the rules of every group it carries, each ``remote_group``
expanded into one rule per fixed IP (/32, /128) of the ports carrying that group
(``effective_rules``, as ``filter_rules.FilterRule``). A change alters the effective rules of
the ports carrying the groups whose rules changed (``carriers``) and, when a group's members
change, of the ports whose rules name that group as remote group (``referrers``);
``affected_ports`` answers both, with where each port runs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import overload

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions
from novakit.db.engine import Database
from novakit.db.models import IPAllocation, Port, SecurityGroup, SecurityGroupPortBinding, SecurityGroupRule
from novakit.network.filter_rules import FilterRule, canonical


@dataclass(frozen=True)
class AffectedPort:
    """A port whose effective rules a change altered, and where it runs (None: on no host)."""

    port_id: str
    host: str | None
    instance_uuid: str | None


# --- what a change touches -----------------------------------------------------------------


def carriers(session: Session, group_ids: Iterable[int]) -> list[int]:
    """The ports carrying any of the groups: a change of those groups' rules changes theirs."""
    ids = sorted(set(group_ids))
    if not ids:
        return []
    stmt = select(SecurityGroupPortBinding.port_id).where(SecurityGroupPortBinding.security_group_id.in_(ids))
    return sorted(set(session.execute(stmt).scalars()))


def referrers(session: Session, group_ids: Iterable[int]) -> list[int]:
    """The ports carrying a group with a rule whose remote group is one of ``group_ids``: a change
    of those groups' members (or of a member's addresses) changes their expansion."""
    ids = sorted(set(group_ids))
    if not ids:
        return []
    referring = select(SecurityGroupRule.security_group_id).where(SecurityGroupRule.remote_group_id.in_(ids))
    return carriers(session, session.execute(referring).scalars())


def port_uuids(session: Session, port_ids: Iterable[int]) -> list[str]:
    ids = sorted(set(port_ids))
    if not ids:
        return []
    return sorted(session.execute(select(Port.uuid).where(Port.id.in_(ids))).scalars())


def affected_ports(
    session: Session,
    *,
    rules_of: Iterable[int | str] = (),
    members_of: Iterable[int | str] = (),
    ports: Iterable[int | str] = (),
) -> list[AffectedPort]:
    """The ports whose effective rules change, with their hosts, when:

    - ``rules_of``: a rule of these groups is added or deleted (the ports carrying them);
    - ``members_of``: a port joins or leaves these groups, or a member's addresses change (the
      ports whose rules name them as remote group);
    - ``ports``: these ports' own groups change (they themselves, and the ports whose rules name
      any group they carry as remote group: they gain or lose a member).

    Groups by id or uuid, ports by id or uuid. Call it in the transaction of the change, before a
    removal (what was there decides who is touched) or after an addition.
    """
    group_ids = _row_ids(session, SecurityGroup, rules_of)
    member_ids = _row_ids(session, SecurityGroup, members_of)
    port_ids = _row_ids(session, Port, ports)
    if port_ids:
        member_ids |= set(
            session.execute(
                select(SecurityGroupPortBinding.security_group_id).where(
                    SecurityGroupPortBinding.port_id.in_(port_ids)
                )
            ).scalars()
        )
    wanted = set(carriers(session, group_ids)) | set(referrers(session, member_ids)) | port_ids
    if not wanted:
        return []
    rows = session.execute(
        select(Port.uuid, Port.binding_host, Port.device_id)
        .where(Port.id.in_(sorted(wanted)))
        .order_by(Port.uuid)
    )
    return [AffectedPort(port_id=u, host=h, instance_uuid=d) for u, h, d in rows]


def _row_ids(
    session: Session, model: type[SecurityGroup] | type[Port], refs: Iterable[int | str]
) -> set[int]:
    """The row ids of ``refs``: each one a row id already, or a uuid."""
    refs = list(refs)
    ids = {r for r in refs if isinstance(r, int)}
    uuids = [r for r in refs if isinstance(r, str)]
    if uuids:
        ids |= set(session.execute(select(model.id).where(model.uuid.in_(uuids))).scalars())
    return ids


# --- the effective rule set of a port ------------------------------------------------------


@overload
def effective_rules(source: Session | Database, port: int | str) -> list[FilterRule]: ...


@overload
def effective_rules(source: Session | Database, port: list[str]) -> dict[str, list[FilterRule]]: ...


def effective_rules(
    source: Session | Database, port: int | str | list[str]
) -> list[FilterRule] | dict[str, list[FilterRule]]:
    """What a port's filter allows: its groups' rules, each ``remote_group`` expanded into one rule
    per fixed IP (as /32 or /128) of the ports carrying that group, of the rule's ethertype; a
    remote group without members allows nothing. As Neutron's port security: a port with port
    security enabled and no group allows nothing ([]: its filter drops everything); a port with
    port security disabled is not filtered. One port (id or uuid): its rules ([] for a port that
    carries no group). A list of port uuids: uuid -> rules for those with port security enabled
    (a port with port security disabled is left out: it is not filtered)."""
    if isinstance(source, Database):
        with source.reader() as session:
            return effective_rules(session, port)  # type: ignore[arg-type]
    session = source
    if isinstance(port, list):
        rows = session.execute(
            select(Port.id, Port.uuid).where(Port.uuid.in_(port), Port.port_security_enabled.is_(True))
        ).all()
        by_id = {pid: uuid for pid, uuid in rows}
        computed = _effective(session, list(by_id))
        return {uuid: computed.get(pid, []) for pid, uuid in by_id.items()}
    stmt = (
        select(Port.id).where(Port.id == port)
        if isinstance(port, int)
        else select(Port.id).where(Port.uuid == port)
    )
    port_id = session.execute(stmt).scalar()
    if port_id is None:
        raise exceptions.PortNotFound(port=str(port))
    return _effective(session, [port_id]).get(port_id, [])


def _effective(session: Session, port_ids: list[int]) -> dict[int, list[FilterRule]]:
    """port id -> its effective rules, for the ports of ``port_ids`` that carry a group."""
    if not port_ids:
        return {}
    bindings = session.execute(
        select(SecurityGroupPortBinding.port_id, SecurityGroupPortBinding.security_group_id).where(
            SecurityGroupPortBinding.port_id.in_(port_ids)
        )
    ).all()
    groups_of: dict[int, set[int]] = {}
    for port_id, group_id in bindings:
        groups_of.setdefault(port_id, set()).add(group_id)
    all_groups = {g for gs in groups_of.values() for g in gs}
    rules_of: dict[int, list[SecurityGroupRule]] = {}
    if all_groups:
        for rule in session.execute(
            select(SecurityGroupRule).where(SecurityGroupRule.security_group_id.in_(sorted(all_groups)))
        ).scalars():
            rules_of.setdefault(rule.security_group_id, []).append(rule)
    remotes = {r.remote_group_id for rs in rules_of.values() for r in rs if r.remote_group_id is not None}
    members: dict[int, list[str]] = {g: [] for g in remotes}
    if remotes:
        rows = session.execute(
            select(SecurityGroupPortBinding.security_group_id, IPAllocation.ip_address)
            .join(IPAllocation, IPAllocation.port_id == SecurityGroupPortBinding.port_id)
            .where(SecurityGroupPortBinding.security_group_id.in_(sorted(remotes)))
        )
        for group_id, address in rows:
            members[group_id].append(address)
    out: dict[int, list[FilterRule]] = {}
    for port_id, group_ids in groups_of.items():
        flat: list[FilterRule] = []
        for group_id in group_ids:
            for rule in rules_of.get(group_id, []):
                flat.extend(_expand(rule, members))
        out[port_id] = list(canonical(flat))
    return out


def _expand(rule: SecurityGroupRule, members: dict[int, list[str]]) -> list[FilterRule]:
    def make(prefix: str | None) -> FilterRule:
        return FilterRule(
            direction=rule.direction,
            ethertype=rule.ethertype,
            protocol=rule.protocol,
            port_min=rule.port_range_min,
            port_max=rule.port_range_max,
            remote_ip_prefix=prefix,
        )

    if rule.remote_group_id is None:
        return [make(rule.remote_ip_prefix)]
    version = 4 if rule.ethertype == "IPv4" else 6
    out = []
    for address in members.get(rule.remote_group_id, []):
        ip = ipaddress.ip_address(address)
        if ip.version == version:
            out.append(make(f"{ip}/{ip.max_prefixlen}"))
    return out
