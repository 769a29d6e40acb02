"""Pages of a listing the library answers whole (a server's actions, the migrations, the
images), as the OpenStack APIs page them: after the item ``marker`` names (400 when it names
none of the listing), at most ``limit`` items, and the query of the next page when this one is
full; and Nova's ``changes-since`` / ``changes-before`` bounds of such a listing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from fastapi import Request

from novakit import exceptions
from novakit.compute.listing import MAX_LIMIT


def limit_of(request: Request) -> int:
    """The page size asked (``limit``: a whole number of 0 or more; at most ``MAX_LIMIT``)."""
    given = request.query_params.get("limit")
    if given is None:
        return MAX_LIMIT
    if not given.isdigit():
        raise exceptions.ValidationError("limit", "must be a whole number of 0 or more")
    return min(int(given), MAX_LIMIT)


def page(
    request: Request, found: list[dict[str, Any]], key: str = "id"
) -> tuple[list[dict[str, Any]], str | None]:
    """The page of ``found`` the request asks for, and the query string of the next page (None:
    this page is not full, so it is the last)."""
    marker = request.query_params.get("marker")
    if marker is not None:
        ids = [item[key] for item in found]
        if marker not in ids:
            raise exceptions.MarkerNotFound(marker=marker)
        found = found[ids.index(marker) + 1 :]
    limit = limit_of(request)
    items = found[:limit]
    return items, next_query(request, items[-1][key]) if items and len(items) == limit else None


def next_query(request: Request, marker: str) -> str:
    """The request's query with ``marker`` for the next page."""
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "marker"]
    params.append(("marker", marker))
    return urlencode(params)


def when(name: str, value: str) -> dt.datetime:
    """A query's time (ISO 8601; one without a zone is UTC), as the database keeps times."""
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise exceptions.ValidationError(name, "must be an ISO 8601 time") from None
    return parsed.astimezone(dt.UTC).replace(tzinfo=None) if parsed.tzinfo is not None else parsed


def changed_between(
    request: Request,
    found: list[dict[str, Any]],
    changed: Callable[[dict[str, Any]], dt.datetime],
    *,
    since: bool,
    before: bool,
) -> list[dict[str, Any]]:
    """The items ``changed`` at or after ``changes-since`` and at or before ``changes-before``,
    each bound read only where the asked microversion takes it (``since``, ``before``)."""
    params = request.query_params
    low = when("changes-since", params["changes-since"]) if since and "changes-since" in params else None
    high = when("changes-before", params["changes-before"]) if before and "changes-before" in params else None
    if low is not None and high is not None and high < low:
        raise exceptions.ValidationError("changes-before", "must not be earlier than changes-since")
    return [i for i in found if (low is None or changed(i) >= low) and (high is None or changed(i) <= high)]
