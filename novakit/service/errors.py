"""Errors as the OpenStack clients expect them, from one table (Nova's ``faults``): every
library exception maps to its status here, never in a handler.

The shape is the service's, chosen by the path (``shape_of``):

- Keystone's (``/identity``): ``{"error": {"code": 401, "title": "Unauthorized", "message": "..."}}``;
- Nova's (``/compute``): ``{"itemNotFound": {"code": 404, "message": "..."}}``, the key named by
  the status as Nova's ``Fault`` names it (``badRequest``, ``forbidden``, ``conflictingRequest``,
  ``overLimit``, ...; ``computeFault`` otherwise). A 401 keeps Keystone's shape under
  ``/compute`` too: in front of a real Nova it is keystonemiddleware's answer, in that shape;
- Placement's (``/placement``): ``{"errors": [{"status": 404, "title": "Not Found", "detail":
  "...", "request_id": "req-...", "code": "placement.undefined_code"}]}``; a 406 of a version out
  of range adds the range (``min_version``, ``max_version``: osc-placement's negotiation reads
  it); a 401 in Keystone's shape.
- Cinder's (``/volume``): Nova's shape (Cinder's ``Fault`` has the same names), 401 Keystone's too.
- Neutron's (``/network``): ``{"NeutronError": {"type": "NetworkNotFound", "message": "...",
  "detail": ""}}``, the type the library exception's name (``NEUTRON_TYPES`` where Neutron names
  it otherwise), else the status's (``HTTPNotFound``, ...); a 401 in Keystone's shape.
- novakit's own (``/novakit``, ``novakit.service.native``): ``{"error": {"type": "InstanceNotFound",
  "code": 404, "message": "...", ...}}``, with what the exception carries (a server's view, a
  scheduler's explanation), so that ``novakit.client`` raises the same exception; a 401 in
  Keystone's shape.

A service may answer a library exception with another status than its code (``STATUS_BY_SERVICE``:
Nova answers a listing's unknown marker 400, not 404). The message of a 4xx error is the
exception's (it names a field, never a value given); a 5xx answer says nothing of its cause,
which goes to the service's log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from novakit import exceptions

LOG = logging.getLogger(__name__)

INTERNAL_MESSAGE = "An unexpected error prevented the server from fulfilling your request."


class RequestTooLarge(exceptions.NovakitError):
    msg_fmt = "Request is too large: the limit is %(limit)d bytes."
    code = 413


class UnsupportedMediaType(exceptions.NovakitError):
    msg_fmt = "The request's Content-Type is not %(expected)s."
    code = 415


KEYSTONE = "identity"
NOVA = "compute"
NEUTRON = "network"
#: Neutron's names for what the library names otherwise (its ``type`` of an error body)
NEUTRON_TYPES = {
    "ValidationError": "HTTPBadRequest",
    "IpAddressInUse": "IpAddressAlreadyAllocated",
    "Conflict": "HTTPConflict",
    "NotFound": "HTTPNotFound",
    "SecurityGroupCannotRemoveDefault": "SecurityGroupCannotRemoveDefault",
}
CINDER = "volume"
#: novakit's own tools (``novakit.service.native``)
NATIVE = "novakit"
#: what a native error answer carries of its exception besides the message (``client.api.CARRIED``)
CARRIED = ("server", "changed", "explanation", "field", "rule", "errors")
PLACEMENT = "placement"
#: Placement's error codes where it names one (its ``errors.py``); any other error's is undefined
PLACEMENT_CODES: dict[type[exceptions.NovakitError], str] = {
    exceptions.ConcurrentUpdateDetected: "placement.concurrent_update",
    exceptions.InventoryInUse: "placement.inventory.inuse",
}

#: Nova's names for its error bodies' one key, by status (Nova's ``Fault._fault_names``)
NOVA_FAULT_NAMES = {
    400: "badRequest",
    401: "unauthorized",
    403: "forbidden",
    404: "itemNotFound",
    405: "badMethod",
    409: "conflictingRequest",
    413: "overLimit",
    415: "badMediaType",
    429: "overLimit",
    501: "notImplemented",
    503: "serviceUnavailable",
}

#: where a service answers a library exception with another status than the exception's code
STATUS_BY_SERVICE: dict[str, dict[type[exceptions.NovakitError], int]] = {
    NOVA: {exceptions.MarkerNotFound: 400},
    # Cinder: a volume in the wrong status is its InvalidVolume (400); over quota is 413.
    CINDER: {exceptions.InvalidVolume: 400, exceptions.OverQuota: 413},
}


def shape_of(path: str) -> str:
    """Whose error shape a request's answer takes (the module docstring)."""
    if path == f"/{NEUTRON}" or path.startswith(f"/{NEUTRON}/"):
        return NEUTRON
    for shape in (NOVA, CINDER, PLACEMENT, NATIVE):
        if path == f"/{shape}" or path.startswith(f"/{shape}/"):
            return shape
    return KEYSTONE


