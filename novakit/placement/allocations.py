"""Allocations: what each consumer (an instance) holds on which provider, and the claims that write them.

A claim is safe without any table lock because of one rule: every write that
changes a provider's allocations or inventory first swaps its generation with a
compare-and-swap UPDATE. The claim reads the generation, inventory and usage in
*one* statement (one snapshot on PostgreSQL), checks capacity, then swaps the
generation before writing a row. If the swap matches no row somebody else got
there first: nothing was written, we re-read and try again, a bounded number of
times with jitter. Once the swap succeeded this transaction holds the provider's
row lock until commit, so what it checked stays true. On SQLite the writer
transaction is BEGIN IMMEDIATE and the swap never loses, except when a test
injects a conflict.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import utcnow
from novakit.placement.inventories import bump_generation, validate_resource_class
from novakit.placement.providers import ProviderView, find_provider, lookup_provider, provider_by_uuid

T = TypeVar("T")

DEFAULT_RETRIES = 10

# Tests set this to force generation conflicts: called with (session, provider_id)
# between the read and the compare-and-swap of every claim attempt.
conflict_injector: Callable[[Session, int], None] | None = None


class _LostRace(Exception):
    """Internal: roll the transaction back and try again."""


def retry_on_conflict(
    db: Database, fn: Callable[[Session], T | None], *, what: str, retries: int = DEFAULT_RETRIES
) -> T:
    """Run ``fn`` in a writer transaction; ``None`` from it means 'lost a race', so roll back and retry."""

    def _attempt(session: Session) -> T:
        result = fn(session)
        if result is None:
            raise _LostRace
        return result

    for attempt in range(retries + 1):
        try:
            return db.run_in_transaction(_attempt)
        except _LostRace:
            time.sleep(random.uniform(0.001, 0.01) * (attempt + 1))
    raise exceptions.ConcurrentUpdateDetected(attempts=retries + 1, what=what)


def validate_resources(resources: dict[str, int]) -> None:
    """Amounts are positive integers of known classes: the claim must not be able to free capacity."""
    if not resources:
        raise exceptions.ValidationError("resources", "at least one resource class is required")
    for rc, amount in resources.items():
        validate_resource_class(rc)
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
            raise exceptions.ValidationError(f"resources.{rc}", f"must be a positive integer, got {amount!r}")


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    claimed: bool
    reason: str = ""  # why it does not fit, when it does not


# ``used`` is the trigger-maintained SUM(allocations.used) of the provider and class (migration 0003);
# the consumer's own allocations there are subtracted because a claim replaces them. The last column
# says whether the consumer holds anything anywhere: a claim that replaces nothing (every first
# claim of a build) reads and deletes nothing more.
_STATE = text(
    "SELECT rp.generation, i.resource_class, i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, "
    "i.allocation_ratio, i.used - COALESCE((SELECT SUM(a.used) FROM allocations a "
    "  WHERE a.consumer_id = :consumer AND a.resource_provider_id = rp.id "
    "  AND a.resource_class = i.resource_class), 0), "
    "EXISTS (SELECT 1 FROM allocations h WHERE h.consumer_id = :consumer) "
    "FROM resource_providers rp LEFT JOIN inventories i ON i.resource_provider_id = rp.id "
    "WHERE rp.id = :id"
)
_HELD = text("SELECT DISTINCT resource_provider_id FROM allocations WHERE consumer_id = :consumer")
_DELETE_CONSUMER = text("DELETE FROM allocations WHERE consumer_id = :consumer")
_INSERT = text(
    "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class, used, project_id, user_id, "
    "created_at) VALUES (:id, :consumer, :rc, :used, :project, :user, :now)"
)
_TOUCH = text(
    "UPDATE resource_providers SET generation = generation + 1, updated_at = :now WHERE id IN :ids"
).bindparams(bindparam("ids", expanding=True))


def why_not_fits(resources: dict[str, int], rows: Sequence[Any]) -> str:
    """Empty when ``resources`` fit the (generation, class, total, reserved, min, max, step, ratio, used,
    ...) rows."""
    inv = {r[1]: r for r in rows if r[1] is not None}
    for rc, amount in resources.items():
        if rc not in inv:
            return f"has no {rc} inventory"
        _, _, total, reserved, min_unit, max_unit, step, ratio, used, *_ = inv[rc]
        if amount < min_unit or amount > max_unit:
            return f"{rc} {amount} outside min_unit {min_unit} .. max_unit {max_unit}"
        if amount % step:
            return f"{rc} {amount} is not a multiple of step_size {step}"
        capacity = int((total - reserved) * ratio)
        if used + amount > capacity:
            return f"{rc} needs {amount}, free {max(capacity - used, 0)} of capacity {capacity}"
    return ""


def why_not_claimable(
    session: Session, consumer_uuid: str, provider_id: int, resources: dict[str, int]
) -> str:
    """Why a claim of ``resources`` on the provider would not fit now; empty if it would.

    The claim's own check, read without claiming: what a dry run reports.
    """
    rows = session.execute(_STATE, {"consumer": consumer_uuid, "id": provider_id}).all()
    if not rows:
        return "provider no longer exists"
    return why_not_fits(resources, rows)


_TRY_LOCK = text("SELECT id FROM resource_providers WHERE id = :id FOR NO KEY UPDATE SKIP LOCKED")


def try_lock_provider(session: Session, provider_id: int) -> bool:
    """PostgreSQL: lock the provider's row unless another transaction holds it; False if one does.

    Lets a batch claim pass over a host that a concurrent claim is writing to
    and take an alternate, instead of queueing behind it and then losing the
    compare-and-swap to it (a convoy when every scheduler picked the same best
    host). Our own transaction's locks never block us. On SQLite the write lock
    is already exclusive: always True.
    """
    if session.get_bind().dialect.name != "postgresql":
        return True
    return session.execute(_TRY_LOCK, {"id": provider_id}).first() is not None


def claim_in_session(
    session: Session,
    consumer_uuid: str,
    provider_id: int,
    resources: dict[str, int],
    project_id: str,
    user_id: str,
    *,
    retries: int = DEFAULT_RETRIES,
) -> ClaimOutcome:
    """Claim inside the caller's transaction; replaces any allocations the consumer held.

    Raises ConcurrentUpdateDetected when the provider's generation keeps moving
    under us ``retries`` times in a row.
    """
    params = {"consumer": consumer_uuid, "id": provider_id}
    for attempt in range(retries + 1):
        rows = session.execute(_STATE, params).all()
        if not rows:
            return ClaimOutcome(False, "provider no longer exists")
        reason = why_not_fits(resources, rows)
        if reason:
            return ClaimOutcome(False, reason)
        if conflict_injector is not None:
            conflict_injector(session, provider_id)
        if bump_generation(session, provider_id, rows[0][0]):
            break
        if attempt < retries:
            time.sleep(random.uniform(0.0005, 0.005) * (attempt + 1))
    else:
        raise exceptions.ConcurrentUpdateDetected(
            attempts=retries + 1, what=f"the generation of resource provider {provider_id}"
        )
    _replace_held(session, consumer_uuid, {provider_id: resources}, bool(rows[0][9]), project_id, user_id)
    return ClaimOutcome(True)


def _replace_held(
    session: Session,
    consumer_uuid: str,
    claimed: dict[int, dict[str, int]],
    holds_any: bool,
    project_id: str | None,
    user_id: str | None,
) -> None:
    """Write ``claimed`` ({provider id: resources}, whose generations the caller swapped) as all
    the consumer holds, replacing what it held (``holds_any``: whether it held anything)."""
    # Replacing a claim elsewhere frees capacity there: bump those providers too so
    # that a reader's generation tells it allocations changed (freeing cannot over-commit).
    # Providers are locked before their allocation rows are deleted (and the triggers touch
    # their inventories), the order every claim uses, so two transactions cannot deadlock on it.
    held = list(session.execute(_HELD, {"consumer": consumer_uuid}).scalars()) if holds_any else []
    now = utcnow()
    others = [rp for rp in held if rp not in claimed]
    if others:
        session.execute(_TOUCH, {"ids": others, "now": now})
    if held:
        session.execute(_DELETE_CONSUMER, {"consumer": consumer_uuid})
    session.execute(
        _INSERT,
        [
            {
                "id": provider_id,
                "consumer": consumer_uuid,
                "rc": rc,
                "used": amount,
                "project": project_id,
                "user": user_id,
                "now": now,
            }
            for provider_id, resources in claimed.items()
            for rc, amount in resources.items()
        ],
    )


def claim_resources(
    db: Database,
    consumer_uuid: str,
    provider_uuid: str,
    resources: dict[str, int],
    project_id: str,
    user_id: str,
    *,
    retries: int = DEFAULT_RETRIES,
) -> bool:
    """Claim ``resources`` on one provider for one consumer, atomically (Nova's PUT /allocations).

    True if claimed; False if it no longer fits (the conductor then tries the next
    alternate). A consumer that already holds allocations has them replaced.
    """
    validate_resources(resources)

    def _claim(session: Session) -> bool:
        provider = lookup_provider(session, provider_uuid)
        outcome = claim_in_session(
            session, consumer_uuid, provider.id, resources, project_id, user_id, retries=retries
        )
        return outcome.claimed

    return db.run_in_transaction(_claim)


def remove_allocations_in_session(session: Session, consumer_uuid: str) -> int:
    params = {"consumer": consumer_uuid}
    providers = list(session.execute(_HELD, params).scalars())
    if not providers:
        return 0
    session.execute(_TOUCH, {"ids": providers, "now": utcnow()})
    return session.execute(_DELETE_CONSUMER, params).rowcount  # type: ignore[attr-defined]


_MOVE = text("UPDATE allocations SET consumer_id = :to, updated_at = :now WHERE consumer_id = :consumer")


def move_allocations_in_session(session: Session, from_consumer: str, to_consumer: str) -> int:
    """Hand everything ``from_consumer`` holds to ``to_consumer`` (placement's move of allocations,
    as Nova's conductor uses it to let a migration hold the source host's claim during a move).

    The same providers, classes and amounts change hands, so no capacity is checked and usage
    does not change; the providers' generations are bumped, as every change of allocations
    does, so that a reader's generation tells it. ``to_consumer`` must hold nothing (a move
    never merges two claims). Returns the number of rows moved.
    """
    if session.execute(_HELD, {"consumer": to_consumer}).first() is not None:
        raise exceptions.Conflict(reason=f"consumer {to_consumer} already holds allocations")
    providers = list(session.execute(_HELD, {"consumer": from_consumer}).scalars())
    if not providers:
        return 0
    now = utcnow()
    session.execute(_TOUCH, {"ids": providers, "now": now})
    moved = session.execute(_MOVE, {"to": to_consumer, "consumer": from_consumer, "now": now})
    return int(moved.rowcount)  # type: ignore[attr-defined]


def remove_allocations(db: Database, consumer_uuid: str) -> int:
    """Release everything the consumer holds; idempotent, returns the number of rows removed."""
    return db.run_in_transaction(lambda session: remove_allocations_in_session(session, consumer_uuid))


def get_allocations_for_consumer(db: Database, consumer_uuid: str) -> dict[str, dict[str, int]]:
    """``{provider_uuid: {resource_class: amount}}``; empty when the consumer holds nothing."""
    out: dict[str, dict[str, int]] = {}
    with db.reader() as session:
        rows = session.execute(
            text(
                "SELECT rp.uuid, a.resource_class, a.used FROM allocations a "
                "JOIN resource_providers rp ON rp.id = a.resource_provider_id WHERE a.consumer_id = :c"
            ),
            {"c": consumer_uuid},
        )
        for rp_uuid, rc, used in rows:
            out.setdefault(rp_uuid, {})[rc] = used
    return out


def get_usages(db: Database, provider_name: str) -> dict[str, int]:
    """``{resource_class: used}`` for every class the provider has inventory or allocations of."""
    with db.reader() as session:
        return _usage_of(session, lookup_provider(session, provider_name).id)


def _usage_of(session: Session, provider_id: int) -> dict[str, int]:
    """``{resource_class: used}``: 0 for each class of the provider's inventory, the sum of its
    allocations for each class allocated."""
    usage = dict.fromkeys(
        session.execute(
            text("SELECT resource_class FROM inventories WHERE resource_provider_id = :id"),
            {"id": provider_id},
        ).scalars(),
        0,
    )
    for rc, used in session.execute(
        text(
            "SELECT resource_class, SUM(used) FROM allocations WHERE resource_provider_id = :id "
            "GROUP BY resource_class"
        ),
        {"id": provider_id},
    ):
        usage[rc] = int(used)
    return usage


# ---------------------------------------------------------------- the Placement API's operations


@dataclass(frozen=True)
class ConsumerAllocations:
    """What one consumer holds: ``{provider uuid: (its generation, {class: amount})}``, and whose."""

    allocations: dict[str, tuple[int, dict[str, int]]]
    project_id: str | None = None
    user_id: str | None = None


def show_consumer(db: Database, ctx: RequestContext, consumer_uuid: str) -> ConsumerAllocations:
    """The consumer's allocations (Placement's GET /allocations/{consumer_uuid}): empty when it
    holds none, as Placement answers for a consumer it does not know."""
    policy.authorize(ctx, "placement:read")
    found: dict[str, tuple[int, dict[str, int]]] = {}
    project = user = None
    with db.reader() as session:
        rows = session.execute(
            text(
                "SELECT rp.uuid, rp.generation, a.resource_class, a.used, a.project_id, a.user_id "
                "FROM allocations a JOIN resource_providers rp ON rp.id = a.resource_provider_id "
                "WHERE a.consumer_id = :c ORDER BY rp.uuid, a.resource_class"
            ),
            {"c": consumer_uuid},
        )
        for rp_uuid, generation, rc, used, project_id, user_id in rows:
            found.setdefault(rp_uuid, (generation, {}))[1][rc] = used
            project, user = project or project_id, user or user_id
    return ConsumerAllocations(found, project, user)


def set_allocations(
    db: Database,
    ctx: RequestContext,
    consumer_uuid: str,
    wanted: dict[str, dict[str, int]],
    project_id: str | None,
    user_id: str | None,
) -> None:
    """Make ``wanted`` ({provider uuid: {class: amount}}) all the consumer holds, atomically
    (Placement's PUT /allocations/{consumer_uuid}): every provider's capacity checked and its
    generation swapped, or nothing written. A provider that does not exist is the request's
    error (ValidationError, 400); one the amounts do not fit now is AllocationNotFits (409)."""
    policy.authorize(ctx, "placement:allocations:update")
    if not wanted:
        raise exceptions.ValidationError("allocations", "must name at least one resource provider")
    for resources in wanted.values():
        validate_resources(resources)

    def _replace(session: Session) -> bool | None:
        providers = {}
        for rp_uuid in wanted:
            provider = find_provider(session, rp_uuid)
            if provider is None or provider.uuid != rp_uuid:
                raise exceptions.ValidationError(
                    "allocations", f"names resource provider {rp_uuid}, which does not exist"
                )
            providers[provider.id] = (provider.uuid, wanted[rp_uuid])
        holds_any = False
        # Providers in id order, the order that keeps two such writes from deadlocking.
        for provider_id in sorted(providers):
            rp_uuid, resources = providers[provider_id]
            rows = session.execute(_STATE, {"consumer": consumer_uuid, "id": provider_id}).all()
            reason = why_not_fits(resources, rows)
            if reason:
                raise exceptions.AllocationNotFits(provider=rp_uuid, reason=reason)
            holds_any = holds_any or bool(rows[0][9])
            if not bump_generation(session, provider_id, rows[0][0]):
                return None  # another write got there first: roll back and read again
        claimed = {provider_id: resources for provider_id, (_, resources) in providers.items()}
        _replace_held(session, consumer_uuid, claimed, holds_any, project_id, user_id)
        return True

    retry_on_conflict(db, _replace, what=f"the allocations of consumer {consumer_uuid}")


def delete_consumer_allocations(db: Database, ctx: RequestContext, consumer_uuid: str) -> None:
    """Release everything the consumer holds (Placement's DELETE /allocations/{consumer_uuid});
    ConsumerAllocationsNotFound (404) when it holds nothing."""
    policy.authorize(ctx, "placement:allocations:update")
    if not remove_allocations(db, consumer_uuid):
        raise exceptions.ConsumerAllocationsNotFound(consumer=consumer_uuid)


def provider_usages(db: Database, ctx: RequestContext, uuid: str) -> tuple[ProviderView, dict[str, int]]:
    """The provider of ``uuid`` and what is used of each class it has inventory of (read together)."""
    policy.authorize(ctx, "placement:read")
    with db.reader() as session:
        provider = provider_by_uuid(session, uuid)
        return provider, _usage_of(session, provider.id)


def project_usages(
    db: Database, ctx: RequestContext, project_id: str, user_id: str | None = None
) -> dict[str, int]:
    """What the allocations of ``project_id`` (and of ``user_id`` in it) use, by class
    (Placement's GET /usages)."""
    policy.authorize(ctx, "placement:read")
    sql = "SELECT resource_class, SUM(used) FROM allocations WHERE project_id = :p"
    params = {"p": project_id}
    if user_id is not None:
        sql += " AND user_id = :u"
        params["u"] = user_id
    with db.reader() as session:
        return {rc: int(used) for rc, used in session.execute(text(sql + " GROUP BY resource_class"), params)}
