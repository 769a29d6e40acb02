"""Projects of the default domain: find by id or name, create."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit.db.models import IdentityProject
from novakit.identity import DEFAULT_DOMAIN_ID
from novakit.identity.users import new_id


def get(session: Session, project_id: str) -> IdentityProject | None:
    return session.execute(
        select(IdentityProject).where(IdentityProject.uuid == project_id)
    ).scalar_one_or_none()


def find(session: Session, name: str, domain_id: str = DEFAULT_DOMAIN_ID) -> IdentityProject | None:
    return session.execute(
        select(IdentityProject).where(IdentityProject.name == name, IdentityProject.domain_id == domain_id)
    ).scalar_one_or_none()


def create(session: Session, name: str, description: str | None = None) -> IdentityProject:
    project = IdentityProject(
        uuid=new_id(), name=name, domain_id=DEFAULT_DOMAIN_ID, enabled=True, description=description
    )
    session.add(project)
    session.flush()
    return project
