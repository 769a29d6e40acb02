"""Authentication: a request's credentials in, a new token out (``POST /v3/auth/tokens``).

Methods: ``password`` (the user by id, or by name in the default domain), ``token`` (a
valid token, to scope it or to get a fresh one; the new token expires with the old one) and
``application_credential`` (by id, or by name and its user, with its secret: the token is
scoped to the credential's project with its roles; asking for a scope as well is refused).
Scope: a project by id, or by name in the default domain, on which the user must have a role;
none (or ``"unscoped"``) gives an unscoped token. Every failure is the same ``Unauthorized``:
the caller never learns whether the user, the password, the project or the role was wrong
(the reason goes to the service's log only, without the credential).
"""

from __future__ import annotations

import logging
from typing import Any

from novakit.compute.schemas import parse
from novakit.db.engine import Database
from novakit.identity import application_credentials, is_default_domain, passwords, projects, tokens, users
from novakit.identity.errors import TokenInvalid, Unauthorized
from novakit.identity.keys import KeyRepository
from novakit.identity.schemas import AuthRequest, ProjectRef, Scope, UserRef
from novakit.identity.settings import IdentitySettings

LOG = logging.getLogger(__name__)


def _refuse(reason: str) -> Unauthorized:
    LOG.info("authentication refused: %s", reason)
    return Unauthorized()


def _password_user(db: Database, ref: UserRef) -> str:
    """The id of the user the password proves, else Unauthorized."""
    with db.reader() as session:
        if ref.id is not None:
            user = users.get(session, ref.id)
        elif ref.domain is not None and is_default_domain(ref.domain.id, ref.domain.name):
            user = users.find(session, ref.name or "")
        else:
            user = None
        hashed = user.password_hash if user is not None else None
        enabled = user is not None and user.enabled
        user_id = user.uuid if user is not None else ""
    # Verified (slow) outside the transaction; an unknown user costs the same time.
    if not passwords.verify(hashed, ref.password):
        raise _refuse("wrong password or unknown user")
    if not enabled:
        raise _refuse(f"user {user_id} is disabled")
    return user_id


def _project_id(db: Database, ref: ProjectRef) -> str:
    with db.reader() as session:
        if ref.id is not None:
            project = projects.get(session, ref.id)
        elif ref.domain is not None and is_default_domain(ref.domain.id, ref.domain.name):
            project = projects.find(session, ref.name or "")
        else:
            project = None
        if project is None:
            raise _refuse("unknown project")
        return project.uuid


def authenticate(
    db: Database, keys: KeyRepository, settings: IdentitySettings, body: dict[str, Any]
) -> tuple[str, tokens.ValidToken]:
    """The new token and what it stands for; ValidationError (400) for a malformed body,
    Unauthorized (401) for anything that does not prove the identity or the scope."""
    req = parse(AuthRequest, body).auth
    identity = req.identity
    parent: tokens.Payload | None = None
    cred_project: str | None = None
    cred_id: str | None = None
    if identity.methods == ["password"] and identity.password is not None:
        user_id = _password_user(db, identity.password.user)
        methods: tuple[str, ...] = ("password",)
    elif identity.methods == ["application_credential"] and identity.application_credential is not None:
        if req.scope is not None:
            raise _refuse("an application credential cannot ask for a scope")
        try:
            proven = application_credentials.authenticate(db, identity.application_credential)
        except application_credentials.CredentialInvalid as exc:
            raise _refuse(exc.reason) from None
        user_id, cred_project, cred_id = proven.user_id, proven.project_id, proven.cred_id
        methods = ("application_credential",)
    elif identity.token is not None:
        try:
            parent = tokens.validate(db, keys, identity.token.id).payload
        except TokenInvalid as exc:
            raise _refuse(f"token method: {exc.reason}") from None
        user_id = parent.user_id
        methods = ("token", *(m for m in parent.methods if m != "token"))
    else:  # the schema lets nothing else through
        raise _refuse("no method")
    project_id = _project_id(db, req.scope.project) if isinstance(req.scope, Scope) else cred_project
    if parent is not None and parent.app_cred_id is not None:
        # A credential's token stays on the credential's project.
        if project_id not in (None, parent.project_id):
            raise _refuse("a token from an application credential cannot be scoped elsewhere")
        project_id = parent.project_id
    token, payload = tokens.issue(
        keys, user_id, project_id, methods, settings.token_expiration, parent=parent, app_cred_id=cred_id
    )
    with db.reader() as session:
        try:
            valid = tokens.check(session, payload)
        except TokenInvalid as exc:
            raise _refuse(exc.reason) from None
    return token, valid
