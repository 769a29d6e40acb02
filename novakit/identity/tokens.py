"""Fernet tokens: what a token carries, how it is sealed, and when it is still good.

A token is its payload, compact JSON encrypted and signed with the key repository's primary
key (``novakit.identity.keys``), in URL-safe base64 without padding, as Keystone's Fernet
tokens are. Nothing about a token is stored when it is issued. The payload holds:

- the user's id, the project's id (None: unscoped), the authentication methods;
- issued at (microseconds, so that a password set in the same second is told apart) and
  expires at (default an hour later: ``IdentitySettings.token_expiration``);
- the audit ids: the token's own, and for a token made from another (the ``token``
  method) the first one's too, its chain; revoking a token revokes its chain's children.

``validate`` refuses (``TokenInvalid``): a token that does not decrypt with any key (tampered,
or sealed with a key since rotated away), an expired one, a revoked one (an audit id of its
chain in ``identity_revoked_tokens``), one whose user is gone or disabled, or whose password
changed or who was disabled after it was issued, and a project-scoped one whose project is gone or disabled or
whose user has no role on it any more. The roles are read now, not from the token. A token
issued from an application credential carries the credential's id: it is refused once the
credential is deleted or expired or its user no longer holds one of its roles, and carries
the credential's roles only.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from cryptography.fernet import InvalidToken
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit.db.engine import Database
from novakit.db.models import (
    IdentityApplicationCredential,
    IdentityProject,
    IdentityRevokedToken,
    IdentityRole,
    IdentityUser,
    utcnow,
)
from novakit.identity import (
    application_credentials,
    assignments,
    catalog,
    domain_view,
    projects,
    revision,
    users,
)
from novakit.identity.errors import TokenInvalid
from novakit.identity.keys import KeyRepository
from novakit.identity.schemas import MAX_TOKEN_LENGTH

#: the methods a token can name, by their bit in the payload
METHODS = ("password", "token", "application_credential")
#: the payload's format; a token of another format does not validate
PAYLOAD_VERSION = 1


@dataclass(frozen=True)
class Payload:
    user_id: str
    project_id: str | None
    methods: tuple[str, ...]
    issued_at: dt.datetime
    expires_at: dt.datetime
    audit_ids: tuple[str, ...]
    #: the application credential the token was issued from (the ``application_credential``
    #: method, or a token made from such a token), else None
    app_cred_id: str | None = None


@dataclass(frozen=True)
class ValidToken:
    """A token that validated, with what it stands for now."""

    payload: Payload
    user: IdentityUser
    project: IdentityProject | None = None
    roles: list[IdentityRole] = field(default_factory=list)
    application_credential: IdentityApplicationCredential | None = None

    @property
    def role_names(self) -> list[str]:
        return [r.name for r in self.roles]


def new_audit_id() -> str:
    return base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")


def _micros(when: dt.datetime) -> int:
    return int(when.replace(tzinfo=dt.UTC).timestamp()) * 1_000_000 + when.microsecond


def _from_micros(value: int) -> dt.datetime:
    seconds, micros = divmod(value, 1_000_000)
    return dt.datetime.fromtimestamp(seconds, dt.UTC).replace(tzinfo=None, microsecond=micros)


def seal(keys: KeyRepository, payload: Payload) -> str:
    mask = sum(1 << METHODS.index(m) for m in payload.methods)
    body = [
        PAYLOAD_VERSION,
        payload.user_id,
        payload.project_id,
        mask,
        _micros(payload.issued_at),
        _micros(payload.expires_at),
        list(payload.audit_ids),
    ]
    if payload.app_cred_id is not None:
        body.append(payload.app_cred_id)
    data = json.dumps(body, separators=(",", ":")).encode()
    sealed = keys.fernet().encrypt_at_time(data, int(payload.issued_at.replace(tzinfo=dt.UTC).timestamp()))
    return sealed.decode().rstrip("=")


def unseal(keys: KeyRepository, token: str) -> Payload:
    """The payload of a token sealed with any of the repository's keys; TokenInvalid otherwise."""
    if not token or len(token) > MAX_TOKEN_LENGTH or not token.isascii():
        raise TokenInvalid("malformed")
    padded = token + "=" * (-len(token) % 4)
    try:
        body = json.loads(keys.fernet().decrypt(padded.encode()))
        version, user_id, project_id, mask, issued, expires, audit_ids, *rest = body
        if version != PAYLOAD_VERSION or len(rest) > 1:
            raise ValueError("payload version")
        methods = tuple(m for i, m in enumerate(METHODS) if mask & (1 << i))
        return Payload(
            str(user_id),
            None if project_id is None else str(project_id),
            methods,
            _from_micros(int(issued)),
            _from_micros(int(expires)),
            tuple(str(a) for a in audit_ids),
            str(rest[0]) if rest else None,
        )
    except InvalidToken:
        raise TokenInvalid("does not decrypt with any key") from None
    except (ValueError, TypeError):
        raise TokenInvalid("malformed payload") from None


def issue(
    keys: KeyRepository,
    user_id: str,
    project_id: str | None,
    methods: tuple[str, ...],
    lifetime: int,
    *,
    parent: Payload | None = None,
    app_cred_id: str | None = None,
) -> tuple[str, Payload]:
    """A new token; made from ``parent`` (the token method), it expires when the parent does and
    carries the parent's audit id after its own, and the parent's application credential."""
    now = utcnow()
    audit_ids: tuple[str, ...]
    if parent is None:
        expires, audit_ids = now + dt.timedelta(seconds=lifetime), (new_audit_id(),)
    else:
        expires, audit_ids = parent.expires_at, (new_audit_id(), parent.audit_ids[-1])
    if parent is not None and parent.app_cred_id is not None:
        app_cred_id = parent.app_cred_id
    payload = Payload(user_id, project_id, methods, now, expires, audit_ids, app_cred_id)
    return seal(keys, payload), payload


