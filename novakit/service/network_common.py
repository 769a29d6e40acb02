"""What every Network v2.0 router shares: Neutron's request bodies and listings, read one way.

A body is one object under the resource's key (``{"network": {...}}``); an attribute the
resource does not take is refused (400, Neutron's "Unrecognized attribute(s)"), and the
attributes Neutron has and novakit keeps at one value only (``admin_state_up``, ...) are taken
at that value and refused at another, so that nothing given is silently dropped.

A listing (``listing``) is Neutron's: a query parameter naming an attribute of the resource
filters on it (given twice, either value matches), ``sort_key``/``sort_dir`` order it,
``limit``/``marker``/``page_reverse`` page it (``page_of``; no limit: the whole listing, as
Neutron's default; the next and previous pages in ``<collection>_links``), and ``fields`` keeps
only the attributes named (a show's too). The ports are filtered, sorted and paged in the
database instead (``novakit.network.ports.list_ports``), with the same ``Page`` and links.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from fastapi import Request

from novakit import exceptions
from novakit.context import RequestContext
from novakit.network import filter_sync
from novakit.service.body import read_json

#: listing parameters that are not filters
_NOT_FILTERS = {"fields", "limit", "marker", "sort_key", "sort_dir", "page_reverse"}


def db_of(request: Request) -> Any:
    return request.app.state.compute.db


def conf_of(request: Request) -> Any:
    return request.app.state.compute.conf


def push_of(request: Request, ctx: RequestContext) -> Callable[[list[str]], None]:
    """A change's ``on_change``: the filters of the ports it touched, sent to their hosts
    (``filter_sync.push_filters``) once it committed."""
    rpc = request.app.state.compute.api.conductor.rpc
    return lambda changed: None if not changed else _push(rpc, ctx.request_id, changed)


def _push(rpc: Any, request_id: str, changed: list[str]) -> None:
    filter_sync.push_filters(rpc, request_id, changed)


async def resource_body(request: Request, key: str) -> dict[str, Any]:
    """The one object under ``key`` of a create's or an update's body (bulk creates are not taken)."""
    body = await read_json(request)
    given = body.get(key)
    if not isinstance(given, dict) or set(body) != {key}:
        raise exceptions.ValidationError("body", f"must be one object under {key!r}")
    return given


def only(given: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise exceptions.ValidationError(
            unknown[0], f"Unrecognized attribute(s) '{', '.join(unknown)}' (not one novakit takes here)"
        )


def pick(given: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The attributes ``keys`` that ``given`` has (what a body hands the library as is)."""
    return {k: given[k] for k in keys if k in given}


def fixed(given: dict[str, Any], name: str, *values: Any) -> None:
    """An attribute novakit keeps at one value (or a few): taken at those, refused otherwise."""
    if name in given and (
        isinstance(given[name], bool) != isinstance(values[0], bool) or given[name] not in values
    ):
        shown = " or ".join(repr(v) for v in values)
        raise exceptions.ValidationError(name, f"novakit supports {shown} only")


def own_project(given: dict[str, Any], project_id: str) -> None:
    """``tenant_id``/``project_id`` of a create: the caller's project only (novakit makes
    networks, subnets and ports in the caller's project)."""
    for key in ("tenant_id", "project_id"):
        if key in given and given[key] != project_id:
            raise exceptions.ValidationError(key, "must be the caller's project (novakit creates in it only)")


def owner(project_id: str | None) -> dict[str, Any]:
    """Neutron's two names of a resource's project."""
    return {"tenant_id": project_id or "", "project_id": project_id or ""}


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else "" if value is None else str(value)


def _matches(value: Any, wanted: list[str]) -> bool:
    if isinstance(value, list):
        # A list attribute matches when one of its items does (fixed_ips: "ip_address=..." too).
        for item in value:
            if isinstance(item, dict):
                if any(f"{k}={_text(v)}" in wanted for k, v in item.items()):
                    return True
            elif _text(item) in wanted:
                return True
        return False
    return _text(value) in [w.lower() if isinstance(value, bool) else w for w in wanted]


