"""Security groups, Neutron's model: a project's named sets of allow rules, carried by ports.

A rule allows traffic in one ``direction`` (ingress: towards the guest; egress: from it) for one
``ethertype`` (IPv4, IPv6), one ``protocol`` (a name, a number 0-255, or any), a destination
port range (for ICMP, as Neutron stores it, the type in ``port_range_min`` and the code in
``port_range_max``), and one remote end: a CIDR (``remote_ip_prefix``), the ports carrying a
group (``remote_group``), or anywhere. A port carries a list of groups
(``security_group_port_bindings``); what its host enforces is the union of their rules with
each ``remote_group`` expanded into the member ports' fixed IPs (``effective_rules``, as
``filter_rules.FilterRule``).

Each project gets a ``default`` group on first use, with Neutron's rules: all egress, IPv4 and
IPv6, and ingress only from ports of the same group. A server's ports carry the groups its
create named (``default`` when it named none); ``add_to_server``/``remove_from_server`` change
them on a running server.

Every change returns nothing but calls ``on_change`` (when given) after it committed with the
uuids of the ports whose effective rules it changed (``affected_ports``): the enforcement side
(``filter_sync.push_filters``) sends their filters to their hosts.

Project isolation: a member finds only its own project's groups (``policy.scope``); a rule's
``remote_group`` is a group of the rule's own project. Quotas ``security_groups`` (10) and
``security_group_rules`` (100) are checked before and rechecked in the transaction that writes
(``quota.recheck``). Names are unique per project (Neutron allows twins; here a group is found
by name, so a twin would be ambiguous).
"""

from __future__ import annotations

import ipaddress
import uuid as uuidlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, overload

from pydantic import Field, field_validator
from sqlalchemy import delete, func, insert, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy, quota
from novakit.compute import schemas
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import IPAllocation, Port, SecurityGroup, SecurityGroupPortBinding, SecurityGroupRule
from novakit.network.filter_rules import ICMP_PROTOCOLS, PORT_PROTOCOLS, FilterRule, canonical

DEFAULT = "default"
ETHERTYPES = ("IPv4", "IPv6")
DIRECTIONS = ("ingress", "egress")

#: Neutron's protocol names (neutron_lib's IP_PROTOCOL_MAP) and their IP protocol numbers.
PROTOCOLS: dict[str, int] = {
    "ah": 51,
    "dccp": 33,
    "egp": 8,
    "esp": 50,
    "gre": 47,
    "hopopt": 0,
    "icmp": 1,
    "igmp": 2,
    "ipip": 4,
    "ipv6-encap": 41,
    "ipv6-frag": 44,
    "ipv6-icmp": 58,
    "ipv6-nonxt": 59,
    "ipv6-opts": 60,
    "ipv6-route": 43,
    "ospf": 89,
    "pgm": 113,
    "rsvp": 46,
    "sctp": 132,
    "tcp": 6,
    "udp": 17,
    "udplite": 136,
    "vrrp": 112,
}
#: Spellings of the same protocol: stored as the name on the right.
_ALIASES = {"icmpv6": "ipv6-icmp"}
#: A number with a name is stored as the name (6 -> tcp), so that "6" and "tcp" are one rule.
_NAMED_NUMBERS = {number: name for name, number in PROTOCOLS.items()}

#: Called after a change committed, with the uuids of the ports whose effective rules changed.
OnChange = Callable[[list[str]], None]


# --- requests ------------------------------------------------------------------------------


class GroupCreate(schemas._Request):
    name: str
    description: str | None = Field(default=None, max_length=255)
    # Another project's group: an admin's (``security_group:project``).
    project_id: str | None = Field(default=None, min_length=1, max_length=255)

    _check_name = field_validator("name")(classmethod(lambda cls, v: schemas._check_name(v)))


class RuleCreate(schemas._Request):
    security_group: str = Field(min_length=1, max_length=255)
    direction: Literal["ingress", "egress"] = "ingress"
    ethertype: str = "IPv4"
    protocol: str | int | None = None
    port_range_min: int | None = None
    port_range_max: int | None = None
    remote_ip_prefix: str | None = None
    remote_group: str | None = Field(default=None, min_length=1, max_length=255)
    description: str | None = Field(default=None, max_length=255)


