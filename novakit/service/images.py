"""Image v2 (Glance's API), the read side, under ``/image``: what the clients look images up with.

``openstack server create --image NAME`` and openstacksdk's ``find_image`` ask the Image API,
not Compute, for the image (Compute's own image proxy went in 2.36): ``GET /image`` (the
versions), ``GET /image/v2/images`` (a listing: ``name``, ``visibility``, ``owner``, ``status``,
``limit``, ``marker``, the next page in ``next``) and ``GET /image/v2/images/{id}``. Which images
a caller sees is the library's visibility (``novakit.catalog.images``): another project's private
image is not found. Uploads, updates, members and the other filters are issue 29's.

The view is Glance's: the image's own keys, its properties as keys of their own (Glance keeps no
``properties`` object), the sha256 novakit records as ``os_hash_algo``/``os_hash_value``
(Glance's ``checksum`` is an MD5, which novakit does not compute: null), and never where the
compute hosts read the file.
"""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from novakit import exceptions
from novakit.catalog import images
from novakit.service import paging
from novakit.service.auth import Caller, caller

router = APIRouter(prefix="/image")

#: what Glance's listing takes that novakit answers; another parameter is refused (400) rather
#: than ignored (a listing that leaves out a filter given answers another question)
FILTERS = ("name", "visibility", "limit", "marker")
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


def _image(view: dict[str, Any]) -> dict[str, Any]:
    """Glance's image for the library's view of it."""
    ident = view["id"]
    out: dict[str, Any] = {
        k: v for k, v in (view.get("properties") or {}).items() if k not in _OWN and isinstance(k, str)
    }
    out.update(
        {
            "id": ident,
            "name": view["name"],
            "status": view["status"],
            "visibility": view["visibility"],
            "owner": view["owner"],
            "size": view["size"] or None,
            "virtual_size": None,
            "min_disk": view["min_disk"],
            "min_ram": view["min_ram"],
            "disk_format": view["disk_format"],
            "container_format": view["container_format"],
            "checksum": None,
            "os_hash_algo": "sha256" if view["checksum"] else None,
            "os_hash_value": view["checksum"],
            "protected": False,
            "os_hidden": False,
            "tags": [],
            "created_at": _time(view.get("created_at")),
            "updated_at": _time(view.get("updated_at") or view.get("created_at")),
            "self": f"/v2/images/{ident}",
            "file": f"/v2/images/{ident}/file",
            "schema": "/v2/schemas/image",
        }
    )
    return out


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
        _db(request), who.ctx, visibility=params.get("visibility"), name=params.get("name")
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


@router.get("/v2/images/{image_id}")
async def show_image(image_id: str, request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    try:
        uuidlib.UUID(image_id)
    except ValueError:
        # Glance finds an image by its id only: a name is no image's id.
        raise exceptions.ImageNotFound(image_id=image_id) from None
    view = await run_in_threadpool(images.show, _db(request), who.ctx, image_id)
    return JSONResponse(_image(view))


def _db(request: Request) -> Any:
    return request.app.state.compute.db
