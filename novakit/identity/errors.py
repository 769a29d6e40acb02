"""The errors of the identity service, on ``novakit.exceptions``' base class.

Kept beside the identity package until the service's routers all land (then they join
``novakit.exceptions``' hierarchy)::

    NovakitError
    ├── Unauthorized (401) ...... no credential, or one that does not prove anything: a wrong
    │   │                         password, an unknown user, a bad token. Never says which.
    │   └── TokenInvalid ........ a token that does not validate (expired, undecryptable,
    │                             revoked, its user disabled or its password changed since,
    │                             its project's roles gone); ``reason`` is for the log only
    ├── TokenNotFound (404) ..... the token a validation asks about (X-Subject-Token) is not
    │                             valid: Keystone's answer to GET/HEAD/DELETE /v3/auth/tokens
    ├── IdentityNotFound (404) .. no user, project, role, assignment or application credential
    │                             of that id (Keystone's "Could not find ...")
    ├── IdentityConflict (409) .. a name taken already (a user's, a project's, a credential's)
    └── KeyRepositoryError (500)  the Fernet key repository is missing or unreadable
"""

from __future__ import annotations

from novakit import exceptions


class Unauthorized(exceptions.NovakitError):
    msg_fmt = "The request you have made requires authentication."
    code = 401


class TokenInvalid(Unauthorized):
    """``reason`` says why, for the service's log; it never names the token itself."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__()


class TokenNotFound(exceptions.NotFound):
    msg_fmt = "Failed to validate token"


class KeyRepositoryError(exceptions.NovakitError):
    msg_fmt = "Fernet key repository %(path)s: %(reason)s"


class IdentityNotFound(exceptions.NotFound):
    msg_fmt = "Could not find %(kind)s: %(id)s."


class IdentityConflict(exceptions.Conflict):
    msg_fmt = "Conflict occurred attempting to store %(kind)s - Duplicate entry found with name %(name)s."
