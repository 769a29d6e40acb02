"""Keystone v3 (a subset) under ``/identity``: the version documents and ``/v3/auth/tokens``.

- ``GET /identity``: the versions (300 Multiple Choices, as Keystone's root answers);
  ``GET /identity/v3``: the v3 version document. keystoneauth's discovery reads them.
- ``POST /identity/v3/auth/tokens``: a token (201, ``X-Subject-Token``, the token body);
- ``GET``/``HEAD /identity/v3/auth/tokens``: validate ``X-Subject-Token`` for the caller of
  ``X-Auth-Token`` (itself, or an admin); an invalid subject token answers 404 (Keystone's
  TokenNotFound), an invalid caller's token 401;
- ``DELETE /identity/v3/auth/tokens``: revoke the subject token (204).

The handlers are thin: the library's ``novakit.identity`` decides, ``novakit.service.errors``
maps its exceptions. Tokens travel in headers only; none is logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from novakit import exceptions, policy
from novakit.db.engine import Database
from novakit.identity import auth, tokens
from novakit.identity.errors import TokenInvalid, TokenNotFound
from novakit.identity.keys import KeyRepository
from novakit.identity.settings import IdentitySettings
from novakit.service.auth import caller as auth_caller
from novakit.service.body import read_json

#: the v3 API's version as Keystone names it (the newest minor version of v3's documents)
API_VERSION = "v3.14"
API_UPDATED = "2020-04-07T00:00:00Z"
MEDIA_TYPES = [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}]

router = APIRouter(prefix="/identity")


@dataclass(frozen=True)
class IdentityService:
    """What the identity handlers use, made once per worker (``novakit.service.app``)."""

    db: Database
    keys: KeyRepository
    settings: IdentitySettings


def _service(request: Request) -> IdentityService:
    service: IdentityService = request.app.state.identity
    return service


def _version(request: Request) -> dict[str, Any]:
    href = f"{str(request.base_url).rstrip('/')}/identity/v3/"
    return {
        "id": API_VERSION,
        "status": "stable",
        "updated": API_UPDATED,
        "links": [{"rel": "self", "href": href}],
        "media-types": MEDIA_TYPES,
    }


@router.get("")
@router.get("/")
async def versions(request: Request) -> JSONResponse:
    return JSONResponse({"versions": {"values": [_version(request)]}}, status_code=300)


@router.get("/v3")
@router.get("/v3/")
async def version_v3(request: Request) -> JSONResponse:
    return JSONResponse({"version": _version(request)})


@router.post("/v3/auth/tokens")
async def issue_token(request: Request) -> JSONResponse:
    service = _service(request)
    body = await read_json(request)
    token, valid = await run_in_threadpool(
        auth.authenticate, service.db, service.keys, service.settings, body
    )
    catalog = (
        None
        if "nocatalog" in request.query_params
        else await run_in_threadpool(tokens.catalog_for, service.db, valid)
    )
    return JSONResponse(tokens.view(valid, catalog), status_code=201, headers={"X-Subject-Token": token})


async def _caller_and_subject(request: Request) -> tuple[tokens.ValidToken, tokens.ValidToken, str]:
    """The caller's token (401 unless valid), then the subject token (404 unless valid), which
    the caller may ask about if it is its own user's or the caller is an admin (else 403)."""
    service = _service(request)
    asking = await auth_caller(request)
    subject_token = request.headers.get("x-subject-token")
    if not subject_token:
        raise exceptions.ValidationError("X-Subject-Token", "is required: the token to validate")
    try:
        subject = await run_in_threadpool(tokens.validate, service.db, service.keys, subject_token)
    except TokenInvalid:
        raise TokenNotFound() from None
    if subject.user.uuid != asking.token.user.uuid:
        policy.authorize(asking.ctx, "identity:token_of_another_user")
    return asking.token, subject, subject_token


@router.get("/v3/auth/tokens")
async def validate_token(request: Request) -> JSONResponse:
    _, subject, subject_token = await _caller_and_subject(request)
    catalog = (
        None
        if "nocatalog" in request.query_params
        else await run_in_threadpool(tokens.catalog_for, _service(request).db, subject)
    )
    return JSONResponse(tokens.view(subject, catalog), headers={"X-Subject-Token": subject_token})


@router.head("/v3/auth/tokens")
async def check_token(request: Request) -> Response:
    _, _, subject_token = await _caller_and_subject(request)
    return Response(status_code=200, headers={"X-Subject-Token": subject_token})


@router.delete("/v3/auth/tokens")
async def revoke_token(request: Request) -> Response:
    _, subject, _ = await _caller_and_subject(request)
    await run_in_threadpool(tokens.revoke, _service(request).db, subject)
    return Response(status_code=204)