@dataclass(frozen=True)
class RuleFields:
    """A rule's fields as stored: checked, in one spelling (``normalise_rule``)."""

    direction: str
    ethertype: str
    protocol: str | None
    port_range_min: int | None
    port_range_max: int | None
    remote_ip_prefix: str | None

    def fingerprint(self, remote_group_id: int | None) -> str:
        parts = (
            self.direction,
            self.ethertype,
            self.protocol,
            self.port_range_min,
            self.port_range_max,
            self.remote_ip_prefix,
            remote_group_id,
        )
        return "|".join("" if p is None else str(p) for p in parts)


@dataclass(frozen=True)
class AffectedPort:
    """A port whose effective rules a change altered, and where it runs (None: on no host)."""

    port_id: str
    host: str | None
    instance_uuid: str | None


# --- one spelling of a rule (also what the modules compare with) ----------------------------


def normalise_protocol(value: str | int | None, field: str = "protocol") -> str | None:
    """A protocol as stored: None for any, a name of ``PROTOCOLS``, or a number 0-255 as a string
    (a number with a name the hosts know is stored as that name)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise exceptions.ValidationError(field, f"{value!r} is not a protocol")
    text = str(value).strip().lower()
    if text in ("", "any"):
        return None
    if text.isdigit():
        number = int(text)
        if not 0 <= number <= 255:
            raise exceptions.ValidationError(field, f"a protocol number is 0 to 255, got {number}")
        return _NAMED_NUMBERS.get(number, str(number))
    text = _ALIASES.get(text, text)
    if text not in PROTOCOLS:
        raise exceptions.ValidationError(
            field,
            f"Security group rule protocol {value} not supported: give one of "
            f"{', '.join(sorted(PROTOCOLS))}, a number 0 to 255, or any",
        )
    return text


def normalise_ethertype(value: str) -> str:
    for known in ETHERTYPES:
        if str(value).lower() == known.lower():
            return known
    raise exceptions.ValidationError("ethertype", f"must be IPv4 or IPv6, got {value!r}")


def normalise_rule(req: RuleCreate) -> RuleFields:
    """Check a rule's fields as Neutron does and spell them one way; each refusal names the field."""
    ethertype = normalise_ethertype(req.ethertype)
    protocol = normalise_protocol(req.protocol)
    if ethertype == "IPv6" and protocol == "icmp":
        raise exceptions.ValidationError(
            "protocol", "Invalid ethertype IPv6 for protocol icmp: an IPv6 rule's ICMP is ipv6-icmp"
        )
    if ethertype == "IPv4" and protocol == "ipv6-icmp":
        raise exceptions.ValidationError(
            "protocol", "Invalid ethertype IPv4 for protocol ipv6-icmp: an IPv4 rule's ICMP is icmp"
        )
    low, high = req.port_range_min, req.port_range_max
    if low is not None or high is not None:
        field = "port_range_min" if low is not None else "port_range_max"
        if protocol is None:
            raise exceptions.ValidationError(
                field, "a port range needs a protocol (tcp, udp, sctp; or icmp's type and code)"
            )
        if protocol in PORT_PROTOCOLS:
            low = low if low is not None else high
            high = high if high is not None else low
            assert low is not None and high is not None
            for name, value in (("port_range_min", low), ("port_range_max", high)):
                if not 1 <= value <= 65535:
                    raise exceptions.ValidationError(name, f"a port is 1 to 65535, got {value}")
            if low > high:
                raise exceptions.ValidationError(
                    "port_range_min",
                    f"For TCP/UDP protocols, port_range_min must be <= port_range_max ({low} > {high})",
                )
        elif protocol in ICMP_PROTOCOLS:
            if low is None:
                raise exceptions.ValidationError(
                    "port_range_max",
                    f"ICMP code (port_range_max) {high} is provided but ICMP type (port_range_min) "
                    "is missing",
                )
            for name, what, given in (("port_range_min", "type", low), ("port_range_max", "code", high)):
                if given is not None and not 0 <= given <= 255:
                    raise exceptions.ValidationError(
                        name, f"Invalid value for ICMP {what} ({name}) {given}. It must be 0 to 255."
                    )
        else:
            raise exceptions.ValidationError(
                field,
                f"protocol {protocol} has no ports: a port range is only for {', '.join(PORT_PROTOCOLS)} "
                "(and ICMP's type and code)",
            )
    prefix = req.remote_ip_prefix
    if prefix is not None and req.remote_group is not None:
        raise exceptions.ValidationError(
            "remote_ip_prefix", "Only remote_ip_prefix or remote_group may be provided, not both"
        )
    if prefix is not None:
        try:
            net = ipaddress.ip_network(prefix.strip(), strict=False)
        except ValueError:
            raise exceptions.ValidationError(
                "remote_ip_prefix", f"{prefix!r} is not a CIDR (10.0.0.0/24, 2001:db8::/64)"
            ) from None
        if (net.version == 4) != (ethertype == "IPv4"):
            raise exceptions.ValidationError(
                "remote_ip_prefix",
                f"Conflicting value ethertype {ethertype} for CIDR {net}: an {ethertype} rule takes an "
                f"{ethertype} prefix",
            )
        # Anywhere is anywhere, however it is spelt (0.0.0.0/0 and none are one rule).
        prefix = None if net.prefixlen == 0 else str(net)
    return RuleFields(req.direction, ethertype, protocol, low, high, prefix)


