"""Listing servers as Nova's ``GET /servers`` does: filters, scope, order and pages.

One place decides what a listing shows, for every entry point (the CLI's
``server list``, the ``server_info`` module, the Python API): the filters are
checked here (``ServerQuery``, ``filters_of``) and applied in the database query
(``novakit.db.api.instance_get_all``) of every cell (``novakit.cells.instances``),
never afterwards in a caller.

Scope, as in Nova: everyone lists their own project's servers; an admin lists
every project's only when asking (``all_projects``, policy
``servers:all_projects``). Filtering by host is an admin's (policy
``host:show``: members never learn host names). ``project`` names one project (another's is
an admin's, as ``all_projects``), ``user`` one user, ``changes_since`` a time (the servers
changed since, deleted ones too, as Nova's ``changes-since``), ``ip`` and ``ip6`` an address
(a regular expression matched from the start of a fixed IP, as Nova's). ``deleted`` lists deleted
servers only; novakit lets a member list its own project's deleted servers
(Nova keeps that filter for admins; here a project's history is its own and
shows nothing of others), an admin any project's with ``all_projects``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from typing import Any, Literal

from pydantic import Field, field_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.catalog import flavors, images
from novakit.compute import schemas, states
from novakit.context import RequestContext
from novakit.db.models import Image, InstanceMapping, IPAllocation, Port

#: Nova's limit when a listing gives none (``osapi_max_limit``)
MAX_LIMIT = 1000


class ServerQuery(schemas._Request):
    """What a server listing may ask for; every field is optional."""

    status: str | None = None
    name: str | None = None  # a regular expression searched in the name
    flavor: str | None = None  # name or id
    image: str | None = None  # name or id
    host: str | None = None
    all_projects: bool = False
    deleted: bool = False
    limit: int | None = Field(default=None, ge=1, le=MAX_LIMIT)
    marker: str | None = None
    sort_key: Literal["created_at", "name", "vm_state", "uuid"] = "created_at"
    sort_dir: Literal["asc", "desc"] = "asc"
    project: str | None = None  # another project's servers (an admin's), Nova's project_id filter
    user: str | None = None  # servers its user created, Nova's user_id filter
    changes_since: dt.datetime | None = None  # changed at or after it, deleted ones too
    changes_before: dt.datetime | None = None  # changed at or before it, deleted ones too (Nova 2.66)
    locked: bool | None = None  # locked (True) or not (False), Nova's 2.73 filter
    ip: str | None = None  # a regular expression one of the server's IPv4 fixed IPs matches (Nova's)
    ip6: str | None = None  # the same for its IPv6 fixed IPs
    reservation_id: str | None = None  # the servers of one create request (Nova's filter)

    @field_validator("changes_since", "changes_before")
    @classmethod
    def _utc(cls, value: dt.datetime | None) -> dt.datetime | None:
        """As the database keeps times: naive UTC (a time without a zone is taken as UTC)."""
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value

    @field_validator("status")
    @classmethod
    def _known_status(cls, value: str | None) -> str | None:
        if value is not None and value.upper() not in states.STATUSES:
            raise ValueError(f"{value!r} is not one of {', '.join(states.STATUSES)}")
        return value.upper() if value is not None else None

    @field_validator("name", "ip", "ip6")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"is not a valid regular expression ({exc})") from None
        return value


def filters_of(
    session: Session, ctx: RequestContext, query: ServerQuery | dict[str, Any] | None = None
) -> dict[str, Any]:
    """A listing's query checked and turned into ``db_api.instance_get_all``'s filters (the
    flavor and image looked up in the API database); every cell is then asked with them."""
    q = query if isinstance(query, ServerQuery) else schemas.parse(ServerQuery, dict(query or {}))
    if q.all_projects:
        policy.authorize(ctx, "servers:all_projects")
    if q.host is not None:
        policy.authorize(ctx, "host:show")
    filters: dict[str, Any] = {
        "host": q.host,
        "name_regex": q.name,
        "marker": q.marker,
        "limit": q.limit,
        "sort_key": q.sort_key,
        "sort_dir": q.sort_dir,
        "only_deleted": q.deleted,
    }
    if q.project is not None and q.project != ctx.project_id:
        policy.authorize(ctx, "servers:all_projects")
    if q.project is not None:
        filters["project_id"] = q.project
    elif not q.all_projects:
        filters["project_id"] = ctx.project_id
    if q.user is not None:
        filters["user_id"] = q.user
    if q.reservation_id is not None:
        filters["reservation_id"] = q.reservation_id
    if q.locked is not None:
        filters["locked"] = q.locked
    if q.changes_since is not None:
        filters["changes_since"] = q.changes_since
        filters["include_deleted"] = True
    if q.changes_before is not None:
        if q.changes_since is not None and q.changes_before < q.changes_since:
            raise exceptions.ValidationError("changes_before", "must not be earlier than changes_since")
        filters["changes_before"] = q.changes_before
        filters["include_deleted"] = True
    if q.status is not None:
        filters["states"] = states.states_for_status(q.status)
    if q.flavor is not None:
        filters["instance_type_id"] = flavors.get(session, q.flavor).id
    if q.image is not None:
        filters["image_ref"] = images.usable(session, ctx, q.image).uuid
    if q.ip is not None or q.ip6 is not None:
        # The addresses are the API database's (ports), the servers the cells': the servers whose
        # address matches are found here, and the cells' query (limit, marker, order) takes their ids.
        filters["uuids"] = servers_with_ip(session, filters.get("project_id"), q.ip, q.ip6)
    return filters


def servers_with_ip(session: Session, project_id: str | None, ip: str | None, ip6: str | None) -> list[str]:
    """The servers (of the project, if given) with a fixed IP matched from its start by ``ip``
    (IPv4) or ``ip6`` (IPv6), as Nova matches its ``ip`` and ``ip6`` filters."""
    stmt = (
        select(Port.device_id, IPAllocation.ip_address)
        .join(IPAllocation, IPAllocation.port_id == Port.id)
        .where(Port.device_id.is_not(None), Port.device_owner.like("compute:%"))
    )
    if project_id is not None:
        stmt = stmt.where(Port.project_id == project_id)
    wanted = {4: re.compile(ip) if ip is not None else None, 6: re.compile(ip6) if ip6 is not None else None}
    found: set[str] = set()
    for device_id, address in session.execute(stmt):
        pattern = wanted[ipaddress.ip_address(address).version]
        if device_id is not None and pattern is not None and pattern.match(address):
            found.add(device_id)
    return sorted(found)


def image_names(session: Session, refs: set[str]) -> dict[str, str]:
    """Image uuid -> name for the images servers were built from (deleted images too)."""
    if not refs:
        return {}
    rows = session.execute(select(Image.uuid, Image.name).where(Image.uuid.in_(sorted(refs)))).all()
    return {uuid: name for uuid, name in rows}


def server_names(session: Session, ctx: RequestContext, prefix: str = "", limit: int = 200) -> list[str]:
    """The names of the caller's project's live servers that start with ``prefix`` (for shell
    completion: names only, in one small query of the API database's mappings)."""
    stmt = select(InstanceMapping.display_name).where(
        InstanceMapping.project_id == ctx.project_id, InstanceMapping.deleted == 0
    )
    if prefix:
        stmt = stmt.where(InstanceMapping.display_name.startswith(prefix, autoescape=True))
    return list(session.execute(stmt.order_by(InstanceMapping.display_name).limit(limit)).scalars())
