"""Role assignments: a user's roles on a project (Keystone's UserProject assignments).

A project-scoped token carries the roles its user has on its project *now*: they are read
at every validation, and a token whose user has no role left there is refused.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from novakit.db.models import IdentityProject, IdentityRole, IdentityRoleAssignment, IdentityUser


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