# --- views ---------------------------------------------------------------------------------


def rule_view(rule: SecurityGroupRule, group: SecurityGroup, remote: SecurityGroup | None) -> dict[str, Any]:
    return {
        "id": rule.uuid,
        "security_group_id": group.uuid,
        "security_group": group.name,
        "direction": rule.direction,
        "ethertype": rule.ethertype,
        "protocol": rule.protocol,
        "port_range_min": rule.port_range_min,
        "port_range_max": rule.port_range_max,
        "remote_ip_prefix": rule.remote_ip_prefix,
        "remote_group_id": remote.uuid if remote is not None else None,
        "remote_group": remote.name if remote is not None else None,
        "description": rule.description,
        "project_id": rule.project_id,
    }


def group_view(session: Session, group: SecurityGroup) -> dict[str, Any]:
    return {
        "id": group.uuid,
        "name": group.name,
        "description": group.description,
        "project_id": group.project_id,
        "security_group_rules": _rule_views(session, [group.id]),
    }


def _rule_views(session: Session, group_ids: list[int]) -> list[dict[str, Any]]:
    if not group_ids:
        return []
    rows = session.execute(
        select(SecurityGroupRule)
        .where(SecurityGroupRule.security_group_id.in_(group_ids))
        .order_by(SecurityGroupRule.id)
    ).scalars()
    rules = list(rows)
    ids = {r.security_group_id for r in rules} | {r.remote_group_id for r in rules if r.remote_group_id}
    groups = {
        g.id: g for g in session.execute(select(SecurityGroup).where(SecurityGroup.id.in_(ids))).scalars()
    }
    return [rule_view(r, groups[r.security_group_id], groups.get(r.remote_group_id or 0)) for r in rules]


# --- look-ups ------------------------------------------------------------------------------


def get(session: Session, ctx: RequestContext, ref: str, project_id: str | None = None) -> SecurityGroup:
    """A group by uuid or name that ``ctx`` may see (its own project's; an admin's: any, its own
    project's first when a name is in several); ``project_id`` narrows to that project."""
    stmt = select(SecurityGroup).where(or_(SecurityGroup.uuid == ref, SecurityGroup.name == ref))
    stmt = policy.scope(ctx, stmt, SecurityGroup.project_id, project_id)
    rows = list(session.execute(stmt.order_by(SecurityGroup.id)).scalars())
    if not rows:
        raise exceptions.SecurityGroupNotFound(group=ref)
    own = [g for g in rows if g.project_id == ctx.project_id]
    return (own or rows)[0]


def _find(
    session: Session, ctx: RequestContext, ref: str, project_id: str | None = None
) -> SecurityGroup | None:
    try:
        return get(session, ctx, ref, project_id)
    except exceptions.SecurityGroupNotFound:
        return None


def ensure_default(session: Session, project_id: str) -> SecurityGroup:
    """The project's ``default`` group, made now with Neutron's rules if it has none (in a
    savepoint: a concurrent first use that made it first wins, and this one reads it)."""
    stmt = select(SecurityGroup).where(SecurityGroup.project_id == project_id, SecurityGroup.name == DEFAULT)
    found = session.execute(stmt).scalars().first()
    if found is not None:
        return found
    try:
        with session.begin_nested():
            group = SecurityGroup(
                uuid=str(uuidlib.uuid4()),
                name=DEFAULT,
                description="Default security group",
                project_id=project_id,
            )
            session.add(group)
            session.flush()
            for ethertype in ETHERTYPES:
                for fields, remote in (
                    (RuleFields("egress", ethertype, None, None, None, None), None),
                    (RuleFields("ingress", ethertype, None, None, None, None), group.id),
                ):
                    session.add(_rule_row(group, fields, remote, None))
            session.flush()
    except IntegrityError:
        found = session.execute(stmt).scalars().first()
        if found is None:
            raise
        return found
    return group


