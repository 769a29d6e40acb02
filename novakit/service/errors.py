"""Errors as the OpenStack clients expect them, from one table (Nova's ``faults``): every
library exception maps to its status here, never in a handler.

Keystone's shape: ``{"error": {"code": 401, "title": "Unauthorized", "message": "..."}}``.
The message of a 4xx error is the exception's (it names a field, never a value given); a 5xx
answer says nothing of its cause, which goes to the service's log.
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


def error_body(status: int, message: str) -> dict[str, Any]:
    title = {413: "Request Entity Too Large"}.get(status) or HTTPStatus(status).phrase
    return {"error": {"code": status, "title": title, "message": message}}


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message), status_code=status, headers=headers)


def status_of(exc: exceptions.NovakitError) -> int:
    code = int(getattr(exc, "code", 500) or 500)
    return code if 400 <= code <= 599 else 500


async def novakit_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, exceptions.NovakitError)
    status = status_of(exc)
    if status >= 500:
        LOG.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
        return error_response(status, INTERNAL_MESSAGE)
    headers = {"WWW-Authenticate": f'Keystone uri="{request.base_url}"'} if status == 401 else None
    return error_response(status, exc.format_message(), headers)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own answers (no such path, a method the path does not take)."""
    assert isinstance(exc, HTTPException)
    messages = {404: "The resource could not be found.", 405: "The method is not allowed for this resource."}
    return error_response(exc.status_code, messages.get(exc.status_code, str(exc.detail)), exc.headers)
