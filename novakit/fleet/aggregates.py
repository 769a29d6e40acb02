"""Host aggregates and availability zones, as Nova's ``os-aggregates`` and ``os-availability-zone``.

An aggregate is a named group of hosts with metadata (``aggregate_instance_extra_specs:``
in a flavor matches it: ``AggregateInstanceExtraSpecsFilter``); one with an
``availability_zone`` makes its hosts that zone. A host may be in several aggregates
but in one zone only (Nova's rule); a host in no zone aggregate is in the default zone
(``scheduler.default_availability_zone``). Changing a zone moves no server: a server
keeps the zone it was placed in (``record`` of the conductor's build).

One store. The aggregates are placement's (``placement_aggregates`` and
``resource_provider_aggregates``, see ``novakit.placement.aggregates``): the scheduler's
``member_of`` and zones read the very rows written here, in the transaction that writes
them, so there is nothing to mirror and nothing to drift.

Concurrency. Every write that can change which zone a host is in (adding or removing a
host, changing an aggregate's zone) first locks the aggregate's row, then swaps the
generation of each host's resource provider (as Placement bumps it when a provider's
aggregates change), and only then reads the host's other zones. Two processes adding
one host to two zone aggregates at once therefore cannot both pass the check: the
second swap fails on the first one's write, its transaction is retried, and the retry
reads the first one's host and refuses. On SQLite the writers are serialised anyway.

Admin only, each operation by its rule in ``novakit.policy`` (``aggregate:*``); anyone
may list the zones (Nova lets anyone), their hosts only an admin.
"""

from __future__ import annotations

import random
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import bindparam, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import PlacementAggregate, Service, utcnow
from novakit.placement import aggregates as store
from novakit.placement.allocations import retry_on_conflict
from novakit.placement.inventories import bump_generation
from novakit.placement.providers import find_provider

#: Nova's limits on aggregate names and metadata (its API schema)
MAX_LENGTH = 255

T = TypeVar("T")


# --- checks ------------------------------------------------------------------------------