def _default_exists(session: Session, project_id: str) -> bool:
    stmt = select(SecurityGroup.id).where(
        SecurityGroup.project_id == project_id, SecurityGroup.name == DEFAULT
    )
    return session.execute(stmt).first() is not None


def _first_use(db: Database, project_id: str) -> None:
    """Make the project's default group if it has none (a read first: it has, nearly always)."""
    with db.reader() as session:
        if _default_exists(session, project_id):
            return
    db.run_in_transaction(lambda session: ensure_default(session, project_id))


def _rule_row(
    group: SecurityGroup, fields: RuleFields, remote_group_id: int | None, description: str | None
) -> SecurityGroupRule:
    return SecurityGroupRule(
        uuid=str(uuidlib.uuid4()),
        security_group_id=group.id,
        project_id=group.project_id,
        direction=fields.direction,
        ethertype=fields.ethertype,
        protocol=fields.protocol,
        port_range_min=fields.port_range_min,
        port_range_max=fields.port_range_max,
        remote_ip_prefix=fields.remote_ip_prefix,
        remote_group_id=remote_group_id,
        description=description,
        fingerprint=fields.fingerprint(remote_group_id),
    )


# --- groups --------------------------------------------------------------------------------


def create_group(
    db: Database, conf: Config, ctx: RequestContext, data: dict[str, Any], *, dry_run: bool = False
) -> dict[str, Any] | None:
    """Create a group; it starts with Neutron's two rules of a new group: egress anywhere, IPv4
    and IPv6 (delete them to restrict egress). ``dry_run``: the checks, nothing written."""
    req = schemas.parse(GroupCreate, data)
    project_id = req.project_id or ctx.project_id
    if project_id != ctx.project_id:
        policy.authorize(ctx, "security_group:project")
        quota.check_project_id(project_id)
    if req.name.lower() == DEFAULT:
        raise exceptions.Conflict(
            reason="Default security group already exists: each project has one, made on first use "
            "(name the new group otherwise)"
        )
    deltas = {"security_groups": 1, "security_group_rules": len(ETHERTYPES)}

    def write(session: Session) -> dict[str, Any] | None:
        taken = session.execute(
            select(SecurityGroup.id).where(
                SecurityGroup.project_id == project_id, SecurityGroup.name == req.name
            )
        ).first()
        if taken is not None:
            raise exceptions.Conflict(
                reason=f"a security group named {req.name!r} exists in project {project_id}; "
                "group names are unique per project"
            )
        quota.check_quota(session, conf, project_id, deltas)
        if dry_run:
            return None
        ensure_default(session, project_id)
        group = SecurityGroup(
            uuid=str(uuidlib.uuid4()), name=req.name, description=req.description, project_id=project_id
        )
        session.add(group)
        session.flush()
        for ethertype in ETHERTYPES:
            session.add(_rule_row(group, RuleFields("egress", ethertype, None, None, None, None), None, None))
        session.flush()
        quota.recheck(session, conf, project_id, deltas)
        return group_view(session, group)

    if dry_run:
        with db.reader() as session:
            return write(session)
    try:
        return db.run_in_transaction(write)
    except IntegrityError:
        raise exceptions.Conflict(
            reason=f"a security group named {req.name!r} exists in project {project_id}; "
            "group names are unique per project"
        ) from None


def list_groups(db: Database, ctx: RequestContext, *, project_id: str | None = None) -> list[dict[str, Any]]:
    """The groups ``ctx`` may see (an admin: every project's, or ``project_id``'s), with their rules;
    the caller's own project gets its default group now if it had none (Neutron's first use)."""
    _first_use(db, ctx.project_id)
    with db.reader() as session:
        stmt = policy.scope(ctx, select(SecurityGroup), SecurityGroup.project_id, project_id)
        groups = list(session.execute(stmt.order_by(SecurityGroup.project_id, SecurityGroup.name)).scalars())
        rules: dict[str, list[dict[str, Any]]] = {g.uuid: [] for g in groups}
        for rule in _rule_views(session, [g.id for g in groups]):
            rules[rule["security_group_id"]].append(rule)
        return [
            {
                "id": g.uuid,
                "name": g.name,
                "description": g.description,
                "project_id": g.project_id,
                "security_group_rules": rules[g.uuid],
            }
            for g in groups
        ]


