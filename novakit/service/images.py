"""Image v2 (Glance's API) under ``/image``: images, their data, tags and actions.

``openstack server create --image NAME`` and openstacksdk's ``find_image`` ask the Image API,
not Compute, for the image (Compute's own image proxy went in 2.36): ``GET /image`` (the
versions), ``GET /image/v2/images`` (a listing: ``name``, ``visibility``, ``status``,
``limit``, ``marker``, the next page in ``next``) and ``GET /image/v2/images/{id}``. The writes
are Glance's: ``POST /v2/images`` (a queued image), ``PUT``/``GET .../file`` (the data, streamed
into and out of the image store: ``novakit.catalog.image_data``), ``PATCH`` (a JSON patch),
``DELETE``, tags, and an admin's ``actions/deactivate`` and ``actions/reactivate``. Members
are ``novakit.service.image_members``'. Who sees and changes what is the library's
(``novakit.catalog.images``): another project's private image is not found.

The view is Glance's: the image's own keys, its properties as keys of their own (Glance keeps no
``properties`` object), ``checksum`` (MD5) and ``os_hash_algo``/``os_hash_value`` (SHA-512 of
an upload; the SHA-256 novakit records of an image registered by location), and never where
the compute hosts read the file.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.from_thread
from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from novakit import exceptions
from novakit.catalog import image_data, images
from novakit.service import paging
from novakit.service.auth import Caller, caller
from novakit.service.body import read_any_json, read_json
from novakit.service.errors import UnsupportedMediaType

router = APIRouter(prefix="/image")

#: what Glance's listing takes that novakit answers; another parameter is refused (400) rather
#: than ignored (a listing that leaves out a filter given answers another question)
FILTERS = ("name", "visibility", "status", "os_hidden", "limit", "marker")
#: the media types of a PATCH body (Glance's JSON patch) and of an upload
PATCH_TYPES = ("application/openstack-images-v2.1-json-patch", "application/openstack-images-v2.0-json-patch")
DATA_TYPE = "application/octet-stream"
#: chunks of an upload's body read ahead of its writes: a bound on what it holds in memory
#: (uvicorn, on uvloop, hands over up to 250 KB at once: 8 MB here)
READ_AHEAD = 32
#: the view's own keys; a property of the same name is not shown over them
_OWN = {
    "id",
    "name",
    "status",
    "visibility",
    "owner",
    "size",
    "min_disk",
    "min_ram",
    "disk_format",
    "container_format",
    "checksum",
    "os_hash_algo",
    "os_hash_value",
    "created_at",
    "updated_at",
    "protected",
    "os_hidden",
    "tags",
    "self",
    "file",
    "schema",
    "virtual_size",
}


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/") + "/image"


def _time(value: dt.datetime | None) -> str | None:
    return value.replace(tzinfo=None).isoformat(timespec="seconds") + "Z" if value is not None else None


def _hash(view: dict[str, Any]) -> tuple[str | None, str | None]:
    """Glance's ``os_hash_algo``/``os_hash_value``: the SHA-512 of an upload, else the SHA-256
    novakit records of an image registered at a location."""
    if view.get("sha512"):
        return "sha512", view["sha512"]
    return ("sha256", view["checksum"]) if view.get("checksum") else (None, None)


def _image(view: dict[str, Any]) -> dict[str, Any]:
    """Glance's image for the library's view of it."""
    ident = view["id"]
    out: dict[str, Any] = {
        k: v for k, v in (view.get("properties") or {}).items() if k not in _OWN and isinstance(k, str)
    }
    algo, value = _hash(view)
    out.update(
        {
            "id": ident,
            "name": view["name"] or None,
            "status": view["status"],
            "visibility": view["visibility"],
            "owner": view["owner"],
            "size": view["size"] if view["status"] in ("active", "deactivated") else None,
            "virtual_size": None,
            "min_disk": view["min_disk"],
            "min_ram": view["min_ram"],
            "disk_format": view["disk_format"] or None,
            "container_format": view["container_format"] or None,
            "checksum": view.get("md5"),
            "os_hash_algo": algo,
            "os_hash_value": value,
            "protected": bool(view.get("protected")),
            "os_hidden": False,
            "tags": list(view.get("tags") or []),
            "created_at": _time(view.get("created_at")),
            "updated_at": _time(view.get("updated_at") or view.get("created_at")),
            "self": f"/v2/images/{ident}",
            "file": f"/v2/images/{ident}/file",
            "schema": "/v2/schemas/image",
        }
    )
    return out


def image_id_of(image_id: str) -> str:
    """``image_id`` when it is a UUID: Glance finds an image by its id only (a name is no
    image's id: not found)."""
    try:
        uuidlib.UUID(image_id)
    except ValueError:
        raise exceptions.ImageNotFound(image_id=image_id) from None
    return image_id


def _media_type(request: Request, *expected: str) -> None:
    given = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if given not in expected:
        raise UnsupportedMediaType(expected=" or ".join(expected))


def _flag(name: str, given: str) -> bool:
    if given.lower() not in ("true", "false"):
        raise exceptions.ValidationError(name, "must be true or false")
    return given.lower() == "true"


@router.get("")
@router.get("/")
async def versions(request: Request) -> JSONResponse:
    link = [{"rel": "self", "href": f"{_base(request)}/v2/"}]
    return JSONResponse(
        {
            "versions": [
                {"id": "v2.9", "status": "CURRENT", "links": link},
                *({"id": f"v2.{n}", "status": "SUPPORTED", "links": link} for n in range(8, -1, -1)),
            ]
        },
        status_code=300,
    )


@router.get("/v2/images")
def list_images(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    params = request.query_params
    unknown = sorted(set(params) - set(FILTERS))
    if unknown:
        raise exceptions.ValidationError(unknown[0], "is not a filter of the image listing")
    listed = images.list_images(
        _db(request),
        who.ctx,
        visibility=params.get("visibility"),
        name=params.get("name"),
        status=params.get("status"),
        hidden=_flag("os_hidden", params.get("os_hidden", "false")),
    )
    found, following = paging.page(request, listed)
    body: dict[str, Any] = {
        "images": [_image(i) for i in found],
        "first": "/v2/images",
        "schema": "/v2/schemas/images",
    }
    if following is not None:
        body["next"] = f"/v2/images?{following}"
    return JSONResponse(body)


@router.post("/v2/images")
async def create_image(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    data = await read_json(request)
    view = await run_in_threadpool(images.create_queued, _db(request), who.ctx, data)
    shown = _image(view)
    return JSONResponse(shown, status_code=201, headers={"Location": f"{_base(request)}{shown['self']}"})


@router.get("/v2/images/{image_id}")
async def show_image(image_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    view = await run_in_threadpool(images.show, _db(request), who.ctx, image_id_of(image_id))
    return JSONResponse(_image(view))


@router.patch("/v2/images/{image_id}")
async def update_image(image_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    _media_type(request, *PATCH_TYPES)
    changes = await read_any_json(request)
    view = await run_in_threadpool(images.update, _db(request), who.ctx, image_id_of(image_id), changes)
    return JSONResponse(_image(view))


@router.delete("/v2/images/{image_id}", status_code=204)
async def delete_image(image_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    await run_in_threadpool(image_data.delete, _db(request), who.ctx, image_id_of(image_id), _store(request))
    return Response(status_code=204)


@router.put("/v2/images/{image_id}/file", status_code=204)
async def upload_data(image_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    """The body, chunk by chunk as it arrives, into the library's upload in a worker thread:
    never the whole body in memory (``_Body``)."""
    _media_type(request, DATA_TYPE)
    db, ident = _db(request), image_id_of(image_id)
    body = _Body(request)
    try:
        await run_in_threadpool(image_data.upload, db, who.ctx, ident, body.chunks(), _store(request))
    finally:
        await body.close()
    return Response(status_code=204)


class _Body:
    """A request's body read by a task of the event loop, up to ``READ_AHEAD`` chunks ahead of
    the worker thread that writes them; the worker takes every chunk read by then at once.
    Handing over each chunk on its own (a call into the loop per chunk of uvicorn's) cost more
    than the writes."""

    def __init__(self, request: Request) -> None:
        self._chunks: asyncio.Queue[bytes | Exception | None] = asyncio.Queue(READ_AHEAD)
        self._reading = asyncio.get_running_loop().create_task(self._read(request))
        self._ended = False

    async def _read(self, request: Request) -> None:
        try:
            async for chunk in request.stream():
                if chunk:
                    await self._chunks.put(chunk)
        except Exception as error:  # the client went away: the upload fails with it
            await self._chunks.put(error)
        else:
            await self._chunks.put(None)

    async def _take(self) -> list[bytes]:
        """The chunks read by now (waiting for one); none at the body's end."""
        if self._ended:
            return []
        taken = [await self._chunks.get()]
        while not self._chunks.empty():
            taken.append(self._chunks.get_nowait())
        last = taken[-1]  # an end or an error comes last: nothing is read after it
        if isinstance(last, Exception):
            raise last
        if last is None:
            self._ended = True
            taken.pop()
        return [chunk for chunk in taken if isinstance(chunk, bytes)]

    def chunks(self) -> Iterator[bytes]:
        """The body's chunks, for a worker thread."""
        while taken := anyio.from_thread.run(self._take):
            yield from taken

    async def close(self) -> None:
        """Stop reading (an upload refused or failed before the body's end)."""
        self._reading.cancel()
        await asyncio.wait([self._reading])


@router.get("/v2/images/{image_id}/file", response_model=None)
async def download_data(image_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    db, ident = _db(request), image_id_of(image_id)
    view, path = await run_in_threadpool(image_data.data, db, who.ctx, ident, _store(request))
    if path is None:
        return Response(status_code=204)
    headers = {"Content-MD5": view["md5"]} if view.get("md5") else None
    return FileResponse(path, media_type=DATA_TYPE, headers=headers)


@router.put("/v2/images/{image_id}/tags/{tag}", status_code=204)
async def add_tag(image_id: str, tag: str, request: Request, who: Caller = Depends(caller)) -> Response:
    await run_in_threadpool(images.set_tag, _db(request), who.ctx, image_id_of(image_id), tag, True)
    return Response(status_code=204)


@router.delete("/v2/images/{image_id}/tags/{tag}", status_code=204)
async def remove_tag(image_id: str, tag: str, request: Request, who: Caller = Depends(caller)) -> Response:
    await run_in_threadpool(images.set_tag, _db(request), who.ctx, image_id_of(image_id), tag, False)
    return Response(status_code=204)


@router.post("/v2/images/{image_id}/actions/deactivate", status_code=204)
async def deactivate(image_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    await run_in_threadpool(images.set_active, _db(request), who.ctx, image_id_of(image_id), False)
    return Response(status_code=204)


@router.post("/v2/images/{image_id}/actions/reactivate", status_code=204)
async def reactivate(image_id: str, request: Request, who: Caller = Depends(caller)) -> Response:
    await run_in_threadpool(images.set_active, _db(request), who.ctx, image_id_of(image_id), True)
    return Response(status_code=204)


def _db(request: Request) -> Any:
    return request.app.state.compute.db


def _store(request: Request) -> Path:
    return image_data.store_of(request.app.state.compute.conf)
