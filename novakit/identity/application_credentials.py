"""Application credentials (Keystone's): a user hands a job some of its roles on one project,
proven by a secret instead of the user's password (for AWX: a job gets a credential, never a
password nor the database URL).

- made from a project-scoped token of the user itself (the credential's project is the
  token's; its roles a subset of the token's, all of them when none are asked for); the
  secret is generated (or given), kept only as an argon2 hash, shown once in the answer;
- a token issued from a credential (``authenticate``) is scoped to the credential's project
  with the credential's roles only; it stops validating when the credential is deleted or
  expires, its user is disabled, or the user no longer holds one of the credential's roles
  (``check``, called by every token validation);
- a token issued from a restricted credential (the default) cannot make or delete
  credentials (Keystone's rule against a credential minting credentials);
- the user's own credentials only: another user's are an admin's
  (``identity:application_credential_of_another_user``).
"""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.compute.schemas import parse
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import (
    IdentityApplicationCredential,
    IdentityApplicationCredentialRole,
    IdentityProject,
    IdentityRole,
    IdentityUser,
    utcnow,
)
from novakit.identity import is_default_domain, passwords, users
from novakit.identity.errors import IdentityConflict, IdentityNotFound
from novakit.identity.schemas import ApplicationCredentialCreate, ApplicationCredentialRef, RoleRef
from novakit.identity.users import new_id

if TYPE_CHECKING:
    from novakit.identity.tokens import ValidToken

#: bytes of randomness in a generated secret (Keystone's too), URL-safe base64 without padding
SECRET_BYTES = 64

CredRole = IdentityApplicationCredentialRole


class CredentialInvalid(Exception):
    """A credential that does not (or no longer) prove anything; ``reason`` is for the log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def generate_secret() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


def roles_of(session: Session, cred: IdentityApplicationCredential) -> list[IdentityRole]:
    return list(
        session.execute(
            select(IdentityRole)
            .join(CredRole, CredRole.role_id == IdentityRole.id)
            .where(CredRole.application_credential_id == cred.id)
            .order_by(IdentityRole.name)
        ).scalars()
    )


def get(session: Session, cred_id: str) -> IdentityApplicationCredential | None:
    return session.execute(
        select(IdentityApplicationCredential).where(IdentityApplicationCredential.uuid == cred_id)
    ).scalar_one_or_none()


def is_expired(cred: IdentityApplicationCredential, now: dt.datetime | None = None) -> bool:
    return cred.expires_at is not None and (now or utcnow()) >= cred.expires_at


def check(
    session: Session, cred_id: str, user: IdentityUser, project: IdentityProject, held: list[IdentityRole]
) -> tuple[IdentityApplicationCredential, list[IdentityRole]]:
    """The credential a token was issued from, and the roles the token carries: the
    credential's, each still held by the user on the project (``held``); CredentialInvalid
    when it is gone, expired, of another user or project, or a role is no longer held."""
    cred = get(session, cred_id)
    if cred is None or (cred.user_id, cred.project_id) != (user.id, project.id):
        raise CredentialInvalid("application credential deleted")
    if is_expired(cred):
        raise CredentialInvalid("application credential expired")
    carried = roles_of(session, cred)
    if not carried or not {r.id for r in carried} <= {r.id for r in held}:
        raise CredentialInvalid("a role of the application credential is no longer held")
    return cred, carried


# --- authentication ------------------------------------------------------------------------


@dataclass(frozen=True)
class Proven:
    user_id: str
    project_id: str
    cred_id: str


def authenticate(db: Database, ref: ApplicationCredentialRef) -> Proven:
    """Who the credential (by id, or by name and its user) and its secret prove;
    CredentialInvalid otherwise (unknown, wrong secret, expired, its user disabled)."""
    with db.reader() as session:
        cred: IdentityApplicationCredential | None = None
        if ref.id is not None:
            cred = get(session, ref.id)
        elif ref.user is not None:
            if ref.user.id is not None:
                user = users.get(session, ref.user.id)
            elif ref.user.domain is not None and is_default_domain(ref.user.domain.id, ref.user.domain.name):
                user = users.find(session, ref.user.name or "")
            else:
                user = None
            if user is not None:
                cred = session.execute(
                    select(IdentityApplicationCredential).where(
                        IdentityApplicationCredential.user_id == user.id,
                        IdentityApplicationCredential.name == ref.name,
                    )
                ).scalar_one_or_none()
        hashed = cred.secret_hash if cred is not None else None
        owner = session.get(IdentityUser, cred.user_id) if cred is not None else None
        project = session.get(IdentityProject, cred.project_id) if cred is not None else None
        expired = cred is not None and is_expired(cred)
        proven = (
            Proven(owner.uuid, project.uuid, cred.uuid)
            if cred is not None and owner is not None and project is not None
            else None
        )
        enabled = owner is not None and owner.enabled
    # Verified (slow) outside the transaction; an unknown credential costs the same time.
    if not passwords.verify(hashed, ref.secret) or proven is None:
        raise CredentialInvalid("wrong secret or unknown application credential")
    if expired:
        raise CredentialInvalid(f"application credential {proven.cred_id} expired")
    if not enabled:
        raise CredentialInvalid(f"user {proven.user_id} is disabled")
    return proven


# --- the API's operations ------------------------------------------------------------------


def _owner(session: Session, ctx: RequestContext, user_id: str) -> IdentityUser:
    """The user whose credentials are asked about: the caller's own, or any for an admin."""
    if user_id != ctx.user_id:
        policy.authorize(ctx, "identity:application_credential_of_another_user")
    user = users.get(session, user_id)
    if user is None:
        raise IdentityNotFound(kind="user", id=user_id)
    return user