def show_group(db: Database, ctx: RequestContext, ref: str) -> dict[str, Any]:
    if ref == DEFAULT:
        _first_use(db, ctx.project_id)
    with db.reader() as session:
        return group_view(session, get(session, ctx, ref))


def delete_group(
    db: Database, ctx: RequestContext, ref: str, *, dry_run: bool = False, on_change: OnChange | None = None
) -> None:
    """Delete a group and its rules; refused while a port carries it (Neutron's SecurityGroupInUse)
    and for a project's default group (an admin may: ``security_group:delete_default``). Rules of
    other groups whose remote group it is go with it, as in Neutron."""

    def write(session: Session) -> list[str]:
        group = get(session, ctx, ref)
        if group.name == DEFAULT and not policy.allowed(ctx, "security_group:delete_default"):
            raise exceptions.SecurityGroupCannotRemoveDefault()
        carriers = session.execute(
            select(func.count())
            .select_from(SecurityGroupPortBinding)
            .where(SecurityGroupPortBinding.security_group_id == group.id)
        ).scalar_one()
        if carriers:
            raise exceptions.SecurityGroupInUse(
                group=group.name,
                reason=f"{carriers} port(s) carry it; remove it from their servers "
                "(novakit server remove security group) or delete them first",
            )
        if dry_run:
            return []
        affected = _referrers(session, [group.id])
        session.execute(delete(SecurityGroupRule).where(SecurityGroupRule.remote_group_id == group.id))
        session.execute(delete(SecurityGroupRule).where(SecurityGroupRule.security_group_id == group.id))
        session.execute(delete(SecurityGroup).where(SecurityGroup.id == group.id))
        return _uuids(session, affected)

    if dry_run:
        with db.reader() as session:
            write(session)
        return
    try:
        changed = db.run_in_transaction(write)
    except IntegrityError:
        # A port took the group between the count and the delete (its binding's key holds it).
        raise exceptions.SecurityGroupInUse(group=ref, reason="a port took it meanwhile") from None
    _notify(on_change, changed)


# --- rules ---------------------------------------------------------------------------------


def create_rule(
    db: Database,
    conf: Config,
    ctx: RequestContext,
    data: dict[str, Any],
    *,
    dry_run: bool = False,
    on_change: OnChange | None = None,
) -> dict[str, Any] | None:
    """Add a rule to a group; an equal rule of the group is Neutron's 409 (SecurityGroupRuleExists)."""
    req = schemas.parse(RuleCreate, data)
    fields = normalise_rule(req)
    _first_use(db, ctx.project_id)
    deltas = {"security_group_rules": 1}

    def write(session: Session) -> tuple[dict[str, Any] | None, list[str]]:
        group = get(session, ctx, req.security_group)
        remote = None
        if req.remote_group is not None:
            # The member's own: a group of the rule's project (another project's is one that does not exist).
            remote = _find(session, ctx, req.remote_group, group.project_id)
            if remote is None:
                raise exceptions.ValidationError(
                    "remote_group",
                    f"security group {req.remote_group!r} does not exist in project {group.project_id}; "
                    "a remote group is one of the rule's own project",
                )
        remote_id = remote.id if remote is not None else None
        existing = _same_rule(session, group.id, fields.fingerprint(remote_id))
        if existing is not None:
            raise exceptions.SecurityGroupRuleExists(rule_id=existing)
        quota.check_quota(session, conf, group.project_id, deltas)
        if dry_run:
            return None, []
        rule = _rule_row(group, fields, remote_id, req.description)
        session.add(rule)
        session.flush()
        quota.recheck(session, conf, group.project_id, deltas)
        return rule_view(rule, group, remote), _uuids(session, _carriers(session, [group.id]))

    if dry_run:
        with db.reader() as session:
            return write(session)[0]
    try:
        view, changed = db.run_in_transaction(write)
    except IntegrityError:
        # The same rule committed by another request between the check and the insert, or the
        # group deleted meanwhile: read which.
        with db.reader() as session:
            group = get(session, ctx, req.security_group)
            remote = _find(session, ctx, req.remote_group, group.project_id) if req.remote_group else None
            existing = _same_rule(session, group.id, fields.fingerprint(remote.id if remote else None))
        if existing is not None:
            raise exceptions.SecurityGroupRuleExists(rule_id=existing) from None
        raise
    _notify(on_change, changed)
    return view


