"""Keystone v3 (a subset) under ``/identity``: the version documents and ``/v3/auth/tokens``.

- ``GET /identity``: the versions (300 Multiple Choices, as Keystone's root answers);
  ``GET /identity/v3``: the v3 version document. keystoneauth's discovery reads them.
- ``POST /identity/v3/auth/tokens``: a token (201, ``X-Subject-Token``, the token body);
- ``GET``/``HEAD /identity/v3/auth/tokens``: validate ``X-Subject-Token`` for the caller of
  ``X-Auth-Token`` (itself, or an admin); an invalid subject token answers 404 (Keystone's
  TokenNotFound), an invalid caller's token 401;
- ``DELETE /identity/v3/auth/tokens``: revoke the subject token (204);
- ``/v3/users``, ``/v3/projects``, ``/v3/roles``, ``/v3/projects/{p}/users/{u}/roles/{r}``,
  ``/v3/role_assignments``: the CRUD ``openstack user/project/role`` use (an admin's);
- ``/v3/users/{user_id}/application_credentials``: a user's application credentials (its own;
  an admin's any), the secret shown in the create answer only.

The handlers are thin: the library's ``novakit.identity`` decides, ``novakit.service.errors``
maps its exceptions. Tokens travel in headers only; none is logged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from novakit import exceptions, policy
from novakit.db.engine import Database
from novakit.identity import application_credentials, assignments, auth, projects, roles, tokens, users
from novakit.identity.errors import TokenInvalid, TokenNotFound
from novakit.identity.keys import KeyRepository
from novakit.identity.settings import IdentitySettings
from novakit.service.auth import Caller
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
    #: the tokens this worker validated, checked again once the identity tables change
    token_cache: tokens.TokenCache = field(default_factory=tokens.TokenCache)


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
        subject = await run_in_threadpool(
            tokens.validate, service.db, service.keys, subject_token, service.token_cache
        )
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


# --- the identity CRUD ------------------------------------------------------------------------


def _flag(value: str | None) -> bool | None:
    """A boolean query filter, as Keystone reads one: absent None, ``0``/``false`` False, else True."""
    if value is None:
        return None
    return value.lower() not in ("0", "false", "no")


def _base(request: Request) -> str:
    return f"{str(request.base_url).rstrip('/')}/identity/v3"


def _linked(request: Request, path: str, body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "links": {"self": f"{_base(request)}/{path}/{body['id']}"}}


def _listing(request: Request, key: str, path: str, items: list[dict[str, Any]]) -> JSONResponse:
    links = {"self": str(request.url), "previous": None, "next": None}
    return JSONResponse({key: [_linked(request, path, i) for i in items], "links": links})


def _one(request: Request, key: str, path: str, item: dict[str, Any], status: int = 200) -> JSONResponse:
    return JSONResponse({key: _linked(request, path, item)}, status_code=status)


@router.post("/v3/users")
async def create_user(request: Request, who: Caller = Depends(auth_caller)) -> JSONResponse:
    body = await read_json(request)
    user = await run_in_threadpool(users.create_user, _service(request).db, who.ctx, body)
    return _one(request, "user", "users", user, 201)


@router.get("/v3/users")
async def list_users(request: Request, who: Caller = Depends(auth_caller)) -> JSONResponse:
    query = request.query_params
    found = await run_in_threadpool(
        users.list_users, _service(request).db, who.ctx, query.get("name"), _flag(query.get("enabled"))
    )
    return _listing(request, "users", "users", found)


@router.get("/v3/users/{user_id}")
async def show_user(request: Request, user_id: str, who: Caller = Depends(auth_caller)) -> JSONResponse:
    user = await run_in_threadpool(users.show_user, _service(request).db, who.ctx, user_id)
    return _one(request, "user", "users", user)


@router.patch("/v3/users/{user_id}")
async def update_user(request: Request, user_id: str, who: Caller = Depends(auth_caller)) -> JSONResponse:
    body = await read_json(request)
    user = await run_in_threadpool(users.update_user, _service(request).db, who.ctx, user_id, body)
    return _one(request, "user", "users", user)


@router.delete("/v3/users/{user_id}")
async def delete_user(request: Request, user_id: str, who: Caller = Depends(auth_caller)) -> Response:
    await run_in_threadpool(users.delete_user, _service(request).db, who.ctx, user_id)
    return Response(status_code=204)


@router.post("/v3/projects")
async def create_project(request: Request, who: Caller = Depends(auth_caller)) -> JSONResponse:
    body = await read_json(request)
    project = await run_in_threadpool(projects.create_project, _service(request).db, who.ctx, body)
    return _one(request, "project", "projects", project, 201)


@router.get("/v3/projects")
async def list_projects(request: Request, who: Caller = Depends(auth_caller)) -> JSONResponse:
    query = request.query_params
    found = await run_in_threadpool(
        projects.list_projects, _service(request).db, who.ctx, query.get("name"), _flag(query.get("enabled"))
    )
    return _listing(request, "projects", "projects", found)


@router.get("/v3/projects/{project_id}")
async def show_project(request: Request, project_id: str, who: Caller = Depends(auth_caller)) -> JSONResponse:
    project = await run_in_threadpool(projects.show_project, _service(request).db, who.ctx, project_id)
    return _one(request, "project", "projects", project)


@router.delete("/v3/projects/{project_id}")
async def delete_project(request: Request, project_id: str, who: Caller = Depends(auth_caller)) -> Response:
    await run_in_threadpool(projects.delete_project, _service(request).db, who.ctx, project_id)
    return Response(status_code=204)


@router.get("/v3/roles")
async def list_roles(request: Request, who: Caller = Depends(auth_caller)) -> JSONResponse:
    found = await run_in_threadpool(
        roles.list_roles, _service(request).db, who.ctx, request.query_params.get("name")
    )
    return _listing(request, "roles", "roles", found)


@router.get("/v3/roles/{role_id}")
async def show_role(request: Request, role_id: str, who: Caller = Depends(auth_caller)) -> JSONResponse:
    role = await run_in_threadpool(roles.show_role, _service(request).db, who.ctx, role_id)
    return _one(request, "role", "roles", role)


GRANT = "/v3/projects/{project_id}/users/{user_id}/roles/{role_id}"


@router.put(GRANT)
async def grant_role(
    request: Request, project_id: str, user_id: str, role_id: str, who: Caller = Depends(auth_caller)
) -> Response:
    db = _service(request).db
    await run_in_threadpool(assignments.grant_role, db, who.ctx, project_id, user_id, role_id)
    return Response(status_code=204)


@router.api_route(GRANT, methods=["GET", "HEAD"])
async def check_role(
    request: Request, project_id: str, user_id: str, role_id: str, who: Caller = Depends(auth_caller)
) -> Response:
    db = _service(request).db
    await run_in_threadpool(assignments.check_role, db, who.ctx, project_id, user_id, role_id)
    return Response(status_code=204)


@router.delete(GRANT)
async def revoke_role(
    request: Request, project_id: str, user_id: str, role_id: str, who: Caller = Depends(auth_caller)
) -> Response:
    db = _service(request).db
    await run_in_threadpool(assignments.revoke_role, db, who.ctx, project_id, user_id, role_id)
    return Response(status_code=204)


@router.get("/v3/role_assignments")
async def list_role_assignments(request: Request, who: Caller = Depends(auth_caller)) -> JSONResponse:
    query = request.query_params
    found = await run_in_threadpool(
        lambda: assignments.list_assignments(
            _service(request).db,
            who.ctx,
            user_id=query.get("user.id"),
            project_id=query.get("scope.project.id"),
            role_id=query.get("role.id"),
            include_names=bool(_flag(query.get("include_names"))),
        )
    )
    base = _base(request)
    for item in found:
        ids = (item["scope"]["project"]["id"], item["user"]["id"], item["role"]["id"])
        item["links"] = {"assignment": "{}/projects/{}/users/{}/roles/{}".format(base, *ids)}
    links = {"self": str(request.url), "previous": None, "next": None}
    return JSONResponse({"role_assignments": found, "links": links})


# --- application credentials ------------------------------------------------------------------

CREDENTIALS = "/v3/users/{user_id}/application_credentials"


@router.post(CREDENTIALS)
async def create_application_credential(
    request: Request, user_id: str, who: Caller = Depends(auth_caller)
) -> JSONResponse:
    body = await read_json(request)
    db = _service(request).db
    made = await run_in_threadpool(application_credentials.create, db, who.token, user_id, body)
    return _one(request, "application_credential", f"users/{user_id}/application_credentials", made, 201)


@router.get(CREDENTIALS)
async def list_application_credentials(
    request: Request, user_id: str, who: Caller = Depends(auth_caller)
) -> JSONResponse:
    name = request.query_params.get("name")
    db = _service(request).db
    found = await run_in_threadpool(application_credentials.list_for, db, who.ctx, user_id, name)
    return _listing(request, "application_credentials", f"users/{user_id}/application_credentials", found)


@router.get(CREDENTIALS + "/{cred_id}")
async def show_application_credential(
    request: Request, user_id: str, cred_id: str, who: Caller = Depends(auth_caller)
) -> JSONResponse:
    db = _service(request).db
    found = await run_in_threadpool(application_credentials.show, db, who.ctx, user_id, cred_id)
    return _one(request, "application_credential", f"users/{user_id}/application_credentials", found)


@router.delete(CREDENTIALS + "/{cred_id}")
async def delete_application_credential(
    request: Request, user_id: str, cred_id: str, who: Caller = Depends(auth_caller)
) -> Response:
    db = _service(request).db
    await run_in_threadpool(application_credentials.remove, db, who.ctx, who.token, user_id, cred_id)
    return Response(status_code=204)
