"""Image v2 members (Glance's image sharing) under ``/image/v2/images/{id}/members``.

The owner of a ``shared`` image adds a project (``POST``, the membership ``pending``), lists
and removes its members; the member project answers with ``PUT .../members/{its id}``
(``accepted``, ``rejected``, ``pending``) and sees its own membership only. Who may do which is
``novakit.catalog.image_members``'; an image the caller may not see is not found.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from novakit import exceptions
from novakit.catalog import image_members
from novakit.service.auth import Caller, caller
from novakit.service.body import read_json
from novakit.service.images import image_id_of

router = APIRouter(prefix="/image/v2/images/{image_id}/members")


def _time(value: dt.datetime | None) -> str | None:
    return value.replace(tzinfo=None).isoformat(timespec="seconds") + "Z" if value is not None else None


def _member(view: dict[str, Any]) -> dict[str, Any]:
    """Glance's member for the library's view of it."""
    return {
        "image_id": view["image_id"],
        "member_id": view["member_id"],
        "status": view["status"],
        "created_at": _time(view["created_at"]),
        "updated_at": _time(view["updated_at"] or view["created_at"]),
        "schema": "/v2/schemas/member",
    }


def _field(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise exceptions.ValidationError(key, "is required, a string")
    return value


@router.post("")
async def add_member(image_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    member = _field(await read_json(request), "member")
    view = await run_in_threadpool(
        image_members.add_member, _db(request), who.ctx, image_id_of(image_id), member
    )
    return JSONResponse(_member(view))


@router.get("")
async def list_members(image_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    found = await run_in_threadpool(image_members.list_members, _db(request), who.ctx, image_id_of(image_id))
    return JSONResponse({"members": [_member(m) for m in found], "schema": "/v2/schemas/members"})


@router.get("/{member_id}")
async def show_member(
    image_id: str, member_id: str, request: Request, who: Caller = Depends(caller)
) -> JSONResponse:
    db, ident = _db(request), image_id_of(image_id)
    view = await run_in_threadpool(image_members.show_member, db, who.ctx, ident, member_id)
    return JSONResponse(_member(view))


@router.put("/{member_id}")
async def update_member(
    image_id: str, member_id: str, request: Request, who: Caller = Depends(caller)
) -> JSONResponse:
    status = _field(await read_json(request), "status")
    db, ident = _db(request), image_id_of(image_id)
    view = await run_in_threadpool(image_members.set_member_status, db, who.ctx, ident, status, member_id)
    return JSONResponse(_member(view))


@router.delete("/{member_id}", status_code=204)
async def remove_member(
    image_id: str, member_id: str, request: Request, who: Caller = Depends(caller)
) -> Response:
    db, ident = _db(request), image_id_of(image_id)
    await run_in_threadpool(image_members.remove_member, db, who.ctx, ident, member_id)
    return Response(status_code=204)


def _db(request: Request) -> Any:
    return request.app.state.compute.db
