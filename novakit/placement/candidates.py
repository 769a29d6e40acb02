"""Allocation candidates: the providers that can take a request, found by one SQL query.

Everything quantitative and everything placement knows is decided in SQL:
capacity per resource class, min/max unit and step size, required and
forbidden traits, ``member_of`` aggregates (availability zones are
aggregates), hosts to skip. Usage is not summed from allocations here: each
inventory row carries ``used`` and ``free`` (capacity - used), kept exact by
triggers on allocations (migration 0003).

Which ``limit`` providers come back: Nova asks placement for up to 1,000 in
an order it does not rely on. Here the caller may name a resource class
(``order_by``): the query then walks the ``(resource_class, free,
resource_provider_id)`` index from the most free (or, for stacking, the least
free that still fits) and stops after ``limit`` matches, so the cost of a
decision depends on the limit, not on the fleet size; providers that fail a
condition are skipped on the way, so the worst case grows with the number of
providers, never faster. Without ``order_by`` providers come in id order.

``explain`` is the slow path, run only when nothing fits: it tells, per provider,
which condition of the query dropped it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.placement.aggregates import aggregate_ids
from novakit.placement.allocations import validate_resources, why_not_fits
from novakit.placement.inventories import STANDARD_CLASSES
from novakit.placement.providers import find_provider
from novakit.placement.traits import trait_ids, traits_of, validate_trait


@dataclass
class CandidateRequest:
    """What the prefilter needs; names are resolved to ids by the caller (see scheduler.manager)."""

    resources: dict[str, int]
    required_trait_ids: list[int] = field(default_factory=list)
    forbidden_trait_ids: list[int] = field(default_factory=list)
    # Each inner list is "member of any of these aggregates"; all groups must hold.
    member_of: list[list[int]] = field(default_factory=list)
    # "In none of these aggregates": the default availability zone is "no zone aggregate".
    not_member_of: list[int] = field(default_factory=list)
    # What each ``member_of`` group (and ``not_member_of``) stands for, for explanations:
    # "availability zone east", "aggregate rack-1".
    member_of_names: list[str] = field(default_factory=list)
    not_member_of_name: str = ""
    exclude_hosts: list[str] = field(default_factory=list)
    # Hosts left out for a reason of their own (their cell is disabled or down): host -> reason.
    excluded: dict[str, str] = field(default_factory=dict)
    only_hosts: list[str] | None = None
    limit: int = 1000
    # Trait ids -> names, so that an explanation says which trait.
    trait_names: dict[int, str] = field(default_factory=dict)
    # Walk providers by the free capacity of this (requested) class: most free first when
    # ``descending`` (spreading weighers), least free that still fits first otherwise (stacking).
    order_by: str | None = None
    descending: bool = True


@dataclass(slots=True)
class Candidate:
    provider_id: int
    uuid: str
    name: str
    generation: int
    # Per resource class the provider has: capacity and current usage.
    capacity: dict[str, int]
    used: dict[str, int]
    max_unit: dict[str, int]


# Columns read per resource class; ``explain`` and ``get_allocation_candidates`` index into them.
_PER_CLASS = ("total", "reserved", "allocation_ratio", "min_unit", "max_unit", "step_size", "used")
WIDTH = len(_PER_CLASS)


_CLASS_NAME = re.compile(r"^[A-Z0-9_]{1,255}$")


def _ids(values: list[int]) -> str:
    return ", ".join(str(int(v)) for v in values) or "NULL"


def build_query(req: CandidateRequest, *, for_explain: bool = False) -> tuple[str, dict[str, Any], list[str]]:
    """SQL text, parameters and the resource classes whose columns follow ``rp.id, uuid, name, generation``.

    Numbers and resource class names are written into the SQL, only host names are bound
    (lists of them expand; ``statement`` binds them). psycopg prepares a statement after its
    fifth execution and PostgreSQL then reuses one generic plan for any parameters: with
    ``free >= $1 ... LIMIT $2`` that plan guessed at selectivities and sorted every match
    (about 300 ms at 10,000 providers) instead of walking the free-capacity index (under 1 ms).
    With the numbers in the text each distinct request shape gets its own, right, plan, planned
    once per connection.
    """
    classes = list(dict.fromkeys([*req.resources, *STANDARD_CLASSES]))
    for rc in classes:
        if not _CLASS_NAME.match(rc):  # they are written into the SQL
            raise ValueError(f"invalid resource class {rc!r}")
    order_by = req.order_by if req.order_by in req.resources and not for_explain else None
    params: dict[str, Any] = {}
    # Every column is named so that a caller can wrap the query as a subquery (``SELECT c.* ...``).
    select = ["rp.id AS rp_id", "rp.uuid AS rp_uuid", "rp.name AS rp_name", "rp.generation AS rp_generation"]
    columns, joins, where = _class_columns(req, classes, order_by, for_explain)
    select += columns
    conditions = _membership_conditions(req)
    # explain() reads each condition as a flag instead of filtering on it.
    if for_explain:
        select += [f"{cond} AS flag{n}" for n, cond in enumerate(conditions)]
    else:
        where += conditions
    if (req.exclude_hosts or req.excluded) and not for_explain:
        params["ex"] = [*req.exclude_hosts, *req.excluded]
        where.append("rp.name NOT IN :ex")
    if req.only_hosts is not None and not for_explain:
        params["only"] = list(req.only_hosts) or [""]
        where.append("rp.name IN :only")
    if order_by is not None:
        driver = f"i{classes.index(order_by)}"
        sql = (
            f"SELECT {', '.join(select)} FROM inventories {driver} "
            f"CROSS JOIN resource_providers rp {' '.join(joins)}"
        )
        where.insert(0, f"rp.id = {driver}.resource_provider_id")
        direction = "DESC" if req.descending else "ASC"
        order = f"{driver}.free {direction}, {driver}.resource_provider_id {direction}"
    else:
        sql = f"SELECT {', '.join(select)} FROM resource_providers rp {' '.join(joins)}"
        order = "rp.id"
    if where:
        sql += " WHERE " + " AND ".join(f"({w})" for w in where)
    sql += f" ORDER BY {order} LIMIT {int(req.limit)}"
    return sql, params, classes


def _class_columns(
    req: CandidateRequest, classes: list[str], order_by: str | None, for_explain: bool
) -> tuple[list[str], list[str], list[str]]:
    """Per resource class: its inventory's columns, its join (an inner one when requested, the
    ``order_by`` class's inventory drives the walk instead), and the request's amount as a
    condition. Returns the columns, the joins and the conditions."""
    select: list[str] = []
    joins: list[str] = []
    where: list[str] = []
    for n, rc in enumerate(classes):
        alias = f"i{n}"
        requested = rc in req.resources and not for_explain
        if rc == order_by:
            # The driving table: SQLite keeps the left side of a CROSS JOIN as the outer loop, so the
            # walk follows the free-capacity index; PostgreSQL plans it as an ordinary join.
            where.append(f"{alias}.resource_class = '{rc}'")
        else:
            joins.append(
                f"{'JOIN' if requested else 'LEFT JOIN'} inventories {alias} "
                f"ON {alias}.resource_provider_id = rp.id AND {alias}.resource_class = '{rc}'"
            )
        select += [f"{alias}.{col} AS {alias}_{col}" for col in _PER_CLASS]
        if requested:
            amount = int(req.resources[rc])
            # "step_size = 1 OR": the same condition, but PostgreSQL's planner, which cannot estimate
            # a modulo, then sees from the column statistics that it holds for (almost) every row.
            where.append(
                f"{alias}.free >= {amount} AND {alias}.min_unit <= {amount} "
                f"AND {alias}.max_unit >= {amount} "
                f"AND ({alias}.step_size = 1 OR ({amount} % {alias}.step_size) = 0)"
            )
    return select, joins, where


def _membership_conditions(req: CandidateRequest) -> list[str]:
    """The traits and aggregates a provider must have, or must not, as SQL conditions."""
    conditions: list[str] = []
    for trait_id in req.required_trait_ids:
        conditions.append(
            "EXISTS (SELECT 1 FROM resource_provider_traits t WHERE t.resource_provider_id = rp.id "
            f"AND t.trait_id = {int(trait_id)})"
        )
    if req.forbidden_trait_ids:
        conditions.append(
            "NOT EXISTS (SELECT 1 FROM resource_provider_traits t WHERE t.resource_provider_id = rp.id "
            f"AND t.trait_id IN ({_ids(req.forbidden_trait_ids)}))"
        )
    for group in req.member_of:
        conditions.append(
            "EXISTS (SELECT 1 FROM resource_provider_aggregates g WHERE g.resource_provider_id = rp.id "
            f"AND g.aggregate_id IN ({_ids(group)}))"
        )
    if req.not_member_of:
        conditions.append(
            "NOT EXISTS (SELECT 1 FROM resource_provider_aggregates g WHERE g.resource_provider_id = rp.id "
            f"AND g.aggregate_id IN ({_ids(req.not_member_of)}))"
        )
    return conditions


def statement(sql: str, params: dict[str, Any]) -> Any:
    """``text(sql)`` with the list-valued parameters bound as expanding IN lists.

    Cached: building a TextClause parses the SQL for parameters with a regular
    expression, which for a candidate query costs about as much as running it.
    """
    return _statement(sql, tuple(name for name, value in params.items() if isinstance(value, list)))


@functools.lru_cache(maxsize=256)
def _statement(sql: str, expanding: tuple[str, ...]) -> Any:
    return text(sql).bindparams(*(bindparam(name, expanding=True) for name in expanding))


def candidate_from_row(row: Sequence[Any], classes: list[str]) -> Candidate:
    capacity: dict[str, int] = {}
    used: dict[str, int] = {}
    max_unit: dict[str, int] = {}
    for n, rc in enumerate(classes):
        total, reserved, ratio, _min, maxu, _step, usage = row[4 + WIDTH * n : 4 + WIDTH * (n + 1)]
        if total is not None:
            capacity[rc] = int((total - reserved) * ratio)
            used[rc] = int(usage)
            max_unit[rc] = maxu
    return Candidate(row[0], row[1], row[2], row[3], capacity, used, max_unit)


def get_allocation_candidates(session: Session, req: CandidateRequest) -> list[Candidate]:
    """Up to ``req.limit`` providers that can take ``req.resources`` now (order: see the module docstring)."""
    sql, params, classes = build_query(req)
    return [candidate_from_row(row, classes) for row in session.execute(statement(sql, params), params)]


def count_providers(session: Session) -> int:
    return int(session.execute(text("SELECT COUNT(*) FROM resource_providers")).scalar_one())


def explain(
    session: Session, req: CandidateRequest, *, scan_limit: int = 20000
) -> tuple[dict[str, str], int]:
    """Why each provider failed the prefilter: ``({host: reason}, providers examined)``.

    Only the failure path runs this; it reads at most ``scan_limit`` providers.
    """
    probe = CandidateRequest(
        resources=req.resources,
        required_trait_ids=req.required_trait_ids,
        forbidden_trait_ids=req.forbidden_trait_ids,
        member_of=req.member_of,
        not_member_of=req.not_member_of,
        limit=scan_limit,
    )
    sql, params, classes = build_query(probe, for_explain=True)
    reasons: dict[str, str] = {}
    examined = 0
    width = 4 + WIDTH * len(classes)
    for row in session.execute(statement(sql, params), params):
        examined += 1
        name = row[2]
        if name in req.exclude_hosts:
            reasons[name] = "already tried for this instance (ignore_hosts)"
            continue
        if name in req.excluded:
            reasons[name] = req.excluded[name]
            continue
        if req.only_hosts is not None and name not in req.only_hosts:
            reasons[name] = f"not the requested host {', '.join(req.only_hosts)}"
            continue
        flags = list(row[width:])
        reason = ""
        for trait_id in req.required_trait_ids:
            if not flags.pop(0):
                reason = f"lacks required trait {req.trait_names.get(trait_id, trait_id)}"
                break
        if not reason and req.forbidden_trait_ids and not flags.pop(0):
            reason = "has a forbidden trait"
        if not reason:
            for n, _group in enumerate(req.member_of):
                if not flags.pop(0):
                    named = req.member_of_names[n] if n < len(req.member_of_names) else ""
                    reason = f"not in {named or 'the requested aggregate / availability zone'}"
                    break
        if not reason and req.not_member_of and not flags.pop(0):
            reason = f"not in {req.not_member_of_name or 'the default availability zone'}"
        if not reason:
            rows = [
                (None, rc, *row[4 + WIDTH * n : 4 + WIDTH * (n + 1)])
                for n, rc in enumerate(classes)
                if row[4 + WIDTH * n] is not None
            ]
            # why_not_fits wants (gen, class, total, reserved, min, max, step, ratio, used)
            reordered = [(g, rc, t, r, mn, mx, st, ratio, u) for g, rc, t, r, ratio, mn, mx, st, u in rows]
            reason = why_not_fits(req.resources, reordered) or "fits now (capacity freed since the query)"
        reasons[name] = reason
    return reasons, examined


# ---------------------------------------------------------------- the Placement API's queries


@dataclass
class ProviderAsk:
    """What a Placement API request asks of providers, by name: amounts that must fit, traits
    required and forbidden, ``member_of`` groups of aggregate uuids (each: any of them), and for
    a listing a provider's ``name``, ``uuid`` or tree (``in_tree``: a provider is its own tree
    here, novakit nests none). ``limit``: at most that many (None: all)."""

    resources: dict[str, int] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    forbidden: list[str] = field(default_factory=list)
    member_of: list[list[str]] = field(default_factory=list)
    name: str | None = None
    uuid: str | None = None
    in_tree: str | None = None
    limit: int | None = None


def _request(session: Session, ask: ProviderAsk) -> CandidateRequest:
    """The candidate query's request for ``ask``: names resolved to ids; an unknown trait is the
    request's error, as Placement's "No such trait(s)"."""
    for name in (*ask.required, *ask.forbidden):
        validate_trait(name)
    ids = trait_ids(session, {*ask.required, *ask.forbidden})
    unknown = sorted({*ask.required, *ask.forbidden} - ids.keys())
    if unknown:
        raise exceptions.ValidationError("required", f"No such trait(s): {', '.join(unknown)}")
    only: list[str] | None = None
    for key in (ask.uuid, ask.in_tree):
        if key is not None:
            provider = find_provider(session, key)
            names = [provider.name] if provider is not None and provider.uuid == key else []
            only = names if only is None else [n for n in only if n in names]
    if ask.name is not None:
        only = [ask.name] if only is None or ask.name in only else []
    return CandidateRequest(
        resources=dict(ask.resources),
        required_trait_ids=[ids[n] for n in ask.required],
        forbidden_trait_ids=[ids[n] for n in ask.forbidden],
        member_of=[aggregate_ids(session, group) for group in ask.member_of],
        only_hosts=only,
        limit=ask.limit if ask.limit is not None else max(count_providers(session), 1),
    )


def find_providers(db: Database, ctx: RequestContext, ask: ProviderAsk) -> list[Candidate]:
    """The providers ``ask`` names, in id order (Placement's GET /resource_providers): the
    candidate query, so that its ``resources`` filter means what a claim would find."""
    policy.authorize(ctx, "placement:read")
    if ask.resources:
        validate_resources(ask.resources)
    with db.reader() as session:
        return get_allocation_candidates(session, _request(session, ask))


def allocation_candidates(
    db: Database, ctx: RequestContext, ask: ProviderAsk
) -> tuple[list[Candidate], dict[int, list[str]]]:
    """The providers that can take ``ask.resources`` now, and the traits of each by provider id
    (Placement's GET /allocation_candidates; one provider per candidate: novakit shares none)."""
    policy.authorize(ctx, "placement:read")
    validate_resources(ask.resources)
    with db.reader() as session:
        found = get_allocation_candidates(session, _request(session, ask))
        return found, traits_of(session, [c.provider_id for c in found])
