"""Projects of the default domain: find by id or name, create; and the identity API's project
operations (``create_project`` ... ``delete_project``), an admin's."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import policy
from novakit.compute.schemas import parse
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import IdentityProject
from novakit.identity import DEFAULT_DOMAIN_ID
from novakit.identity.errors import IdentityConflict, IdentityNotFound
from novakit.identity.schemas import ProjectCreate
from novakit.identity.users import new_id


def get(session: Session, project_id: str) -> IdentityProject | None:
    return session.execute(
        select(IdentityProject).where(IdentityProject.uuid == project_id)
    ).scalar_one_or_none()


def exists(db: Database, project_id: str) -> bool:
    """Whether the identity keeps a project of that id (the ``known_project`` of the library's
    calls that take a project id in the service: Nova's ``verify_project_id``)."""
    with db.reader() as session:
        return get(session, project_id) is not None


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


# --- the identity API's project operations (admin only: ``novakit.policy``) ----------------


def view(project: IdentityProject) -> dict[str, Any]:
    """Keystone's project (every project is a child of the default domain)."""
    return {
        "id": project.uuid,
        "name": project.name,
        "domain_id": project.domain_id,
        "description": project.description or "",
        "enabled": project.enabled,
        "parent_id": project.domain_id,
        "is_domain": False,
        "tags": [],
        "options": {},
    }


def require(session: Session, project_id: str) -> IdentityProject:
    project = get(session, project_id)
    if project is None:
        raise IdentityNotFound(kind="project", id=project_id)
    return project


def create_project(db: Database, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
    policy.authorize(ctx, "identity:create_project")
    spec = parse(ProjectCreate, body).project

    def write(session: Session) -> dict[str, Any]:
        if find(session, spec.name) is not None:
            raise IdentityConflict(kind="project", name=spec.name)
        project = create(session, spec.name, spec.description)
        project.enabled = spec.enabled
        session.flush()
        return view(project)

    try:
        return db.run_in_transaction(write)
    except IntegrityError:  # the same name at the same moment
        raise IdentityConflict(kind="project", name=spec.name) from None


def list_projects(
    db: Database, ctx: RequestContext, name: str | None = None, enabled: bool | None = None
) -> list[dict[str, Any]]:
    policy.authorize(ctx, "identity:list_projects")
    stmt = select(IdentityProject).where(IdentityProject.domain_id == DEFAULT_DOMAIN_ID)
    if name is not None:
        stmt = stmt.where(IdentityProject.name == name)
    if enabled is not None:
        stmt = stmt.where(IdentityProject.enabled == enabled)
    with db.reader() as session:
        return [view(p) for p in session.execute(stmt.order_by(IdentityProject.name)).scalars()]


def show_project(db: Database, ctx: RequestContext, project_id: str) -> dict[str, Any]:
    policy.authorize(ctx, "identity:get_project")
    with db.reader() as session:
        return view(require(session, project_id))


def delete_project(db: Database, ctx: RequestContext, project_id: str) -> None:
    """The project, its role assignments and application credentials (their tokens end). The
    fleet's records of the project (servers, volumes, ...) are not touched: delete them first."""
    policy.authorize(ctx, "identity:delete_project")

    def write(session: Session) -> None:
        session.delete(require(session, project_id))
        session.flush()

    db.run_in_transaction(write)