def selected(request: Request, item: dict[str, Any]) -> dict[str, Any]:
    """``item`` with only the ``fields`` asked (all of them when none)."""
    fields = request.query_params.getlist("fields")
    return {k: v for k, v in item.items() if k in fields} if fields else item


@dataclass(frozen=True)
class Page:
    """The page a Network listing asks for, as Neutron reads it: no ``limit`` (or 0) is the whole
    listing (Neutron's ``pagination_max_limit`` is unbounded by default), and then ``marker``
    and ``page_reverse`` are not read."""

    limit: int | None = None
    marker: str | None = None
    reverse: bool = False


#: a larger limit reads the whole listing anyway; bounded so that the database takes the number
_LIMIT_BOUND = 2**31 - 1


def page_of(request: Request) -> Page:
    params = request.query_params
    given = params.get("limit") or "0"
    if not (given.isascii() and given.isdigit()):
        raise exceptions.ValidationError("limit", "must be a whole number of 0 or more (0: no limit)")
    limit = min(int(given), _LIMIT_BOUND)
    if not limit:
        return Page()
    return Page(limit, params.get("marker") or None, params.get("page_reverse", "").lower() == "true")


def sorts_of(request: Request) -> list[tuple[str, str]]:
    """The (``sort_key``, ``sort_dir``) pairs asked, in order; Neutron wants as many of each."""
    params = request.query_params
    keys = [k for k in params.getlist("sort_key") if k]
    directions = [d for d in params.getlist("sort_dir") if d]
    if len(keys) != len(directions):
        raise exceptions.ValidationError("sort_dir", "give one sort_dir (asc or desc) for each sort_key")
    return list(zip(keys, directions, strict=True))


def links(request: Request, collection: str, items: list[dict[str, Any]], asked: Page) -> dict[str, Any]:
    """Neutron's ``<collection>_links`` of a page of ``items``: ``next`` after its last item unless
    a forward page came short (the end), ``previous`` before its first unless a reverse page came
    short (the start); none for a whole listing."""
    if asked.limit is None:
        return {}
    base = str(request.url).split("?")[0]
    kept = [(k, v) for k, v in request.query_params.multi_items() if k not in ("marker", "page_reverse")]
    found = []
    short = len(items) < asked.limit
    if not (short and not asked.reverse):
        after = [("marker", items[-1]["id"])] if items else []
        found.append({"rel": "next", "href": f"{base}?{urlencode(kept + after)}"})
    if not (short and asked.reverse):
        before = [("marker", items[0]["id"])] if items else []
        found.append(
            {"rel": "previous", "href": f"{base}?{urlencode(kept + before + [('page_reverse', 'True')])}"}
        )
    return {f"{collection}_links": found} if found else {}


def listing(request: Request, collection: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """Neutron's answer to a listing of ``items`` (views), filtered, sorted and paged here: for the
    resources whose library answers them whole (a project's networks, subnets and groups are few);
    the ports are listed by ``novakit.network.ports.list_ports``, in the database."""
    params = request.query_params
    known = set(items[0]) if items else set()
    for name in set(params) - _NOT_FILTERS:
        if name in known:
            wanted = params.getlist(name)
            items = [i for i in items if _matches(i.get(name), wanted)]
    for key, direction in reversed(sorts_of(request)):
        if direction not in ("asc", "desc"):
            raise exceptions.ValidationError("sort_dir", "must be asc or desc")
        items = sorted(items, key=lambda i: _text(i.get(key)), reverse=direction == "desc")
    asked = page_of(request)
    found = _page(items, asked)
    return {collection: [selected(request, i) for i in found], **links(request, collection, found, asked)}


def _page(items: list[dict[str, Any]], asked: Page) -> list[dict[str, Any]]:
    """The page ``asked`` of ``items``: after (or, reversed, before) the item ``marker`` names."""
    if asked.limit is None:
        return items
    at = len(items) if asked.reverse else -1
    if asked.marker is not None:
        ids = [i["id"] for i in items]
        if asked.marker not in ids:
            raise exceptions.MarkerNotFound(marker=asked.marker)
        at = ids.index(asked.marker)
    if asked.reverse:
        return items[max(at - asked.limit, 0) : at]
    return items[at + 1 : at + 1 + asked.limit]
