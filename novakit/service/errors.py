"""Errors as the OpenStack clients expect them, from one table (Nova's ``faults``): every
library exception maps to its status here, never in a handler.

The shape is the service's, chosen by the path (``shape_of``):

- Keystone's (``/identity``): ``{"error": {"code": 401, "title": "Unauthorized", "message": "..."}}``;
- Nova's (``/compute``): ``{"itemNotFound": {"code": 404, "message": "..."}}``, the key named by
  the status as Nova's ``Fault`` names it (``badRequest``, ``forbidden``, ``conflictingRequest``,
  ``overLimit``, ...; ``computeFault`` otherwise). A 401 keeps Keystone's shape under
  ``/compute`` too: in front of a real Nova it is keystonemiddleware's answer, in that shape.

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
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from novakit import exceptions

LOG = logging.getLogger(__name__)

INTERNAL_MESSAGE = "An unexpected error prevented the server from fulfilling your request."


class RequestTooLarge(exceptions.NovakitError):
    msg_fmt = "Request is too large: the limit is %(limit)d bytes."
    code = 413


KEYSTONE = "identity"
NOVA = "compute"

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
}


def shape_of(path: str) -> str:
    """Whose error shape a request's answer takes (the module docstring)."""
    return NOVA if path == "/compute" or path.startswith("/compute/") else KEYSTONE


def error_body(status: int, message: str, shape: str = KEYSTONE) -> dict[str, Any]:
    if shape == NOVA and status != 401:
        return {NOVA_FAULT_NAMES.get(status, "computeFault"): {"code": status, "message": message}}
    title = {413: "Request Entity Too Large"}.get(status) or HTTPStatus(status).phrase
    return {"error": {"code": status, "title": title, "message": message}}


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


async def novakit_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, exceptions.NovakitError)
    shape = shape_of(request.url.path)
    status = status_of(exc, shape)
    if status >= 500:
        LOG.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
        return error_response(status, INTERNAL_MESSAGE, shape=shape)
    headers = {"WWW-Authenticate": f'Keystone uri="{request.base_url}"'} if status == 401 else None
    return error_response(status, exc.format_message(), headers, shape)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own answers (no such path, a method the path does not take)."""
    assert isinstance(exc, HTTPException)
    messages = {404: "The resource could not be found.", 405: "The method is not allowed for this resource."}
    message = messages.get(exc.status_code, str(exc.detail))
    return error_response(exc.status_code, message, exc.headers, shape_of(request.url.path))
