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

A rule's fields are checked and spelt one way in ``security_group_rules``; the effective rules
and which ports a change touches are ``effective_rules``'s (asked here too).

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

import dataclasses
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from pydantic import Field, field_validator
from sqlalchemy import delete, func, insert, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy, quota
from novakit.compute import schemas
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Port, SecurityGroup, SecurityGroupPortBinding, SecurityGroupRule

# effective_rules, affected_ports: answered there, asked here too (the records' one front door).
from novakit.network.effective_rules import (
    AffectedPort,
    affected_ports,
    carriers,
    effective_rules,
    port_uuids,
    referrers,
)
from novakit.network.security_group_rules import ETHERTYPES, RuleCreate, RuleFields, normalise_rule

__all__ = [
    "DEFAULT",
    "AffectedPort",
    "GroupCreate",
    "RuleCreate",
    "add_to_server",
    "affected_ports",
    "create_group",
    "create_rule",
    "delete_group",
    "delete_rule",
    "effective_rules",
    "find_rule",
    "list_groups",
    "list_rules",
    "remove_from_server",
    "server_groups",
    "show_group",
    "show_rule",
    "update_group",
]

DEFAULT = "default"
#: Called after a change committed, with the uuids of the ports whose effective rules changed.
OnChange = Callable[[list[str]], None]


# --- requests ------------------------------------------------------------------------------


class GroupCreate(schemas._Request):
    name: str
    description: str | None = Field(default=None, max_length=255)
    # Another project's group: an admin's (``security_group:project``).
    project_id: str | None = Field(default=None, min_length=1, max_length=255)

    _check_name = field_validator("name")(classmethod(lambda cls, v: schemas._check_name(v)))


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
    # RuleFields' fields are the rule's columns, by name.
    return SecurityGroupRule(
        uuid=str(uuidlib.uuid4()),
        security_group_id=group.id,
        project_id=group.project_id,
        **dataclasses.asdict(fields),
        remote_group_id=remote_group_id,
        description=description,
        fingerprint=fields.fingerprint(remote_group_id),
    )


# --- groups --------------------------------------------------------------------------------


def _name_taken(name: str, project_id: str) -> exceptions.Conflict:
    # Said by the check before the insert and by the unique key that catches a create racing it.
    return exceptions.Conflict(
        reason=f"a security group named {name!r} exists in project {project_id}; "
        "group names are unique per project"
    )


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
            raise _name_taken(req.name, project_id)
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

    try:
        return db.run_or_dry_run(write, dry_run=dry_run)
    except IntegrityError:
        raise _name_taken(req.name, project_id) from None


class GroupUpdate(schemas._Request):
    name: str | None = None
    description: str | None = Field(default=None, max_length=255)

    _check_name = field_validator("name")(
        classmethod(lambda cls, v: schemas._check_name(v) if v is not None else v)
    )


def update_group(db: Database, ctx: RequestContext, ref: str, data: dict[str, Any]) -> dict[str, Any]:
    """Rename a group or change its description (Neutron's ``PUT /security-groups/{id}``); the
    default group keeps its name (Neutron's SecurityGroupCannotUpdateDefault), and no other
    group takes it."""
    req = schemas.parse(GroupUpdate, data)

    def write(session: Session) -> dict[str, Any]:
        group = get(session, ctx, ref)
        if req.name is not None and req.name != group.name:
            if group.name == DEFAULT or req.name.lower() == DEFAULT:
                raise exceptions.Conflict(reason="Updating default security group name not allowed.")
            taken = session.execute(
                select(SecurityGroup.id).where(
                    SecurityGroup.project_id == group.project_id, SecurityGroup.name == req.name
                )
            ).first()
            if taken is not None:
                raise _name_taken(req.name, group.project_id)
            group.name = req.name
        if "description" in req.model_fields_set:
            group.description = req.description
        session.flush()
        return group_view(session, group)

    try:
        return db.run_in_transaction(write)
    except IntegrityError:
        raise _name_taken(req.name or ref, ctx.project_id) from None


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
        affected = referrers(session, [group.id])
        session.execute(delete(SecurityGroupRule).where(SecurityGroupRule.remote_group_id == group.id))
        session.execute(delete(SecurityGroupRule).where(SecurityGroupRule.security_group_id == group.id))
        session.execute(delete(SecurityGroup).where(SecurityGroup.id == group.id))
        return port_uuids(session, affected)

    try:
        changed = db.run_or_dry_run(write, dry_run=dry_run)
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
        return rule_view(rule, group, remote), port_uuids(session, carriers(session, [group.id]))

    try:
        view, changed = db.run_or_dry_run(write, dry_run=dry_run)
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
        affected = carriers(session, [rule.security_group_id])
        gone = session.execute(delete(SecurityGroupRule).where(SecurityGroupRule.id == rule.id))
        if gone.rowcount != 1:  # type: ignore[attr-defined]
            raise exceptions.SecurityGroupRuleNotFound(rule=ref)
        return port_uuids(session, affected)

    _notify(on_change, db.run_or_dry_run(write, dry_run=dry_run))


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
    if names and not port.port_security_enabled:
        raise no_port_security(port.name or port.uuid, "security_groups")
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


