"""Server groups (Nova's os-server-groups): a placement policy shared by their members.

A group belongs to a project; its name is unique among the project's live
groups, which is what lets the Ansible module find it again by name. The
policy and rules cannot change once members may have been placed by them
(Nova refuses that too): a different policy for an existing name is an error
that says to create a new group. Members join at boot (``server_group`` of a
create request) and leave when they are deleted.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.compute import schemas
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import InstanceGroup, InstanceGroupMember, InstanceMapping, utcnow

POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity")
# rule -> the policies that accept it (Nova: max_server_per_host is for anti-affinity only)
RULES = {"max_server_per_host": ("anti-affinity",)}


def validate(policy: str, rules: dict[str, Any] | None) -> dict[str, int]:
    """Check a policy and its rules; returns the rules normalised to integers."""
    if policy not in POLICIES:
        raise exceptions.ValidationError("policy", f"{policy!r} is not one of {', '.join(POLICIES)}")
    out: dict[str, int] = {}
    for name, value in (rules or {}).items():
        if name not in RULES:
            raise exceptions.ValidationError(
                f"rules.{name}", f"is not a known rule; known rules: {', '.join(RULES)}"
            )
        if policy not in RULES[name]:
            raise exceptions.ValidationError(
                f"rules.{name}", f"applies to policy {' or '.join(RULES[name])} only, not {policy}"
            )
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise exceptions.ValidationError(
                f"rules.{name}", f"must be a positive integer, got {value!r}"
            ) from None
        if number < 1:
            raise exceptions.ValidationError(f"rules.{name}", f"must be a positive integer, got {number}")
        out[name] = number
    return out


def view(group: InstanceGroup, members: list[str]) -> dict[str, Any]:
    return {
        "id": group.uuid,
        "name": group.name,
        "policy": group.policy,
        "rules": dict(group.rules or {}),
        "members": members,
        "project_id": group.project_id,
        "user_id": group.user_id,
    }


def _members(session: Session, group: InstanceGroup) -> list[str]:
    rows = session.execute(
        select(InstanceGroupMember.instance_uuid)
        # Live members wherever they live: their mappings are in the API database with the group.
        .join(InstanceMapping, InstanceMapping.instance_uuid == InstanceGroupMember.instance_uuid)
        .where(InstanceGroupMember.group_id == group.id, InstanceMapping.deleted == 0)
        .order_by(InstanceGroupMember.id)
    ).scalars()
    return list(rows)


def _find(
    session: Session, ctx: RequestContext, ref: str, project_id: str | None = None
) -> InstanceGroup | None:
    stmt = select(InstanceGroup).where(InstanceGroup.deleted == 0)
    stmt = stmt.where((InstanceGroup.uuid == ref) | (InstanceGroup.name == ref))
    stmt = policy.scope(ctx, stmt, InstanceGroup.project_id, project_id)
    return session.execute(stmt.order_by(InstanceGroup.id)).scalars().first()


def get(db: Database, ctx: RequestContext, ref: str) -> dict[str, Any]:
    """A group by uuid or name, in the caller's project (an admin's: any project, own first)."""
    with db.reader() as session:
        group = _find(session, ctx, ref, ctx.project_id) or _find(session, ctx, ref)
        if group is None:
            raise exceptions.ServerGroupNotFound(group_id=ref)
        return view(group, _members(session, group))


def find(db: Database, ctx: RequestContext, ref: str) -> dict[str, Any] | None:
    try:
        return get(db, ctx, ref)
    except exceptions.ServerGroupNotFound:
        return None


def of_server(db: Database, instance_uuid: str) -> list[str]:
    """The ids of the live groups the server is a member of (Nova 2.71's ``server_groups``)."""
    with db.reader() as session:
        return list(
            session.execute(
                select(InstanceGroup.uuid)
                .join(InstanceGroupMember, InstanceGroupMember.group_id == InstanceGroup.id)
                .where(InstanceGroupMember.instance_uuid == instance_uuid, InstanceGroup.deleted == 0)
                .order_by(InstanceGroup.id)
            ).scalars()
        )


def list_groups(db: Database, ctx: RequestContext, all_projects: bool = False) -> list[dict[str, Any]]:
    with db.reader() as session:
        stmt = select(InstanceGroup).where(InstanceGroup.deleted == 0).order_by(InstanceGroup.name)
        stmt = policy.scope(ctx, stmt, InstanceGroup.project_id, None if all_projects else ctx.project_id)
        return [view(g, _members(session, g)) for g in session.execute(stmt).scalars()]


def create(
    db: Database,
    ctx: RequestContext,
    name: str,
    policy: str,
    rules: dict[str, Any] | None = None,
    *,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Create a group in the caller's project; DuplicateName if a live group has that name.
    ``dry_run`` (check mode): the same checks, in a read; the group as it would be, nothing written."""
    req = schemas.parse(schemas.Rename, {"name": name})  # the same name rules as servers
    clean_rules = validate(policy, rules)

    def write(session: Session) -> dict[str, Any]:
        if _find(session, ctx, req.name, ctx.project_id) is not None:
            raise exceptions.Conflict(
                reason=f"a server group named {req.name!r} exists in project {ctx.project_id}; "
                "delete it first or choose another name"
            )
        group = InstanceGroup(
            uuid=str(uuidlib.uuid4()),
            name=req.name,
            project_id=ctx.project_id,
            user_id=ctx.user_id,
            policy=policy,
            rules=clean_rules,
        )
        if dry_run:
            return view(group, [])
        session.add(group)
        session.flush()
        return view(group, [])

    if dry_run:
        with db.reader() as session:
            return write(session)
    return db.run_in_transaction(write)


def delete_group(db: Database, ctx: RequestContext, ref: str) -> dict[str, Any]:
    """Soft-delete a group; its members keep running (as in Nova) but leave it."""

    def write(session: Session) -> dict[str, Any]:
        group = _find(session, ctx, ref, ctx.project_id) or _find(session, ctx, ref)
        if group is None:
            raise exceptions.ServerGroupNotFound(group_id=ref)
        out = view(group, _members(session, group))
        group.deleted = group.id
        group.deleted_at = utcnow()
        session.execute(delete(InstanceGroupMember).where(InstanceGroupMember.group_id == group.id))
        return out

    return db.run_in_transaction(write)


def count(db: Database, ctx: RequestContext) -> int:
    with db.reader() as session:
        return int(
            session.execute(
                select(func.count(InstanceGroup.id)).where(
                    InstanceGroup.deleted == 0, InstanceGroup.project_id == ctx.project_id
                )
            ).scalar_one()
        )