def check(session: Session, payload: Payload) -> ValidToken:
    """Whether the payload still stands, read from the database now (the module docstring)."""
    if utcnow() >= payload.expires_at:
        raise TokenInvalid("expired")
    revoked = session.execute(
        select(IdentityRevokedToken.audit_id).where(IdentityRevokedToken.audit_id.in_(payload.audit_ids))
    ).first()
    if revoked is not None:
        raise TokenInvalid("revoked")
    user = users.get(session, payload.user_id)
    if user is None or not user.enabled:
        raise TokenInvalid("user missing or disabled")
    if user.password_changed_at is not None and payload.issued_at < user.password_changed_at:
        raise TokenInvalid("issued before the user's password changed")
    if user.tokens_revoked_at is not None and payload.issued_at < user.tokens_revoked_at:
        raise TokenInvalid("issued before the user was disabled")
    if payload.project_id is None:
        return ValidToken(payload, user)
    project = projects.get(session, payload.project_id)
    if project is None or not project.enabled:
        raise TokenInvalid("project missing or disabled")
    roles = assignments.roles_on(session, user, project)
    if not roles:
        raise TokenInvalid("no role on the project any more")
    if payload.app_cred_id is None:
        return ValidToken(payload, user, project, roles)
    try:
        cred, carried = application_credentials.check(session, payload.app_cred_id, user, project, roles)
    except application_credentials.CredentialInvalid as exc:
        raise TokenInvalid(exc.reason) from None
    return ValidToken(payload, user, project, carried, cred)


@dataclass(frozen=True)
class _Kept:
    valid: ValidToken
    revision: int
    until: dt.datetime


class TokenCache:
    """The tokens one process validated, each with the identity revision it was validated at
    (``novakit.identity.revision``) and the moment it expires (the token's, or its application
    credential's if sooner). A kept token is good while the revision has not moved and that
    moment has not come; any change to the identity tables makes every kept token be checked
    again in full. At most ``size`` tokens, the least recently used dropped first."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str, revision: int, now: dt.datetime) -> ValidToken | None:
        with self._lock:
            kept = self._kept.get(token)
            if kept is None:
                return None
            if kept.revision != revision or now >= kept.until:
                del self._kept[token]
                return None
            self._kept.move_to_end(token)
            return kept.valid

    def put(self, token: str, valid: ValidToken, revision: int) -> None:
        until = valid.payload.expires_at
        cred = valid.application_credential
        if cred is not None and cred.expires_at is not None:
            until = min(until, cred.expires_at)
        with self._lock:
            self._kept[token] = _Kept(valid, revision, until)
            self._kept.move_to_end(token)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)


def validate(db: Database, keys: KeyRepository, token: str, cache: TokenCache | None = None) -> ValidToken:
    """The token's standing now (``check``). With a ``cache``, a token this process validated
    since the identity tables last changed is taken as it was then, after one read of the
    revision; it is still decrypted (a key rotated away refuses it) and its expiry still read."""
    payload = unseal(keys, token)
    now = utcnow()
    if now >= payload.expires_at:
        raise TokenInvalid("expired")
    with db.reader() as session:
        if cache is None:
            return check(session, payload)
        rev = revision.current(session)
        if rev is not None and (kept := cache.get(token, rev, now)) is not None:
            return kept
        valid = check(session, payload)
    if rev is not None:
        cache.put(token, valid, rev)
    return valid


def revoke(db: Database, token: ValidToken) -> None:
    """Revoke the token (and every token made from it) by its own audit id; idempotent."""
    audit_id = token.payload.audit_ids[0]

    def write(session: Session) -> None:
        if session.get(IdentityRevokedToken, audit_id) is None:
            session.add(IdentityRevokedToken(audit_id=audit_id, expires_at=token.payload.expires_at))
            session.flush()

    # Revoked at the same moment by another request: the same end.
    with contextlib.suppress(IntegrityError):
        db.run_in_transaction(write)


def isotime(when: dt.datetime) -> str:
    """Keystone's timestamps: ``2026-12-04T14:00:00.000000Z``."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def view(token: ValidToken, catalog_entries: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The token body Keystone answers with (``{"token": {...}}``); ``catalog_entries`` None
    leaves the catalog out (``?nocatalog``), as it is for an unscoped token."""
    body: dict[str, Any] = {
        "methods": list(token.payload.methods),
        "user": {
            "domain": domain_view(),
            "id": token.user.uuid,
            "name": token.user.name,
            "password_expires_at": None,
        },
        "audit_ids": list(token.payload.audit_ids),
        "expires_at": isotime(token.payload.expires_at),
        "issued_at": isotime(token.payload.issued_at),
    }
    if token.project is not None:
        body["project"] = {"domain": domain_view(), "id": token.project.uuid, "name": token.project.name}
        body["is_domain"] = False
        body["roles"] = [{"id": r.uuid, "name": r.name} for r in token.roles]
        if catalog_entries is not None:
            body["catalog"] = catalog_entries
    cred = token.application_credential
    if cred is not None:
        restricted = not cred.unrestricted
        body["application_credential"] = {"id": cred.uuid, "name": cred.name, "restricted": restricted}
    return {"token": body}


def catalog_for(db: Database, token: ValidToken) -> list[dict[str, Any]] | None:
    if token.project is None:
        return None
    with db.reader() as session:
        return catalog.view(session)
