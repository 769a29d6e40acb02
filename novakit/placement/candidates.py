"""Allocation candidates: the providers that can take a request, found by one SQL query.

Everything quantitative and everything placement knows is decided in SQL:
capacity per resource class (usage summed from allocations through the
``(resource_provider_id, resource_class)`` index), min/max unit and step size,
required and forbidden traits, ``member_of`` aggregates (availability zones are
aggregates), hosts to skip. The query is ordered by provider id and LIMITed, so
the database can stop after ``limit`` matches instead of loading the fleet:
with a fleet that has room the cost depends on the limit, not the fleet size;
when the first providers are full it grows with how many it must skip, never
faster than the number of providers.

``explain`` is the slow path, run only when nothing fits: it tells, per provider,
which condition of the query dropped it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from novakit.placement.allocations import why_not_fits
from novakit.placement.inventories import STANDARD_CLASSES


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
    exclude_hosts: list[str] = field(default_factory=list)
    only_hosts: list[str] | None = None
    limit: int = 1000
    # Trait ids -> names, so that an explanation says which trait.
    trait_names: dict[int, str] = field(default_factory=dict)


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


def _usage(rc_param: str) -> str:
    return (
        "(SELECT COALESCE(SUM(a.used), 0) FROM allocations a "
        f"WHERE a.resource_provider_id = rp.id AND a.resource_class = :{rc_param})"
    )


def _build(req: CandidateRequest, *, for_explain: bool) -> tuple[Any, dict[str, Any], list[str]]:
    classes = list(dict.fromkeys([*req.resources, *STANDARD_CLASSES]))
    params: dict[str, Any] = {}
    select = ["rp.id", "rp.uuid", "rp.name", "rp.generation"]
    joins: list[str] = []
    where: list[str] = []
    expanding: list[str] = []
    for n, rc in enumerate(classes):
        alias, rcp = f"i{n}", f"rc{n}"
        params[rcp] = rc
        requested = rc in req.resources and not for_explain
        joins.append(
            f"{'JOIN' if requested else 'LEFT JOIN'} inventories {alias} "
            f"ON {alias}.resource_provider_id = rp.id "
            f"AND {alias}.resource_class = :{rcp}"
        )
        select += [
            f"{alias}.total",
            f"{alias}.reserved",
            f"{alias}.allocation_ratio",
            f"{alias}.min_unit",
            f"{alias}.max_unit",
            f"{alias}.step_size",
            _usage(rcp),
        ]
        if requested:
            amount = f"a{n}"
            params[amount] = req.resources[rc]
            where.append(
                f"{alias}.min_unit <= :{amount} AND {alias}.max_unit >= :{amount} "
                f"AND (:{amount} % {alias}.step_size) = 0 "
                f"AND ({alias}.total - {alias}.reserved) * {alias}.allocation_ratio "
                f">= :{amount} + {_usage(rcp)}"
            )
    for n, trait_id in enumerate(req.required_trait_ids):
        params[f"rt{n}"] = trait_id
        cond = (
            "EXISTS (SELECT 1 FROM resource_provider_traits t WHERE t.resource_provider_id = rp.id "
            f"AND t.trait_id = :rt{n})"
        )
        (select if for_explain else where).append(cond)
    if req.forbidden_trait_ids:
        params["ft"] = req.forbidden_trait_ids
        expanding.append("ft")
        cond = (
            "NOT EXISTS (SELECT 1 FROM resource_provider_traits t WHERE t.resource_provider_id = rp.id "
            "AND t.trait_id IN :ft)"
        )
        (select if for_explain else where).append(cond)
    for n, group in enumerate(req.member_of):
        params[f"m{n}"] = group
        expanding.append(f"m{n}")
        cond = (
            "EXISTS (SELECT 1 FROM resource_provider_aggregates g WHERE g.resource_provider_id = rp.id "
            f"AND g.aggregate_id IN :m{n})"
        )
        (select if for_explain else where).append(cond)
    if req.not_member_of:
        params["nm"] = req.not_member_of
        expanding.append("nm")
        cond = (
            "NOT EXISTS (SELECT 1 FROM resource_provider_aggregates g WHERE g.resource_provider_id = rp.id "
            "AND g.aggregate_id IN :nm)"
        )
        (select if for_explain else where).append(cond)
    if req.exclude_hosts:
        params["ex"] = req.exclude_hosts
        expanding.append("ex")
        where.append("rp.name NOT IN :ex")
    if req.only_hosts is not None:
        params["only"] = req.only_hosts or [""]
        expanding.append("only")
        where.append("rp.name IN :only")
    sql = f"SELECT {', '.join(select)} FROM resource_providers rp {' '.join(joins)}"
    if where:
        sql += " WHERE " + " AND ".join(f"({w})" for w in where)
    sql += " ORDER BY rp.id LIMIT :limit"
    params["limit"] = req.limit
    stmt = text(sql).bindparams(*(bindparam(name, expanding=True) for name in expanding))
    return stmt, params, classes


def get_allocation_candidates(session: Session, req: CandidateRequest) -> list[Candidate]:
    """Up to ``req.limit`` providers that can take ``req.resources`` now, in provider id order."""
    stmt, params, classes = _build(req, for_explain=False)
    out = []
    for row in session.execute(stmt, params):
        capacity: dict[str, int] = {}
        used: dict[str, int] = {}
        max_unit: dict[str, int] = {}
        for n, rc in enumerate(classes):
            total, reserved, ratio, _min, maxu, _step, usage = row[4 + 7 * n : 11 + 7 * n]
            if total is not None:
                capacity[rc] = int((total - reserved) * ratio)
                used[rc] = int(usage)
                max_unit[rc] = maxu
        out.append(Candidate(row[0], row[1], row[2], row[3], capacity, used, max_unit))
    return out


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
    stmt, params, classes = _build(probe, for_explain=True)
    reasons: dict[str, str] = {}
    examined = 0
    width = 4 + 7 * len(classes)
    for row in session.execute(stmt, params):
        examined += 1
        name = row[2]
        if name in req.exclude_hosts:
            reasons[name] = "already tried for this instance (ignore_hosts)"
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
            for _group in req.member_of:
                if not flags.pop(0):
                    reason = "not in the requested aggregate / availability zone"
                    break
        if not reason and req.not_member_of and not flags.pop(0):
            reason = "in another availability zone"
        if not reason:
            rows = [
                (None, rc, *row[4 + 7 * n : 11 + 7 * n])
                for n, rc in enumerate(classes)
                if row[4 + 7 * n] is not None
            ]
            # why_not_fits wants (gen, class, total, reserved, min, max, step, ratio, used)
            reordered = [(g, rc, t, r, mn, mx, st, ratio, u) for g, rc, t, r, ratio, mn, mx, st, u in rows]
            reason = why_not_fits(req.resources, reordered) or "fits now (capacity freed since the query)"
        reasons[name] = reason
    return reasons, examined