def _refuse_restricted(caller: ValidToken) -> None:
    made_by = caller.application_credential
    if made_by is not None and not made_by.unrestricted:
        raise exceptions.Forbidden(
            reason="a token from a restricted application credential cannot make or delete "
            "application credentials"
        )


def _asked_roles(asked: list[RoleRef], held: list[IdentityRole]) -> list[IdentityRole]:
    if not asked:
        return list(held)
    chosen: dict[int, IdentityRole] = {}
    for ref in asked:
        match = [r for r in held if (ref.id is not None and r.uuid == ref.id) or r.name == ref.name]
        if not match:
            raise exceptions.ValidationError(
                "application_credential.roles", "must be roles the user holds on the token's project"
            )
        chosen[match[0].id] = match[0]
    return list(chosen.values())


def create(db: Database, caller: ValidToken, user_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Make a credential for the caller's own user on the caller's project; the view with the
    secret (the only time it is shown)."""
    if user_id != caller.user.uuid:
        # Keystone's rule: a credential delegates the caller's own roles, even for an admin.
        raise exceptions.Forbidden(reason="application credentials are made for one's own user only")
    _refuse_restricted(caller)
    spec = parse(ApplicationCredentialCreate, body).application_credential
    if caller.project is None:
        raise exceptions.ValidationError("scope", "a project-scoped token is needed to make one")
    expires_at = spec.expires_at
    if expires_at is not None:
        if expires_at.tzinfo is not None:  # kept naive, in UTC, as every time in the database
            expires_at = expires_at.astimezone(dt.UTC).replace(tzinfo=None)
        if expires_at <= utcnow():
            raise exceptions.ValidationError("application_credential.expires_at", "is in the past")
    roles = _asked_roles(spec.roles, caller.roles)
    secret = spec.secret or generate_secret()
    secret_hash = passwords.hash_password(secret)  # slow: before the transaction
    project_row_id = caller.project.id
    user_row_id = caller.user.id

    def write(session: Session) -> dict[str, Any]:
        taken = session.execute(
            select(IdentityApplicationCredential.id).where(
                IdentityApplicationCredential.user_id == user_row_id,
                IdentityApplicationCredential.name == spec.name,
            )
        ).first()
        if taken is not None:
            raise IdentityConflict(kind="application credential", name=spec.name)
        cred = IdentityApplicationCredential(
            uuid=new_id(),
            name=spec.name,
            user_id=user_row_id,
            project_id=project_row_id,
            secret_hash=secret_hash,
            description=spec.description,
            expires_at=expires_at,
            unrestricted=spec.unrestricted,
            created_at=utcnow(),
        )
        session.add(cred)
        session.flush()
        for role in roles:
            session.add(IdentityApplicationCredentialRole(application_credential_id=cred.id, role_id=role.id))
        session.flush()
        return view(session, cred)

    try:
        answer = db.run_in_transaction(write)
    except IntegrityError:  # the same name made at the same moment by another request
        raise IdentityConflict(kind="application credential", name=spec.name) from None
    answer["secret"] = secret
    return answer


def list_for(
    db: Database, ctx: RequestContext, user_id: str, name: str | None = None
) -> list[dict[str, Any]]:
    with db.reader() as session:
        user = _owner(session, ctx, user_id)
        stmt = select(IdentityApplicationCredential).where(IdentityApplicationCredential.user_id == user.id)
        if name is not None:
            stmt = stmt.where(IdentityApplicationCredential.name == name)
        rows = session.execute(stmt.order_by(IdentityApplicationCredential.name)).scalars()
        return [view(session, cred) for cred in rows]


def _own(session: Session, ctx: RequestContext, user_id: str, cred_id: str) -> IdentityApplicationCredential:
    user = _owner(session, ctx, user_id)
    cred = get(session, cred_id)
    if cred is None or cred.user_id != user.id:
        raise IdentityNotFound(kind="application credential", id=cred_id)
    return cred


def show(db: Database, ctx: RequestContext, user_id: str, cred_id: str) -> dict[str, Any]:
    with db.reader() as session:
        return view(session, _own(session, ctx, user_id, cred_id))


def remove(db: Database, ctx: RequestContext, caller: ValidToken, user_id: str, cred_id: str) -> None:
    _refuse_restricted(caller)

    def write(session: Session) -> None:
        cred = _own(session, ctx, user_id, cred_id)
        session.execute(
            delete(IdentityApplicationCredential).where(IdentityApplicationCredential.id == cred.id)
        )

    db.run_in_transaction(write)


def view(session: Session, cred: IdentityApplicationCredential) -> dict[str, Any]:
    """Keystone's shape, without the secret (``create`` adds it, once)."""
    from novakit.identity.tokens import isotime

    user = session.get(IdentityUser, cred.user_id)
    project = session.get(IdentityProject, cred.project_id)
    return {
        "id": cred.uuid,
        "name": cred.name,
        "description": cred.description,
        "user_id": user.uuid if user is not None else None,
        "project_id": project.uuid if project is not None else None,
        "expires_at": isotime(cred.expires_at) if cred.expires_at is not None else None,
        "unrestricted": cred.unrestricted,
        "roles": [{"id": r.uuid, "name": r.name, "domain_id": None} for r in roles_of(session, cred)],
        "access_rules": [],
    }
