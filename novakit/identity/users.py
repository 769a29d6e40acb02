"""Users: find by id or by name in the default domain, create, set a password, enable; and
the identity API's user operations (``create_user`` ... ``delete_user``), an admin's.

Setting a password records when (``password_changed_at``), and so does disabling a user
(``tokens_revoked_at``): tokens issued before either stop validating (``novakit.identity.tokens``),
at once, because every validation reads the user.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.compute.schemas import parse
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import IdentityUser, utcnow
from novakit.identity import DEFAULT_DOMAIN_ID, passwords
from novakit.identity.errors import IdentityConflict, IdentityNotFound
from novakit.identity.schemas import UserCreate, UserUpdate


def new_id() -> str:
    """A Keystone-style id: 32 hex digits."""
    return uuid.uuid4().hex


def get(session: Session, user_id: str) -> IdentityUser | None:
    return session.execute(select(IdentityUser).where(IdentityUser.uuid == user_id)).scalar_one_or_none()


def find(session: Session, name: str, domain_id: str = DEFAULT_DOMAIN_ID) -> IdentityUser | None:
    return session.execute(
        select(IdentityUser).where(IdentityUser.name == name, IdentityUser.domain_id == domain_id)
    ).scalar_one_or_none()


def create(session: Session, name: str, password: str | None = None, *, enabled: bool = True) -> IdentityUser:
    user = IdentityUser(uuid=new_id(), name=name, domain_id=DEFAULT_DOMAIN_ID, enabled=enabled)
    if password is not None:
        set_password(user, password)
    session.add(user)
    session.flush()
    return user


def set_password(user: IdentityUser, password: str) -> None:
    user.password_hash = passwords.hash_password(password)
    user.password_changed_at = utcnow()


def set_enabled(user: IdentityUser, enabled: bool) -> None:
    """Enable or disable; disabling revokes every token the user has now, for good."""
    if user.enabled and not enabled:
        user.tokens_revoked_at = utcnow()
    user.enabled = enabled


# --- the identity API's user operations (admin only: ``novakit.policy``) -------------------


def view(user: IdentityUser) -> dict[str, Any]:
    """Keystone's user, without its password (never shown, not even as a hash)."""
    return {
        "id": user.uuid,
        "name": user.name,
        "domain_id": user.domain_id,
        "enabled": user.enabled,
        "password_expires_at": None,
        "options": {},
    }


def require(session: Session, user_id: str) -> IdentityUser:
    user = get(session, user_id)
    if user is None:
        raise IdentityNotFound(kind="user", id=user_id)
    return user


def _name_free(session: Session, name: str, user: IdentityUser | None = None) -> None:
    other = find(session, name)
    if other is not None and other is not user:
        raise IdentityConflict(kind="user", name=name)


def create_user(db: Database, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
    policy.authorize(ctx, "identity:create_user")
    spec = parse(UserCreate, body).user
    password_hash = passwords.hash_password(spec.password) if spec.password else None  # slow: first

    def write(session: Session) -> dict[str, Any]:
        _name_free(session, spec.name)
        user = create(session, spec.name, enabled=spec.enabled)
        if password_hash is not None:
            user.password_hash, user.password_changed_at = password_hash, utcnow()
        session.flush()
        return view(user)

    try:
        return db.run_in_transaction(write)
    except IntegrityError:  # the same name at the same moment
        raise IdentityConflict(kind="user", name=spec.name) from None


def list_users(
    db: Database, ctx: RequestContext, name: str | None = None, enabled: bool | None = None
) -> list[dict[str, Any]]:
    policy.authorize(ctx, "identity:list_users")
    stmt = select(IdentityUser).where(IdentityUser.domain_id == DEFAULT_DOMAIN_ID)
    if name is not None:
        stmt = stmt.where(IdentityUser.name == name)
    if enabled is not None:
        stmt = stmt.where(IdentityUser.enabled == enabled)
    with db.reader() as session:
        return [view(u) for u in session.execute(stmt.order_by(IdentityUser.name)).scalars()]


def show_user(db: Database, ctx: RequestContext, user_id: str) -> dict[str, Any]:
    policy.authorize(ctx, "identity:get_user")
    with db.reader() as session:
        return view(require(session, user_id))


def update_user(db: Database, ctx: RequestContext, user_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """Rename, enable or disable (its tokens end, for good), set a new password (the tokens
    issued before end)."""
    policy.authorize(ctx, "identity:update_user")
    changes = parse(UserUpdate, body).user
    password_hash = passwords.hash_password(changes.password) if changes.password else None
    if changes.password == "":
        raise exceptions.ValidationError("user.password", "must not be empty")

    def write(session: Session) -> dict[str, Any]:
        user = require(session, user_id)
        if changes.name is not None and changes.name != user.name:
            _name_free(session, changes.name, user)
            user.name = changes.name
        if changes.enabled is not None:
            set_enabled(user, changes.enabled)
        if password_hash is not None:
            user.password_hash, user.password_changed_at = password_hash, utcnow()
        session.flush()
        return view(user)

    try:
        return db.run_in_transaction(write)
    except IntegrityError:
        raise IdentityConflict(kind="user", name=changes.name or "") from None


def delete_user(db: Database, ctx: RequestContext, user_id: str) -> None:
    """The user, its role assignments and application credentials (their tokens end)."""
    policy.authorize(ctx, "identity:delete_user")

    def write(session: Session) -> None:
        session.delete(require(session, user_id))
        session.flush()

    db.run_in_transaction(write)
