"""Users: find by id or by name in the default domain, create, set a password, enable.

Setting a password records when (``password_changed_at``), and so does disabling a user
(``tokens_revoked_at``): tokens issued before either stop validating (``novakit.identity.tokens``),
at once, because every validation reads the user.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit.db.models import IdentityUser, utcnow
from novakit.identity import DEFAULT_DOMAIN_ID, passwords


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