def find_rule(db: Database, ctx: RequestContext, data: dict[str, Any]) -> dict[str, Any] | None:
    """The rule of a group equal to ``data`` (a ``create_rule`` request, checked and spelt as a
    create would), or None: how a declarative caller (the ``security_group_rule`` module) finds it.
    A group that does not exist holds no rule."""
    req = schemas.parse(RuleCreate, data)
    fields = normalise_rule(req)
    with db.reader() as session:
        group = _find(session, ctx, req.security_group)
        if group is None:
            return None
        remote = None
        if req.remote_group is not None:
            remote = _find(session, ctx, req.remote_group, group.project_id)
            if remote is None:
                return None
        found = _same_rule(session, group.id, fields.fingerprint(remote.id if remote else None))
        if found is None:
            return None
        [view] = [v for v in _rule_views(session, [group.id]) if v["id"] == found]
        return view


def _same_rule(session: Session, group_id: int, fingerprint: str) -> str | None:
    return session.execute(
        select(SecurityGroupRule.uuid).where(
            SecurityGroupRule.security_group_id == group_id, SecurityGroupRule.fingerprint == fingerprint
        )
    ).scalar()


def _get_rule(session: Session, ctx: RequestContext, ref: str) -> SecurityGroupRule:
    stmt = select(SecurityGroupRule).where(SecurityGroupRule.uuid == ref)
    stmt = policy.scope(ctx, stmt, SecurityGroupRule.project_id)
    rule = session.execute(stmt).scalars().first()
    if rule is None:
        raise exceptions.SecurityGroupRuleNotFound(rule=ref)
    return rule


def list_rules(db: Database, ctx: RequestContext, group: str | None = None) -> list[dict[str, Any]]:
    """The rules of ``group``, or of every group ``ctx`` may see."""
    _first_use(db, ctx.project_id)
    with db.reader() as session:
        if group is not None:
            return _rule_views(session, [get(session, ctx, group).id])
        stmt = policy.scope(ctx, select(SecurityGroup.id), SecurityGroup.project_id)
        return _rule_views(session, list(session.execute(stmt).scalars()))


def show_rule(db: Database, ctx: RequestContext, ref: str) -> dict[str, Any]:
    with db.reader() as session:
        rule = _get_rule(session, ctx, ref)
        [view] = [v for v in _rule_views(session, [rule.security_group_id]) if v["id"] == rule.uuid]
        return view


def delete_rule(
    db: Database, ctx: RequestContext, ref: str, *, dry_run: bool = False, on_change: OnChange | None = None
) -> None:
    def write(session: Session) -> list[str]:
        rule = _get_rule(session, ctx, ref)
        if dry_run:
            return []
        affected = _carriers(session, [rule.security_group_id])
        gone = session.execute(delete(SecurityGroupRule).where(SecurityGroupRule.id == rule.id))
        if gone.rowcount != 1:  # type: ignore[attr-defined]
            raise exceptions.SecurityGroupRuleNotFound(rule=ref)
        return _uuids(session, affected)

    if dry_run:
        with db.reader() as session:
            write(session)
        return
    _notify(on_change, db.run_in_transaction(write))


# --- which ports carry which groups --------------------------------------------------------


def resolve_for_boot(session: Session, ctx: RequestContext, names: list[str] | None) -> list[str]:
    """The groups a create names (``default`` when none), checked: each exists in the caller's
    project, or is ``default`` (made on first use). Their names, in order, once each."""
    wanted = names if names else [DEFAULT]
    out: list[str] = []
    for i, ref in enumerate(wanted):
        field = f"security_groups[{i}]" if names else "security_groups"
        group = _find(session, ctx, ref, ctx.project_id)
        if group is None and ref != DEFAULT:
            raise exceptions.ValidationError(
                field,
                f"security group {ref!r} does not exist in project {ctx.project_id} "
                "(novakit security group list shows the groups)",
            )
        name = group.name if group is not None else DEFAULT
        if name not in out:
            out.append(name)
    return out


def for_boot(session: Session, ctx: RequestContext, names: list[str] | None, nics: list[Any]) -> list[str]:
    """The groups a create's servers' ports will carry (what ``SecurityGroupFilter`` asks hosts to
    enforce), checked: the named ones (``default``) on the ports it makes, and the groups of the
    ports it was given (kept as they are, as Nova does). Groups named for a request that makes no
    port are refused: they would apply to nothing."""
    makes_ports = any(n.network is not None and n.port is None for n in nics)
    if names and not makes_ports:
        raise exceptions.ValidationError(
            "security_groups",
            "apply to the ports a create makes on novakit networks, and this request makes none "
            "(give a network: --nic net-id=NET; a port you give keeps its own groups)",
        )
    out = resolve_for_boot(session, ctx, names) if makes_ports else []
    given = [n.port.id for n in nics if n.port is not None]
    for carried in port_groups(session, given).values():
        out.extend(g for g in carried if g not in out)
    return out


