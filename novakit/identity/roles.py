"""Roles: global names (Keystone's roles with no domain). ``admin``, ``member`` and ``reader``
are made by bootstrap; ``novakit.policy`` reads the names."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit.db.models import IdentityRole
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