def no_port_security(port: str, field: str) -> exceptions.ValidationError:
    """Neutron's rule: a port carries security groups only with port security enabled."""
    return exceptions.ValidationError(
        field,
        f"port {port} has port security disabled, and port security must be enabled for a port "
        "to carry security groups (as in Neutron); a port with port security disabled is not filtered",
    )


def port_groups(session: Session, port_ids: list[int]) -> dict[int, list[str]]:
    """port id -> the names of the groups it carries."""
    return carried_groups(session, port_ids)[0]


def carried_groups(
    session: Session, port_ids: list[int]
) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """port id -> the names, and port id -> the ids (Neutron's port ``security_groups``), of
    the groups each port carries, in the order of their names; one query."""
    names: dict[int, list[str]] = {p: [] for p in port_ids}
    ids: dict[int, list[str]] = {p: [] for p in port_ids}
    if not port_ids:
        return names, ids
    rows = session.execute(
        select(SecurityGroupPortBinding.port_id, SecurityGroup.name, SecurityGroup.uuid)
        .join(SecurityGroup, SecurityGroup.id == SecurityGroupPortBinding.security_group_id)
        .where(SecurityGroupPortBinding.port_id.in_(port_ids))
        .order_by(SecurityGroup.name)
    )
    for port_id, name, uuid in rows:
        names[port_id].append(name)
        ids[port_id].append(uuid)
    return names, ids


def port_group_db_ids(session: Session, port_id: int) -> list[int]:
    """The row ids of the groups one port carries, sorted."""
    stmt = select(SecurityGroupPortBinding.security_group_id).where(
        SecurityGroupPortBinding.port_id == port_id
    )
    return sorted(session.execute(stmt).scalars())


def server_groups(db: Database, ctx: RequestContext, server: str) -> list[str]:
    """The names of the groups the server's ports carry (Nova's ``security_groups`` of a server)."""
    instance_uuid, _ = _server(db, ctx, server)
    return instance_groups(db, instance_uuid)


def instance_groups(db: Database, instance_uuid: str) -> list[str]:
    """The names of the groups the ports of a server (found already, by uuid) carry."""
    return instances_groups(db, [instance_uuid])[instance_uuid]


def instances_groups(db: Database, instance_uuids: list[str]) -> dict[str, list[str]]:
    """``instance_groups`` of many servers at once (a listing's page: one query, not one a server)."""
    out: dict[str, set[str]] = {u: set() for u in instance_uuids}
    if instance_uuids:
        with db.reader() as session:
            rows = session.execute(
                select(Port.device_id, SecurityGroup.name)
                .join(SecurityGroupPortBinding, SecurityGroupPortBinding.port_id == Port.id)
                .join(SecurityGroup, SecurityGroup.id == SecurityGroupPortBinding.security_group_id)
                .where(Port.device_id.in_(instance_uuids))
            )
            for device_id, name in rows:
                out[str(device_id)].add(name)
    return {u: sorted(names) for u, names in out.items()}


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
        open_port = session.execute(
            select(Port.name, Port.uuid).where(Port.id.in_(ports), Port.port_security_enabled.is_(False))
        ).first()
        if open_port is not None:
            raise no_port_security(open_port.name or open_port.uuid, "security_group")
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
        return port_uuids(session, ports + referrers(session, [group.id]))

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
        return port_uuids(session, ports + referrers(session, [group.id]))

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


def _notify(on_change: OnChange | None, changed: list[str]) -> None:
    if on_change is not None and changed:
        on_change(changed)