def bind_port(session: Session, ctx: RequestContext, port: Port, names: list[str]) -> None:
    """Give a port (new, in this transaction) the groups ``names`` of the caller's project
    (``resolve_for_boot``'s answer); ``default`` is made here on first use."""
    ids = []
    for name in names:
        group = (
            ensure_default(session, ctx.project_id)
            if name == DEFAULT
            else get(session, ctx, name, ctx.project_id)
        )
        ids.append(group.id)
    if ids:
        session.execute(
            insert(SecurityGroupPortBinding), [{"port_id": port.id, "security_group_id": g} for g in ids]
        )


def port_groups(session: Session, port_ids: list[int]) -> dict[int, list[str]]:
    """port id -> the names of the groups it carries."""
    out: dict[int, list[str]] = {p: [] for p in port_ids}
    if not port_ids:
        return out
    rows = session.execute(
        select(SecurityGroupPortBinding.port_id, SecurityGroup.name)
        .join(SecurityGroup, SecurityGroup.id == SecurityGroupPortBinding.security_group_id)
        .where(SecurityGroupPortBinding.port_id.in_(port_ids))
        .order_by(SecurityGroup.name)
    )
    for port_id, name in rows:
        out[port_id].append(name)
    return out


def server_groups(db: Database, ctx: RequestContext, server: str) -> list[str]:
    """The names of the groups the server's ports carry (Nova's ``security_groups`` of a server)."""
    instance_uuid, _ = _server(db, ctx, server)
    with db.reader() as session:
        port_ids = list(session.execute(select(Port.id).where(Port.device_id == instance_uuid)).scalars())
        names = {n for names in port_groups(session, port_ids).values() for n in names}
    return sorted(names)


def _server(db: Database, ctx: RequestContext, server: str) -> tuple[str, str]:
    """The server's uuid and project, as ``ctx`` may find it."""
    from novakit.cells import mappings

    with db.reader() as session:
        found = mappings.find(session, ctx, server)
    if not found:
        raise exceptions.InstanceNotFound(instance_id=server)
    if len(found) > 1:
        raise exceptions.ValidationError(
            "server", f"{len(found)} servers are named {server!r}; give the server's id"
        )
    return str(found[0].instance_uuid), str(found[0].project_id)


def add_to_server(
    db: Database, ctx: RequestContext, server: str, group_ref: str, *, on_change: OnChange | None = None
) -> None:
    """Nova's addSecurityGroup: every port of the server carries the group (of the server's
    project) from now on."""
    instance_uuid, project_id = _server(db, ctx, server)
    if group_ref == DEFAULT:
        _first_use(db, project_id)

    def write(session: Session) -> list[str]:
        group = get(session, ctx, group_ref, project_id)
        ports = _server_ports(session, server, instance_uuid)
        carrying = set(
            session.execute(
                select(SecurityGroupPortBinding.port_id).where(
                    SecurityGroupPortBinding.security_group_id == group.id,
                    SecurityGroupPortBinding.port_id.in_(ports),
                )
            ).scalars()
        )
        if carrying == set(ports):
            raise exceptions.SecurityGroupExistsForInstance(group=group.name, instance_id=instance_uuid)
        session.execute(
            insert(SecurityGroupPortBinding),
            [{"port_id": p, "security_group_id": group.id} for p in ports if p not in carrying],
        )
        return _uuids(session, ports + _referrers(session, [group.id]))

    try:
        changed = db.run_in_transaction(write)
    except IntegrityError:
        # The group was deleted, or the same add committed, meanwhile: say which.
        with db.reader() as session:
            group = get(session, ctx, group_ref, project_id)
        raise exceptions.SecurityGroupExistsForInstance(group=group.name, instance_id=instance_uuid) from None
    _notify(on_change, changed)


