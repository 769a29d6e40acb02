"""Roles: global names (Keystone's roles with no domain). ``admin``, ``member`` and ``reader``
are made by bootstrap; ``novakit.policy`` reads the names. The API lists and shows them (an
admin's ``identity:list_roles``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import policy
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import IdentityRole
from novakit.identity.errors import IdentityNotFound
from novakit.identity.users import new_id


def find(session: Session, name: str) -> IdentityRole | None:
    return session.execute(select(IdentityRole).where(IdentityRole.name == name)).scalar_one_or_none()


def ensure(session: Session, name: str) -> tuple[IdentityRole, bool]:
    """The role named ``name``, made if missing; whether it was made."""
    role = find(session, name)
    if role is not None:
        return role, False
    role = IdentityRole(uuid=new_id(), name=name)
    session.add(role)
    session.flush()
    return role, True


def view(role: IdentityRole) -> dict[str, Any]:
    return {"id": role.uuid, "name": role.name, "domain_id": None, "description": None, "options": {}}


def get(session: Session, role_id: str) -> IdentityRole | None:
    return session.execute(select(IdentityRole).where(IdentityRole.uuid == role_id)).scalar_one_or_none()


def require(session: Session, role_id: str) -> IdentityRole:
    role = get(session, role_id)
    if role is None:
        raise IdentityNotFound(kind="role", id=role_id)
    return role


def list_roles(db: Database, ctx: RequestContext, name: str | None = None) -> list[dict[str, Any]]:
    policy.authorize(ctx, "identity:list_roles")
    stmt = select(IdentityRole)
    if name is not None:
        stmt = stmt.where(IdentityRole.name == name)
    with db.reader() as session:
        return [view(r) for r in session.execute(stmt.order_by(IdentityRole.name)).scalars()]


def show_role(db: Database, ctx: RequestContext, role_id: str) -> dict[str, Any]:
    policy.authorize(ctx, "identity:list_roles")
    with db.reader() as session:
        return view(require(session, role_id))
