"""Who is asking the service: the request's ``X-Auth-Token``, validated, as the library's caller.

Every router takes its caller from here (``caller``), so that a token is checked one way: no
token, or one that does not validate (expired, revoked, tampered, of a key rotated away, its user
disabled or its role gone), answers 401 before anything is read. What the caller may do is then
the library's decision (``novakit.policy``, the same table the CLI and the modules apply to the
operator's identity): a handler never reads the roles itself.

The caller is a ``RequestContext`` of the token's user and project ids (Keystone's ids, as
OpenStack clients send and expect them), its role names on that project, and the request's id
(``x-openstack-request-id``, the audit trail's request id). An unscoped token has no project: its
context's project id is empty, which no project's resource matches.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from novakit.context import RequestContext
from novakit.identity import tokens
from novakit.identity.errors import TokenInvalid, Unauthorized

AUTH_HEADER = "x-auth-token"


@dataclass(frozen=True)
class Caller:
    """A request's validated token and the context the library is called with."""

    token: tokens.ValidToken
    ctx: RequestContext


def context_of(valid: tokens.ValidToken, request_id: str) -> RequestContext:
    """The library's caller for a validated token."""
    return RequestContext(
        project_id=valid.project.uuid if valid.project is not None else "",
        user_id=valid.user.uuid,
        roles=valid.role_names,
        request_id=request_id,
    )


async def caller(request: Request) -> Caller:
    """The request's caller; 401 (``Unauthorized``) without a token or with one that does not
    validate. The token is read from its header only and never logged."""
    token = request.headers.get(AUTH_HEADER)
    if not token:
        raise Unauthorized()
    identity = request.app.state.identity
    try:
        valid = await run_in_threadpool(
            tokens.validate, identity.db, identity.keys, token, identity.token_cache
        )
    except TokenInvalid:
        raise Unauthorized() from None
    return Caller(valid, context_of(valid, request.state.request_id))