def _check_text(value: Any, field: str, *, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise exceptions.ValidationError(field, f"must be a string, got {type(value).__name__}")
    if not empty and not value.strip():
        raise exceptions.ValidationError(field, "must not be empty")
    if len(value) > MAX_LENGTH:
        raise exceptions.ValidationError(field, f"must be at most {MAX_LENGTH} characters, got {len(value)}")
    if not value.isprintable():
        raise exceptions.ValidationError(field, f"must not contain control characters, got {value!r}")
    return value


def _check_metadata(metadata: Mapping[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        _check_text(key, "metadata key")
        out[key] = _check_text(
            str(value) if isinstance(value, int | float) else value, f"metadata {key}", empty=True
        )
    return out


# --- reading -------------------------------------------------------------------------------


def _hosts_of(session: Session, aggregate_ids: list[int]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {i: [] for i in aggregate_ids}
    if not aggregate_ids:
        return out
    rows = session.execute(
        text(
            "SELECT rpa.aggregate_id, rp.name FROM resource_provider_aggregates rpa "
            "JOIN resource_providers rp ON rp.id = rpa.resource_provider_id "
            "WHERE rpa.aggregate_id IN :ids ORDER BY rp.name"
        ).bindparams(bindparam("ids", expanding=True)),
        {"ids": aggregate_ids},
    )
    for agg_id, host in rows:
        out[agg_id].append(host)
    return out


def _view(session: Session, agg: store.AggregateView) -> dict[str, Any]:
    return {
        "id": agg.id,
        "uuid": agg.uuid,
        "name": agg.name,
        "availability_zone": agg.availability_zone,
        "metadata": {k: str(v) for k, v in agg.metadata.items()},
        "hosts": _hosts_of(session, [agg.id])[agg.id],
    }


def _find(session: Session, ref: str | int, *, lock: bool = False) -> store.AggregateView:
    """The aggregate by name, uuid or id; NotFound names ``ref``. ``lock``: its row is held
    (PostgreSQL) until the transaction ends, so writes to one aggregate take turns."""
    key = str(ref)
    match = (PlacementAggregate.name == key) | (PlacementAggregate.uuid == key)
    if key.isdigit():
        match = match | (PlacementAggregate.id == int(key))
    stmt = select(PlacementAggregate.id, PlacementAggregate.name, PlacementAggregate.uuid).where(match)
    if lock:
        stmt = stmt.with_for_update()
    rows = session.execute(stmt).all()
    if not rows:
        raise exceptions.NotFound(f"Aggregate {key} could not be found.")
    # A name or uuid wins over an id that happens to be written the same way.
    chosen = next((r for r in rows if key in (r.name, r.uuid)), rows[0])
    found = store.aggregate_by_id(session, chosen.id)
    assert found is not None
    return found


def list_aggregates(db: Database, ctx: RequestContext) -> list[dict[str, Any]]:
    policy.authorize(ctx, "aggregate:list")
    with db.reader() as session:
        rows = store.all_aggregates(session)
        hosts = _hosts_of(session, [a.id for a in rows])
    return [
        {
            "id": a.id,
            "uuid": a.uuid,
            "name": a.name,
            "availability_zone": a.availability_zone,
            "metadata": {k: str(v) for k, v in a.metadata.items()},
            "hosts": hosts[a.id],
        }
        for a in rows
    ]


def show(db: Database, ctx: RequestContext, ref: str | int) -> dict[str, Any]:
    policy.authorize(ctx, "aggregate:list")
    with db.reader() as session:
        return _view(session, _find(session, ref))


# --- the zone rule -------------------------------------------------------------------------


def _lock_host(session: Session, host: str) -> int | None:
    """Swap the host's provider generation (the lock every zone-changing write takes); its id,
    or None when another write got there first (the caller's transaction is retried)."""
    provider = find_provider(session, host)
    if provider is None:
        raise exceptions.NotFound(f"Compute host {host} could not be found.")
    return provider.id if bump_generation(session, provider.id, provider.generation) else None


def _other_zones(session: Session, provider_id: int, aggregate_id: int) -> set[str]:
    """The zones the host is in through aggregates other than ``aggregate_id``."""
    return set(
        session.execute(
            text(
                "SELECT pa.availability_zone FROM placement_aggregates pa "
                "JOIN resource_provider_aggregates rpa ON rpa.aggregate_id = pa.id "
                "WHERE rpa.resource_provider_id = :p AND pa.id != :a AND pa.availability_zone IS NOT NULL"
            ),
            {"p": provider_id, "a": aggregate_id},
        ).scalars()
    )


def _refuse_second_zone(host: str, zone: str, others: set[str], aggregate: str) -> None:
    others = others - {zone}
    if others:
        raise exceptions.Conflict(
            reason=f"host {host} is in availability zone {sorted(others)[0]}; it cannot also be in "
            f"{zone} (aggregate {aggregate}): a host is in one availability zone only"
        )


def _lock_hosts_into_zone(session: Session, agg: store.AggregateView, zone: str | None) -> bool:
    """Lock each host of the aggregate whose zone becomes ``zone`` and refuse one that would be
    in a second zone; False when another write got to a host first (the caller retries)."""
    for host in _hosts_of(session, [agg.id])[agg.id]:
        provider_id = _lock_host(session, host)
        if provider_id is None:
            return False
        if zone is not None:
            _refuse_second_zone(host, zone, _other_zones(session, provider_id, agg.id), agg.name)
    return True


# --- writing -------------------------------------------------------------------------------


def _refuse_taken_name(session: Session, name: str) -> None:
    if session.execute(select(PlacementAggregate.id).where(PlacementAggregate.name == name)).first():
        raise exceptions.Conflict(reason=f"aggregate {name} already exists; names are unique")


def create(
    db: Database,
    ctx: RequestContext,
    name: str,
    *,
    availability_zone: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A new aggregate (with no hosts); a taken name is a conflict naming it."""
    policy.authorize(ctx, "aggregate:create")
    _check_text(name, "name")
    meta = _check_metadata(metadata)
    zone = meta.pop("availability_zone", None) if availability_zone is None else availability_zone
    if zone is not None:
        store.check_zone_name(zone)

    def _write(session: Session) -> dict[str, Any]:
        _refuse_taken_name(session, name)
        new = str(uuidlib.uuid4())
        session.add(PlacementAggregate(uuid=new, name=name, availability_zone=zone, aggregate_metadata=meta))
        session.flush()
        return _view(session, _find(session, new))

    try:
        return db.run_in_transaction(_write)
    except IntegrityError:
        # Created by another process between our check and our insert.
        raise exceptions.Conflict(reason=f"aggregate {name} already exists; names are unique") from None


def update(
    db: Database,
    ctx: RequestContext,
    ref: str | int,
    *,
    name: str | None = None,
    availability_zone: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    unset_metadata: tuple[str, ...] | list[str] = (),
    unset_zone: bool = False,
) -> dict[str, Any]:
    """Rename, set or unset the zone, merge metadata and remove keys; a zone that would put one
    of its hosts in a second zone is refused, and nothing is changed."""
    policy.authorize(ctx, "aggregate:update")
    if name is not None:
        _check_text(name, "name")
    meta = _check_metadata(metadata)
    if "availability_zone" in meta and availability_zone is None:
        availability_zone = meta.pop("availability_zone")
    meta.pop("availability_zone", None)
    unset = [_check_text(k, "metadata key") for k in unset_metadata]
    if "availability_zone" in unset:
        unset.remove("availability_zone")
        unset_zone = True
    if availability_zone is not None:
        if unset_zone:
            raise exceptions.ValidationError("availability_zone", "cannot be both set and unset")
        store.check_zone_name(availability_zone)

    def _write(session: Session) -> dict[str, Any] | None:
        agg = _find(session, ref, lock=True)
        values: dict[str, Any] = {}
        if name is not None and name != agg.name:
            _refuse_taken_name(session, name)
            values["name"] = name
        zone = None if unset_zone else (availability_zone or agg.availability_zone)
        if zone != agg.availability_zone:
            values["availability_zone"] = zone
            if not _lock_hosts_into_zone(session, agg, zone):
                return None
        if meta or unset:
            merged = {**agg.metadata, **meta}
            for key in unset:
                merged.pop(key, None)
            values["aggregate_metadata"] = merged
        if values:
            row = session.get(PlacementAggregate, agg.id)
            assert row is not None
            for key, value in values.items():
                setattr(row, key, value)
            session.flush()
        return _view(session, _find(session, agg.id))

    try:
        return retry_on_conflict(db, _write, what=f"aggregate {ref}")
    except IntegrityError:
        raise exceptions.Conflict(reason=f"aggregate {name} already exists; names are unique") from None


def delete(db: Database, ctx: RequestContext, ref: str | int) -> dict[str, Any]:
    """Delete an aggregate that holds no hosts (Nova refuses one that does, naming them)."""
    policy.authorize(ctx, "aggregate:delete")

    def _write(session: Session) -> dict[str, Any]:
        agg = _find(session, ref, lock=True)
        view = _view(session, agg)
        if view["hosts"]:
            raise exceptions.Conflict(
                reason=f"aggregate {agg.name} still holds hosts {', '.join(view['hosts'])}; remove them first"
            )
        session.execute(text("DELETE FROM placement_aggregates WHERE id = :i"), {"i": agg.id})
        return view

    return db.run_in_transaction(_write)


def _membership(
    db: Database,
    ctx: RequestContext,
    ref: str | int,
    host: str,
    change: Callable[[Session, store.AggregateView, int], None],
) -> dict[str, Any]:
    """Change ``host``'s membership of the aggregate, both locked first (see the module's
    docstring): its row, then its provider's generation; a lost swap retries the whole."""
    policy.authorize(ctx, "aggregate:host")
    _check_text(host, "host")

    def _write(session: Session) -> dict[str, Any] | None:
        agg = _find(session, ref, lock=True)
        provider_id = _lock_host(session, host)
        if provider_id is None:
            return None
        change(session, agg, provider_id)
        return _view(session, agg)

    return retry_on_conflict(db, _write, what=f"aggregates of host {host}")


def add_host(db: Database, ctx: RequestContext, ref: str | int, host: str) -> dict[str, Any]:
    """Put ``host`` into the aggregate (and so into its zone, if it has one). A host already in
    it is a conflict (Nova's 409); so is one in another zone, with Nova's reason."""

    def _add(session: Session, agg: store.AggregateView, provider_id: int) -> None:
        if host in _hosts_of(session, [agg.id])[agg.id]:
            raise exceptions.Conflict(reason=f"host {host} is already in aggregate {agg.name}")
        if agg.availability_zone:
            others = _other_zones(session, provider_id, agg.id)
            _refuse_second_zone(host, agg.availability_zone, others, agg.name)
        session.execute(
            text(
                "INSERT INTO resource_provider_aggregates (resource_provider_id, aggregate_id) "
                "VALUES (:p, :a)"
            ),
            {"p": provider_id, "a": agg.id},
        )

    return _membership(db, ctx, ref, host, _add)


def remove_host(db: Database, ctx: RequestContext, ref: str | int, host: str) -> dict[str, Any]:
    """Take ``host`` out of the aggregate; one not in it is a conflict (Nova's 409). Its servers
    stay where they are and keep the zone they were placed in."""

    def _remove(session: Session, agg: store.AggregateView, provider_id: int) -> None:
        gone = session.execute(
            text(
                "DELETE FROM resource_provider_aggregates "
                "WHERE resource_provider_id = :p AND aggregate_id = :a"
            ),
            {"p": provider_id, "a": agg.id},
        )
        if not gone.rowcount:  # type: ignore[attr-defined]
            raise exceptions.Conflict(reason=f"host {host} is not in aggregate {agg.name}")

    return _membership(db, ctx, ref, host, _remove)


# --- one task: an aggregate as it is wanted (the host_aggregate module) ----------------------


class _Discarded(Exception):
    """Ends a dry run's transaction so that it is rolled back."""


class _OneTransaction:
    """A ``Database`` whose every transaction (``reader``, ``writer``, ``run_in_transaction``) is a
    savepoint of one outer transaction: a later call sees what an earlier one wrote, a refused
    call undoes only its own part, and the outer transaction keeps or discards the whole."""

    def __init__(self, db: Database, session: Session) -> None:
        self._db = db
        self._session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    @contextmanager
    def writer(self) -> Iterator[Session]:
        with self._session.begin_nested():
            yield self._session

    reader = writer

    def run_in_transaction(self, fn: Callable[[Session], T], *, retries: int = 10) -> T:
        with self.writer() as session:
            return fn(session)


def in_one_transaction(db: Database, fn: Callable[[Any], T], *, keep: bool, retries: int = 10) -> T:
    """``fn(one)``, ``one`` being ``db`` with all its transactions in one (``_OneTransaction``),
    committed when ``keep``, else rolled back (a dry run: every check and refusal of the real
    calls, in their words, and nothing written).

    Its row locks are held until it ends, so two such transactions that take the same
    aggregates in another order may deadlock on PostgreSQL: the one that loses is run again, as
    ``Database.run_in_transaction`` runs a transaction again.
    """
    from sqlalchemy.exc import DBAPIError

    from novakit.db.engine import is_transient

    for attempt in range(retries + 1):
        try:
            with db.writer() as session:
                done = fn(_OneTransaction(db, session))
                if not keep:
                    raise _Discarded
                return done
        except _Discarded:
            return done
        except DBAPIError as exc:
            if attempt >= retries or not is_transient(exc):
                raise
            time.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
    raise AssertionError("unreachable")


def find(db: Database, ctx: RequestContext, ref: str | int) -> dict[str, Any] | None:
    """``show``, or None when there is no such aggregate."""
    try:
        return show(db, ctx, ref)
    except exceptions.NotFound:
        return None


def ensure(
    db: Database,
    ctx: RequestContext,
    name: str,
    *,
    availability_zone: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], bool]:
    """The aggregate called ``name`` and whether this call made it (with ``availability_zone``
    and ``metadata``). One that another task made at the same moment is found and returned."""
    current = find(db, ctx, name)
    if current is not None:
        return current, False
    try:
        return create(db, ctx, name, availability_zone=availability_zone, metadata=metadata), True
    except (exceptions.Conflict, IntegrityError):
        current = find(db, ctx, name)
        if current is None:
            raise
        return current, False


def holding(db: Database, ctx: RequestContext, aggregate: dict[str, Any], host: str) -> dict[str, Any]:
    """``aggregate`` with ``host`` in it: added unless it is (``add_host`` refuses a host
    already in, so that is looked at first, and again when another task added it meanwhile)."""
    if host in aggregate["hosts"]:
        return aggregate
    try:
        return add_host(db, ctx, aggregate["uuid"], host)
    except exceptions.Conflict:
        now = show(db, ctx, aggregate["uuid"])
        if host not in now["hosts"]:  # refused for a reason of its own (another zone): said as it is
            raise
        return now


def without(db: Database, ctx: RequestContext, aggregate: dict[str, Any], host: str) -> dict[str, Any]:
    """``aggregate`` with ``host`` out of it (``holding``'s other half)."""
    if host not in aggregate["hosts"]:
        return aggregate
    try:
        return remove_host(db, ctx, aggregate["uuid"], host)
    except exceptions.Conflict:
        now = show(db, ctx, aggregate["uuid"])
        if host in now["hosts"]:
            raise
        return now


def apply(
    db: Database,
    ctx: RequestContext,
    name: str,
    *,
    present: bool = True,
    availability_zone: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    hosts: Sequence[str] | None = None,
    purge_hosts: bool = True,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Make the aggregate ``name`` (or uuid, or id) as wanted: the host_aggregate module's task.

    ``present``: it exists with ``availability_zone`` and exactly ``metadata`` (keys not given
    removed) and ``hosts`` (with ``purge_hosts`` false, at least those); one left None is left
    as it is. Hosts leave before the zone or metadata change and join after, since a host
    leaving may be what keeps the zone from changing and a host joining may need the new zone.
    Not ``present``: its hosts are taken out, then it is deleted (``delete`` refuses one that
    holds hosts).

    The whole task is one transaction (``in_one_transaction``), made of the calls above, each
    deciding its own policy and refusals: one refused on its third step writes nothing of the
    first two, and ``dry_run`` runs every step and keeps none (check mode's true answer).

    Answers ``{"changed", "before", "after"}``, the aggregate's views (None: none). A dry run's
    new aggregate has no ``id`` nor ``uuid`` yet: those are made by the real run.
    """
    policy.authorize(ctx, "aggregate:list")
    wanted_metadata = None if metadata is None else _check_metadata(metadata)

    def hosts_after(now: Sequence[str]) -> list[str]:
        if hosts is None:
            return sorted(now)
        return sorted(set(hosts) if purge_hosts else set(now) | set(hosts))

    def changes(current: dict[str, Any]) -> dict[str, Any]:
        wanted: dict[str, Any] = {"availability_zone": availability_zone, "metadata": wanted_metadata}
        out = {k: v for k, v in wanted.items() if v is not None and current[k] != v}
        if hosts_after(current["hosts"]) != current["hosts"]:
            out["hosts"] = hosts_after(current["hosts"])
        return out

    def change(one: Database, current: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
        after = current
        for host in sorted(set(current["hosts"]) - set(asked.get("hosts", current["hosts"]))):
            after = without(one, ctx, after, host)
        if "availability_zone" in asked:
            after = update(one, ctx, current["uuid"], availability_zone=asked["availability_zone"])
        if "metadata" in asked:
            unset = tuple(sorted(set(current["metadata"]) - set(asked["metadata"])))
            after = update(one, ctx, current["uuid"], metadata=asked["metadata"], unset_metadata=unset)
        for host in sorted(set(asked.get("hosts", ())) - set(after["hosts"])):
            after = holding(one, ctx, after, host)
        return after

    def task(one: Database) -> dict[str, Any]:
        current = find(one, ctx, name)
        if not present:
            if current is not None:
                after = current
                for host in current["hosts"]:
                    after = without(one, ctx, after, host)
                delete(one, ctx, current["uuid"])
            return {"changed": current is not None, "before": current, "after": None}
        if current is None:
            made, created = ensure(
                one, ctx, name, availability_zone=availability_zone, metadata=wanted_metadata
            )
            if not created:  # another task made it a moment ago: made as this task wants
                made = change(one, made, changes(made))
            for host in hosts_after([]):
                made = holding(one, ctx, made, host)
            shown = {k: v for k, v in made.items() if k not in ("id", "uuid")} if dry_run else made
            return {"changed": True, "before": None, "after": shown}
        asked = changes(current)
        if not asked:
            return {"changed": False, "before": current, "after": current}
        return {"changed": True, "before": current, "after": change(one, current, asked)}

    return in_one_transaction(db, task, keep=not dry_run)


# --- zones ---------------------------------------------------------------------------------


def zone_of_host(session: Session, conf: Config, host: str) -> str:
    """The zone ``host`` is in now (the default zone when in no zone aggregate): what a server
    placed there records (``OS-EXT-AZ:availability_zone``)."""
    return store.zone_of_provider(session, host, conf.scheduler.default_availability_zone)


def with_zone(session: Session, conf: Config, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` of a server, with the zone of the host they put it on (``zone_of_host``): a server
    records the zone of the host it is on each time its host is written (a boot, every move, a
    revert, heal settling a move). A host moved between zones later changes no server's record."""
    if values.get("host"):
        values["availability_zone"] = zone_of_host(session, conf, str(values["host"]))
    return values


def list_zones(
    db: Database, ctx: RequestContext, conf: Config, *, long: bool = False
) -> list[dict[str, Any]]:
    """Every zone: ``{"zone", "available", "hosts"}`` (``hosts`` only with ``long``, an admin's).

    The zone aggregates' zones (one with no host is listed, not available), and the default zone
    when some host is in no zone. Available, as Nova's zone status: at least one of its hosts is
    enabled and up (``novakit.fleet.hosts.is_up``)."""
    from novakit.fleet import hosts as fleet_hosts

    if long:
        policy.authorize(ctx, "availability_zone:detail")
    default = conf.scheduler.default_availability_zone
    with db.reader() as session:
        members = session.execute(
            text(
                "SELECT pa.availability_zone, rp.name FROM placement_aggregates pa "
                "LEFT JOIN resource_provider_aggregates rpa ON rpa.aggregate_id = pa.id "
                "LEFT JOIN resource_providers rp ON rp.id = rpa.resource_provider_id "
                "WHERE pa.availability_zone IS NOT NULL"
            )
        ).all()
        loose = session.execute(
            text(
                "SELECT rp.name FROM resource_providers rp WHERE NOT EXISTS (SELECT 1 "
                "FROM resource_provider_aggregates rpa "
                "JOIN placement_aggregates pa ON pa.id = rpa.aggregate_id "
                "WHERE rpa.resource_provider_id = rp.id AND pa.availability_zone IS NOT NULL)"
            )
        ).scalars()
        zones: dict[str, set[str]] = {}
        for zone, host in members:
            zones.setdefault(zone, set()).update([host] if host else [])
        for host in loose:
            zones.setdefault(default, set()).add(host)
        services = {
            s.host: s
            for s in session.execute(
                select(Service).where(Service.deleted == 0, Service.binary == fleet_hosts.BINARY)
            ).scalars()
        }
    now = utcnow()
    serving = {h for h, s in services.items() if not s.disabled and fleet_hosts.is_up(s, conf, now)}
    out = []
    for zone in sorted(zones):
        entry: dict[str, Any] = {"zone": zone, "available": bool(zones[zone] & serving)}
        if long:
            entry["hosts"] = sorted(zones[zone])
        out.append(entry)
    return out


def zones_without_enabled_host(db: Database, conf: Config) -> list[str]:
    """The zones no server can be placed in now: none of their hosts is enabled and up (heal
    and ``host heartbeat`` say so, ``availability zone list`` shows them not available)."""
    return [z["zone"] for z in list_zones(db, RequestContext.admin(), conf) if not z["available"]]
