"""What every Network v2.0 router shares: Neutron's request bodies and listings, read one way.

A body is one object under the resource's key (``{"network": {...}}``); an attribute the
resource does not take is refused (400, Neutron's "Unrecognized attribute(s)"), and the
attributes Neutron has and novakit keeps at one value only (``admin_state_up``, ...) are taken
at that value and refused at another, so that nothing given is silently dropped.

A listing (``listing``) is Neutron's: a query parameter naming an attribute of the resource
filters on it (given twice, either value matches), ``sort_key``/``sort_dir`` order it,
``limit``/``marker`` page it (``novakit.service.paging``; the next page in
``<collection>_links``), and ``fields`` keeps only the attributes named (a show's too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request

from novakit import exceptions
from novakit.context import RequestContext
from novakit.network import filter_sync
from novakit.service import paging
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


def listing(request: Request, collection: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """Neutron's answer to a listing of ``items`` (views): filtered, sorted, paged, selected."""
    params = request.query_params
    known = set(items[0]) if items else set()
    for name in set(params) - _NOT_FILTERS:
        if name in known:
            wanted = params.getlist(name)
            items = [i for i in items if _matches(i.get(name), wanted)]
    keys = params.getlist("sort_key")
    if keys:
        directions = params.getlist("sort_dir")
        for n, key in reversed(list(enumerate(keys))):
            direction = directions[n] if n < len(directions) else "asc"
            if direction not in ("asc", "desc"):
                raise exceptions.ValidationError("sort_dir", "must be asc or desc")
            items = sorted(items, key=lambda i: _text(i.get(key)), reverse=direction == "desc")
    found, following = paging.page(request, items)
    body: dict[str, Any] = {collection: [selected(request, i) for i in found]}
    if following is not None:
        base = str(request.url).split("?")[0]
        body[f"{collection}_links"] = [{"rel": "next", "href": f"{base}?{following}"}]
    return body