def error_body(status: int, message: str, shape: str = KEYSTONE) -> dict[str, Any]:
    if shape == NATIVE and status != 401:
        return native_body(status, None, message)
    if shape == NEUTRON and status != 401:
        return neutron_body(status, message)
    if shape in (NOVA, CINDER) and status != 401:
        return {NOVA_FAULT_NAMES.get(status, "computeFault"): {"code": status, "message": message}}
    title = {413: "Request Entity Too Large"}.get(status) or HTTPStatus(status).phrase
    return {"error": {"code": status, "title": title, "message": message}}


def placement_body(
    status: int, message: str, request: Request, exc: Exception | None = None
) -> dict[str, Any]:
    """Placement's error body: the request's id, the error's code and, for a version out of
    range (``VersionNotAcceptable``'s arguments), the range."""
    entry: dict[str, Any] = {
        "status": status,
        "title": HTTPStatus(status).phrase,
        "detail": message,
        "request_id": getattr(request.state, "request_id", ""),
        "code": "placement.undefined_code",
    }
    for kind, code in PLACEMENT_CODES.items():
        if isinstance(exc, kind):
            entry["code"] = code
    if isinstance(exc, exceptions.NovakitError) and {"minimum", "maximum"} <= exc.kwargs.keys():
        entry.update(min_version=str(exc.kwargs["minimum"]), max_version=str(exc.kwargs["maximum"]))
    return {"errors": [entry]}


def neutron_body(status: int, message: str, kind: str | None = None) -> dict[str, Any]:
    """Neutron's error body: ``kind`` the library exception's name, else the status's."""
    named = NEUTRON_TYPES.get(kind or "", kind) or "HTTP" + HTTPStatus(status).phrase.replace(" ", "")
    return {"NeutronError": {"type": named, "message": message, "detail": ""}}


def error_response(
    status: int, message: str, headers: Mapping[str, str] | None = None, shape: str = KEYSTONE
) -> JSONResponse:
    return JSONResponse(error_body(status, message, shape), status_code=status, headers=headers)


def status_of(exc: exceptions.NovakitError, shape: str = KEYSTONE) -> int:
    for kind, status in STATUS_BY_SERVICE.get(shape, {}).items():
        if isinstance(exc, kind):
            return status
    code = int(getattr(exc, "code", 500) or 500)
    return code if 400 <= code <= 599 else 500


def native_body(status: int, exc: exceptions.NovakitError | None, message: str) -> dict[str, Any]:
    """novakit's own shape: the library exception's name, message and what it carries (a
    server's view, a scheduler's explanation), so that ``CloudAPI`` raises the same exception."""
    error: dict[str, Any] = {
        "type": type(exc).__name__ if exc is not None else "NovakitError",
        "code": status,
        "message": message,
    }
    for name in CARRIED if exc is not None else ():
        if hasattr(exc, name):
            error[name] = getattr(exc, name)
    return {"error": error}


async def novakit_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, exceptions.NovakitError)
    shape = shape_of(request.url.path)
    status = status_of(exc, shape)
    if shape == NATIVE and status != 401 and (status < 500 or isinstance(exc, exceptions.NoValidHost)):
        # The scheduler's answer is the library's text for its caller (its reasons only for those
        # who may see hosts: ``novakit.service.native``); any other 5xx says nothing, as below.
        body = native_body(status, exc, exc.format_message())
        return JSONResponse(jsonable_encoder(body), status_code=status)
    if status >= 500:
        LOG.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
        return error_response(status, INTERNAL_MESSAGE, shape=shape)
    headers = {"WWW-Authenticate": f'Keystone uri="{request.base_url}"'} if status == 401 else None
    if shape == PLACEMENT and status != 401:
        return JSONResponse(placement_body(status, exc.format_message(), request, exc), status_code=status)
    if shape == NEUTRON and status != 401:
        return JSONResponse(
            neutron_body(status, exc.format_message(), type(exc).__name__), status_code=status
        )
    return error_response(status, exc.format_message(), headers, shape)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own answers (no such path, a method the path does not take)."""
    assert isinstance(exc, HTTPException)
    messages = {404: "The resource could not be found.", 405: "The method is not allowed for this resource."}
    message = messages.get(exc.status_code, str(exc.detail))
    if shape_of(request.url.path) == PLACEMENT:
        body = placement_body(exc.status_code, message, request)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)
    return error_response(exc.status_code, message, exc.headers, shape_of(request.url.path))
