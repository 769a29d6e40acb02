"""Traits: qualitative facts about a provider (``HW_CPU_X86_AVX2``, ``CUSTOM_SSD``).

Requests name traits as required or forbidden; the candidate query checks them
in SQL. A disabled compute service is marked with COMPUTE_STATUS_DISABLED, as
Nova does, so that the prefilter skips it instead of spending candidate slots
on hosts the ComputeFilter would drop anyway.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlalchemy import bindparam, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.placement.allocations import retry_on_conflict
from novakit.placement.inventories import bump_generation
from novakit.placement.providers import ProviderView, lookup_provider, provider_by_uuid

COMPUTE_STATUS_DISABLED = "COMPUTE_STATUS_DISABLED"
_NAME = re.compile(r"^[A-Z0-9_]{1,255}$")

_IDS = text("SELECT name, id FROM traits WHERE name IN :names").bindparams(bindparam("names", expanding=True))


def validate_trait(name: str) -> None:
    if not _NAME.match(name):
        raise exceptions.ValidationError("trait", f"{name!r} must be upper-case letters, digits and _")


def trait_ids(session: Session, names: Iterable[str]) -> dict[str, int]:
    """Ids of the traits that exist; unknown names are simply absent from the result."""
    names = list(names)
    return dict(session.execute(_IDS, {"names": names}).all()) if names else {}


def ensure_traits(session: Session, names: set[str]) -> dict[str, int]:
    """Create the traits that do not exist yet; the ids of all of ``names``."""
    known = trait_ids(session, names)
    for name in sorted(names - known.keys()):
        try:
            with session.begin_nested():
                session.execute(text("INSERT INTO traits (name) VALUES (:n)"), {"n": name})
        except IntegrityError:
            pass  # created concurrently: fine, we only need it to exist
    return trait_ids(session, names)


_WITH_TRAIT = (
    "SELECT rp.name FROM resource_providers rp "
    "JOIN resource_provider_traits rpt ON rpt.resource_provider_id = rp.id "
    "JOIN traits t ON t.id = rpt.trait_id WHERE t.name = :trait"
)
_NOT_DISABLED = (
    " AND NOT EXISTS (SELECT 1 FROM resource_provider_traits d JOIN traits dt ON dt.id = d.trait_id"
    " WHERE d.resource_provider_id = rp.id AND dt.name = :disabled)"
)


def providers_with(session: Session, trait: str, *, include_disabled: bool = False) -> set[str]:
    """Names of the providers that carry ``trait`` (and, unless asked, are not disabled),
    read in the caller's transaction."""
    sql = _WITH_TRAIT if include_disabled else _WITH_TRAIT + _NOT_DISABLED
    rows = session.execute(text(sql), {"trait": trait, "disabled": COMPUTE_STATUS_DISABLED})
    return set(rows.scalars())


def get_traits(db: Database, provider_name: str) -> set[str]:
    with db.reader() as session:
        provider = lookup_provider(session, provider_name)
        return set(
            session.execute(
                text(
                    "SELECT t.name FROM traits t JOIN resource_provider_traits rpt ON rpt.trait_id = t.id "
                    "WHERE rpt.resource_provider_id = :id"
                ),
                {"id": provider.id},
            ).scalars()
        )


_OF_PROVIDERS = text(
    "SELECT rpt.resource_provider_id, t.name FROM traits t "
    "JOIN resource_provider_traits rpt ON rpt.trait_id = t.id WHERE rpt.resource_provider_id IN :ids"
).bindparams(bindparam("ids", expanding=True))


def traits_of(session: Session, provider_ids: Iterable[int]) -> dict[int, list[str]]:
    """The traits of each of ``provider_ids`` (sorted; a provider with none is absent)."""
    ids = list(provider_ids)
    found: dict[int, list[str]] = {}
    if ids:
        for provider_id, name in session.execute(_OF_PROVIDERS, {"ids": ids}):
            found.setdefault(provider_id, []).append(name)
    return {k: sorted(v) for k, v in found.items()}