def remove_from_server(
    db: Database, ctx: RequestContext, server: str, group_ref: str, *, on_change: OnChange | None = None
) -> None:
    """Nova's removeSecurityGroup: no port of the server carries the group any more."""
    instance_uuid, project_id = _server(db, ctx, server)

    def write(session: Session) -> list[str]:
        group = get(session, ctx, group_ref, project_id)
        ports = _server_ports(session, server, instance_uuid)
        gone = session.execute(
            delete(SecurityGroupPortBinding).where(
                SecurityGroupPortBinding.security_group_id == group.id,
                SecurityGroupPortBinding.port_id.in_(ports),
            )
        )
        if not gone.rowcount:  # type: ignore[attr-defined]
            raise exceptions.SecurityGroupNotExistsForInstance(group=group.name, instance_id=instance_uuid)
        return _uuids(session, ports + _referrers(session, [group.id]))

    _notify(on_change, db.run_in_transaction(write))


def _server_ports(session: Session, server: str, instance_uuid: str) -> list[int]:
    ports = list(
        session.execute(select(Port.id).where(Port.device_id == instance_uuid).order_by(Port.id)).scalars()
    )
    if not ports:
        raise exceptions.ValidationError(
            "server",
            f"server {server} has no port of a novakit network: security groups apply to ports "
            "(boot it with --nic net-id=NET)",
        )
    return ports


# --- what a change touches -----------------------------------------------------------------


def _carriers(session: Session, group_ids: Iterable[int]) -> list[int]:
    """The ports carrying any of the groups: a change of those groups' rules changes theirs."""
    ids = sorted(set(group_ids))
    if not ids:
        return []
    stmt = select(SecurityGroupPortBinding.port_id).where(SecurityGroupPortBinding.security_group_id.in_(ids))
    return sorted(set(session.execute(stmt).scalars()))


def _referrers(session: Session, group_ids: Iterable[int]) -> list[int]:
    """The ports carrying a group with a rule whose remote group is one of ``group_ids``: a change
    of those groups' members (or of a member's addresses) changes their expansion."""
    ids = sorted(set(group_ids))
    if not ids:
        return []
    referring = select(SecurityGroupRule.security_group_id).where(SecurityGroupRule.remote_group_id.in_(ids))
    return _carriers(session, session.execute(referring).scalars())


def _uuids(session: Session, port_ids: Iterable[int]) -> list[str]:
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
    group_ids = _group_ids(session, rules_of)
    member_ids = _group_ids(session, members_of)
    port_ids = _port_ids(session, ports)
    if port_ids:
        member_ids |= set(
            session.execute(
                select(SecurityGroupPortBinding.security_group_id).where(
                    SecurityGroupPortBinding.port_id.in_(port_ids)
                )
            ).scalars()
        )
    wanted = set(_carriers(session, group_ids)) | set(_referrers(session, member_ids)) | port_ids
    if not wanted:
        return []
    rows = session.execute(
        select(Port.uuid, Port.binding_host, Port.device_id)
        .where(Port.id.in_(sorted(wanted)))
        .order_by(Port.uuid)
    )
    return [AffectedPort(port_id=u, host=h, instance_uuid=d) for u, h, d in rows]


def _group_ids(session: Session, refs: Iterable[int | str]) -> set[int]:
    refs = list(refs)
    ids = {r for r in refs if isinstance(r, int)}
    uuids = [r for r in refs if isinstance(r, str)]
    if uuids:
        ids |= set(session.execute(select(SecurityGroup.id).where(SecurityGroup.uuid.in_(uuids))).scalars())
    return ids


def _port_ids(session: Session, refs: Iterable[int | str]) -> set[int]:
    refs = list(refs)
    ids = {r for r in refs if isinstance(r, int)}
    uuids = [r for r in refs if isinstance(r, str)]
    if uuids:
        ids |= set(session.execute(select(Port.id).where(Port.uuid.in_(uuids))).scalars())
    return ids


def _notify(on_change: OnChange | None, port_uuids: list[str]) -> None:
    if on_change is not None and port_uuids:
        on_change(port_uuids)


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
    remote group without members allows nothing. One port (id or uuid): its rules ([] for a port
    that carries no group). A list of port uuids: uuid -> rules for those that carry a group (a
    port without groups is left out: it is not filtered)."""
    if isinstance(source, Database):
        with source.reader() as session:
            return effective_rules(session, port)  # type: ignore[arg-type]
    session = source
    if isinstance(port, list):
        rows = session.execute(select(Port.id, Port.uuid).where(Port.uuid.in_(port))).all()
        by_id = {pid: uuid for pid, uuid in rows}
        computed = _effective(session, list(by_id))
        return {by_id[pid]: rules for pid, rules in computed.items() if pid in computed}
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
