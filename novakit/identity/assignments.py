"""Role assignments: a user's roles on a project (Keystone's UserProject assignments).

A project-scoped token carries the roles its user has on its project *now*: they are read
at every validation, and a token whose user has no role left there is refused.
"""

from __future__ import annotations

import contextlib
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import policy
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import IdentityProject, IdentityRole, IdentityRoleAssignment, IdentityUser
from novakit.identity import domain_view, projects, roles, users
from novakit.identity.errors import IdentityNotFound


def roles_on(session: Session, user: IdentityUser, project: IdentityProject) -> list[IdentityRole]:
    """The user's roles on the project, by name."""
    return list(
        session.execute(
            select(IdentityRole)
            .join(IdentityRoleAssignment, IdentityRoleAssignment.role_id == IdentityRole.id)
            .where(IdentityRoleAssignment.user_id == user.id, IdentityRoleAssignment.project_id == project.id)
            .order_by(IdentityRole.name)
        ).scalars()
    )


def grant(session: Session, user: IdentityUser, project: IdentityProject, role: IdentityRole) -> bool:
    """Give the user the role on the project; False if it had it already."""
    if role in roles_on(session, user, project):
        return False
    session.add(IdentityRoleAssignment(user_id=user.id, project_id=project.id, role_id=role.id))
    session.flush()
    return True


def revoke(session: Session, user: IdentityUser, project: IdentityProject, role: IdentityRole) -> bool:
    """Take the role away; False if the user did not have it."""
    result = session.execute(
        delete(IdentityRoleAssignment).where(
            IdentityRoleAssignment.user_id == user.id,
            IdentityRoleAssignment.project_id == project.id,
            IdentityRoleAssignment.role_id == role.id,
        )
    )
    return bool(getattr(result, "rowcount", 0))


# --- the identity API's assignment operations (admin only: ``novakit.policy``) -------------


def grant_role(db: Database, ctx: RequestContext, project_id: str, user_id: str, role_id: str) -> None:
    """``PUT /v3/projects/{p}/users/{u}/roles/{r}``: idempotent."""
    policy.authorize(ctx, "identity:create_grant")

    def write(session: Session) -> None:
        grant(session, *_user_project_role(session, project_id, user_id, role_id))

    with contextlib.suppress(IntegrityError):  # granted at the same moment elsewhere: the same end
        db.run_in_transaction(write)


def revoke_role(db: Database, ctx: RequestContext, project_id: str, user_id: str, role_id: str) -> None:
    """Take the role away (the user's tokens on the project that relied on it end, and so do its
    application credentials that carry it); 404 if the user did not have it."""
    policy.authorize(ctx, "identity:revoke_grant")

    def write(session: Session) -> None:
        if not revoke(session, *_user_project_role(session, project_id, user_id, role_id)):
            raise IdentityNotFound(kind="role assignment", id=f"{role_id} of {user_id} on {project_id}")

    db.run_in_transaction(write)


def check_role(db: Database, ctx: RequestContext, project_id: str, user_id: str, role_id: str) -> None:
    policy.authorize(ctx, "identity:list_role_assignments")
    with db.reader() as session:
        user, project, role = _user_project_role(session, project_id, user_id, role_id)
        if role not in roles_on(session, user, project):
            raise IdentityNotFound(kind="role assignment", id=f"{role_id} of {user_id} on {project_id}")


def _user_project_role(
    session: Session, project_id: str, user_id: str, role_id: str
) -> tuple[IdentityUser, IdentityProject, IdentityRole]:
    return (
        users.require(session, user_id),
        projects.require(session, project_id),
        roles.require(session, role_id),
    )


def list_assignments(
    db: Database,
    ctx: RequestContext,
    *,
    user_id: str | None = None,
    project_id: str | None = None,
    role_id: str | None = None,
    include_names: bool = False,
) -> list[dict[str, Any]]:
    """Keystone's role assignments (user on project only), filtered by user, project, role;
    with ``include_names`` the names of each and of their domain too."""
    policy.authorize(ctx, "identity:list_role_assignments")
    stmt = (
        select(IdentityUser, IdentityProject, IdentityRole)
        .join(IdentityRoleAssignment, IdentityRoleAssignment.user_id == IdentityUser.id)
        .join(IdentityProject, IdentityRoleAssignment.project_id == IdentityProject.id)
        .join(IdentityRole, IdentityRoleAssignment.role_id == IdentityRole.id)
    )
    if user_id is not None:
        stmt = stmt.where(IdentityUser.uuid == user_id)
    if project_id is not None:
        stmt = stmt.where(IdentityProject.uuid == project_id)
    if role_id is not None:
        stmt = stmt.where(IdentityRole.uuid == role_id)
    stmt = stmt.order_by(IdentityUser.name, IdentityProject.name, IdentityRole.name)
    with db.reader() as session:
        rows = session.execute(stmt).all()
        return [_assignment_view(user, project, role, include_names) for user, project, role in rows]


def _assignment_view(
    user: IdentityUser, project: IdentityProject, role: IdentityRole, include_names: bool
) -> dict[str, Any]:
    role_ref: dict[str, Any] = {"id": role.uuid}
    user_ref: dict[str, Any] = {"id": user.uuid}
    project_ref: dict[str, Any] = {"id": project.uuid}
    if include_names:
        role_ref["name"] = role.name
        user_ref.update(name=user.name, domain=domain_view())
        project_ref.update(name=project.name, domain=domain_view())
    return {"role": role_ref, "user": user_ref, "scope": {"project": project_ref}}
