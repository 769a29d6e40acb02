"""Request bodies: read with a limit, parsed as one JSON object.

A body over ``MAX_BODY`` (1 MiB) is refused with 413 before it is parsed (at once when its
Content-Length says so); a body that is not JSON, or not an object, with 400. Neither error
quotes the body, which may hold a password.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from novakit import exceptions
from novakit.service.errors import RequestTooLarge

MAX_BODY = 1024 * 1024


async def read_json(request: Request, limit: int = MAX_BODY) -> dict[str, Any]:
    parsed = await read_any_json(request, limit)
    if not isinstance(parsed, dict):
        raise exceptions.ValidationError("body", "must be a JSON object")
    return parsed


async def read_any_json(request: Request, limit: int = MAX_BODY) -> Any:
    """The body as JSON of any kind (a JSON patch is a list)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise RequestTooLarge(limit=limit)
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise RequestTooLarge(limit=limit)
    try:
        parsed = json.loads(bytes(data))
    except (ValueError, UnicodeDecodeError):
        raise exceptions.ValidationError("body", "is not valid JSON") from None
    return parsed