def provider_traits(db: Database, ctx: RequestContext, uuid: str) -> tuple[ProviderView, list[str]]:
    """The provider of ``uuid`` and its traits (Placement's GET /resource_providers/{uuid}/traits)."""
    policy.authorize(ctx, "placement:read")
    with db.reader() as session:
        provider = provider_by_uuid(session, uuid)
        return provider, traits_of(session, [provider.id]).get(provider.id, [])


def list_traits(
    db: Database,
    ctx: RequestContext,
    *,
    names: Iterable[str] | None = None,
    prefix: str | None = None,
    associated: bool | None = None,
) -> list[str]:
    """The traits placement knows, sorted: only ``names`` (those that exist), only those starting
    with ``prefix``, only those some provider has (``associated``) or none has (False)."""
    policy.authorize(ctx, "placement:read")
    sql = "SELECT t.name FROM traits t WHERE 1 = 1"
    params: dict[str, object] = {}
    wanted = list(names) if names is not None else None
    if wanted is not None:
        sql += " AND t.name IN :names"
        params["names"] = wanted or [""]
    if prefix is not None:
        # a LIKE pattern would read _ as a wildcard, and trait names are full of _
        sql += " AND SUBSTR(t.name, 1, :n) = :prefix"
        params.update(n=len(prefix), prefix=prefix)
    if associated is not None:
        held = "EXISTS (SELECT 1 FROM resource_provider_traits r WHERE r.trait_id = t.id)"
        sql += f" AND {'' if associated else 'NOT '}{held}"
    statement = text(sql + " ORDER BY t.name")
    if wanted is not None:
        statement = statement.bindparams(bindparam("names", expanding=True))
    with db.reader() as session:
        return list(session.execute(statement, params).scalars())


def _change_traits(db: Database, provider_name: str, add: set[str], remove: set[str], replace: bool) -> None:
    for name in add | remove:
        validate_trait(name)

    def _write(session: Session) -> bool | None:
        provider = lookup_provider(session, provider_name)
        ids = ensure_traits(session, add) if add else {}
        if replace:
            session.execute(
                text("DELETE FROM resource_provider_traits WHERE resource_provider_id = :id"),
                {"id": provider.id},
            )
        elif remove:
            removed = trait_ids(session, remove)
            if removed:
                session.execute(
                    text(
                        "DELETE FROM resource_provider_traits WHERE resource_provider_id = :id "
                        "AND trait_id IN :t"
                    ).bindparams(bindparam("t", expanding=True)),
                    {"id": provider.id, "t": list(removed.values())},
                )
        have = set(
            session.execute(
                text("SELECT trait_id FROM resource_provider_traits WHERE resource_provider_id = :id"),
                {"id": provider.id},
            ).scalars()
        )
        for trait_id in set(ids.values()) - have:
            session.execute(
                text("INSERT INTO resource_provider_traits (resource_provider_id, trait_id) VALUES (:p, :t)"),
                {"p": provider.id, "t": trait_id},
            )
        return True if bump_generation(session, provider.id, provider.generation) else None

    retry_on_conflict(db, _write, what=f"traits of provider {provider_name}")


def set_traits(db: Database, provider_name: str, traits: Iterable[str]) -> None:
    """Replace the provider's traits (Placement's PUT /traits); bumps the generation."""
    _change_traits(db, provider_name, set(traits), set(), replace=True)


def add_traits(db: Database, provider_name: str, traits: Iterable[str]) -> None:
    _change_traits(db, provider_name, set(traits), set(), replace=False)


def remove_traits(db: Database, provider_name: str, traits: Iterable[str]) -> None:
    _change_traits(db, provider_name, set(), set(traits), replace=False)


def set_provider_disabled(db: Database, provider_name: str, disabled: bool) -> None:
    """Mirror ``services.disabled`` as the COMPUTE_STATUS_DISABLED trait (Nova's compute_status_filter)."""
    if disabled:
        add_traits(db, provider_name, [COMPUTE_STATUS_DISABLED])
    else:
        remove_traits(db, provider_name, [COMPUTE_STATUS_DISABLED])
