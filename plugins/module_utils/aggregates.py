"""Host aggregates, availability zones and custom traits as the ``host_aggregate`` and
``compute_node`` modules want them, over the library (``novakit.fleet.aggregates``,
``novakit.fleet.hosts``), which owns every rule: names, the one zone a host may be in, which
traits a host may be given.

Check mode runs the real calls in one database transaction that is rolled back at the end
(``dry_run``): every check and refusal of a real run, in the same words, and nothing written.

Many hosts may apply their inventory variables at once (``place_host``): each one touches only
its own membership and its own traits, and an aggregate another host made a moment earlier is
found and used, not made twice.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


class _Discarded(Exception):
    """Ends a dry run's transaction so that it is rolled back."""


class _OneTransaction:
    """The library's ``Database`` as a dry run lends it: each of the library's transactions
    (``reader``, ``writer``, ``run_in_transaction``) is a savepoint inside one outer transaction,
    so that a later call sees what an earlier one would have written, and a refused call undoes
    only its own part."""

    def __init__(self, db: Any, session: Any) -> None:
        self._db = db
        self._session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    @contextmanager
    def writer(self) -> Iterator[Any]:
        with self._session.begin_nested():
            yield self._session

    reader = writer

    def run_in_transaction(self, fn: Any, *, retries: int = 10) -> Any:
        with self.writer() as session:
            return fn(session)


@contextmanager
def rolled_back(db: Any) -> Iterator[Any]:
    """``db`` for a dry run: the library's calls made through it are real, and none is kept."""
    try:
        with db.writer() as session:
            yield _OneTransaction(db, session)
            raise _Discarded
    except _Discarded:
        pass


def dry_run(db: Any, fn: Callable[[Any], T], *, retries: int = 10) -> T:
    """``fn(dry)``, ``dry`` being ``db`` in one transaction that is rolled back (``rolled_back``).

    Its row locks are held until it ends, so two dry runs that take the same aggregates in
    another order may deadlock on PostgreSQL: the one that loses is run again, as the library
    runs a transaction again (``Database.run_in_transaction``).
    """
    from sqlalchemy.exc import DBAPIError

    from novakit.db.engine import is_transient

    for attempt in range(retries + 1):
        try:
            with rolled_back(db) as dry:
                return fn(dry)
        except DBAPIError as exc:
            if attempt >= retries or not is_transient(exc):
                raise
            time.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
    raise AssertionError("unreachable")


def find(db: Any, ctx: Any, ref: str) -> dict[str, Any] | None:
    """The aggregate named (or with the uuid or id) ``ref``, or None."""
    from novakit import exceptions
    from novakit.fleet import aggregates

    try:
        return aggregates.show(db, ctx, ref)
    except exceptions.NotFound:
        return None


def ensure(
    db: Any,
    ctx: Any,
    name: str,
    *,
    availability_zone: str | None = None,
    metadata: dict[str, str] | None = None,
) -> tuple[dict[str, Any], bool]:
    """The aggregate called ``name`` and whether this call made it (with ``availability_zone``
    and ``metadata``). One that another task made at the same moment is found and returned."""
    from sqlalchemy.exc import IntegrityError

    from novakit import exceptions
    from novakit.fleet import aggregates

    current = find(db, ctx, name)
    if current is not None:
        return current, False
    try:
        return aggregates.create(db, ctx, name, availability_zone=availability_zone, metadata=metadata), True
    except (exceptions.Conflict, IntegrityError):
        current = find(db, ctx, name)
        if current is None:
            raise
        return current, False


def add_host(db: Any, ctx: Any, aggregate: dict[str, Any], host: str) -> dict[str, Any]:
    """``host`` in ``aggregate`` (the library refuses one already in: checked first)."""
    from novakit import exceptions
    from novakit.fleet import aggregates

    if host in aggregate["hosts"]:
        return aggregate
    try:
        return aggregates.add_host(db, ctx, aggregate["uuid"], host)
    except exceptions.Conflict:
        now = aggregates.show(db, ctx, aggregate["uuid"])
        if host not in now["hosts"]:  # refused for a reason of its own (another zone): say it
            raise
        return now


def remove_host(db: Any, ctx: Any, aggregate: dict[str, Any], host: str) -> dict[str, Any]:
    """``host`` out of ``aggregate`` (the library refuses one not in it: checked first)."""
    from novakit import exceptions
    from novakit.fleet import aggregates

    if host not in aggregate["hosts"]:
        return aggregate
    try:
        return aggregates.remove_host(db, ctx, aggregate["uuid"], host)
    except exceptions.Conflict:
        now = aggregates.show(db, ctx, aggregate["uuid"])
        if host in now["hosts"]:
            raise
        return now


def aggregate_entries(given: list[Any]) -> list[dict[str, Any]]:
    """The ``aggregates`` option's items (a name, or ``{name, metadata}``) as ``{name, metadata}``."""
    from novakit import exceptions

    out = []
    for i, item in enumerate(given):
        if isinstance(item, str):
            item = {"name": item}
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or set(item) - {"name", "metadata"}
            or not isinstance(item.get("metadata", {}), dict)
        ):
            raise exceptions.ValidationError(
                f"aggregates[{i}]",
                f"must be an aggregate's name or a dict of name and metadata, got {item!r}",
            )
        metadata = {str(k): str(v) for k, v in (item.get("metadata") or {}).items()}
        out.append({"name": item["name"], "metadata": metadata})
    return out


def host_place(db: Any, ctx: Any, host: str, asked: dict[str, Any]) -> dict[str, Any]:
    """Where ``host`` is now, for the keys of ``asked``: its zone, its aggregates (those of its
    zone too), its custom traits (``custom_traits``: ``traits`` are the driver's, in compute_node)."""
    from novakit.fleet import aggregates, hosts

    out: dict[str, Any] = {}
    if asked.get("availability_zone") is not None or asked.get("aggregates") is not None:
        mine = [a for a in aggregates.list_aggregates(db, ctx) if host in a["hosts"]]
        if asked.get("availability_zone") is not None:
            zones = sorted({a["availability_zone"] for a in mine if a["availability_zone"]})
            out["availability_zone"] = zones[0] if zones else None
        if asked.get("aggregates") is not None:
            out["aggregates"] = sorted(a["name"] for a in mine)
    if asked.get("traits") is not None:
        out["custom_traits"] = hosts.custom_traits(db, host)
    return out


def place_host(db: Any, ctx: Any, host: str, asked: dict[str, Any]) -> None:
    """Put ``host`` where ``asked`` says; a key that is None is left as it is.

    - ``availability_zone``: the host is in the aggregate named after the zone (made with that
      zone when missing, as ``openstack aggregate create --zone east east``) and in no aggregate
      of another zone (left first: the library refuses a second zone);
    - ``aggregates`` (``aggregate_entries``): the host is in these aggregates (made when missing,
      their ``metadata`` keys set, other keys left: several hosts share one aggregate) and in no
      other aggregate without a zone (those with one follow ``availability_zone``);
    - ``traits``: the host carries exactly these custom traits (``CUSTOM_*``).
    """
    from novakit import exceptions
    from novakit.fleet import aggregates, hosts

    zone, entries, traits = asked.get("availability_zone"), asked.get("aggregates"), asked.get("traits")
    mine: list[dict[str, Any]] = []
    if zone is not None or entries is not None:
        mine = [a for a in aggregates.list_aggregates(db, ctx) if host in a["hosts"]]
    if zone is not None:
        target = ensure(db, ctx, zone, availability_zone=zone)[0]
        if target["availability_zone"] != zone:
            raise exceptions.ValidationError(
                "availability_zone",
                f"the zone's aggregate is the one named after it, and aggregate {zone} exists with "
                f"availability zone {target['availability_zone'] or 'none'}; set its zone "
                f"(novakit aggregate set --zone {zone} {zone}) or name another zone",
            )
        for other in mine:
            if other["availability_zone"] not in (None, zone):
                remove_host(db, ctx, other, host)
        add_host(db, ctx, target, host)
    if entries is not None:
        # By name, so that hosts running at once take shared aggregates in one order.
        wanted = {e["name"] for e in entries}
        for other in sorted(mine, key=lambda a: a["name"]):
            if other["availability_zone"] is None and other["name"] not in wanted:
                remove_host(db, ctx, other, host)
        for entry in sorted(entries, key=lambda e: e["name"]):
            aggregate, made = ensure(db, ctx, entry["name"], metadata=entry["metadata"] or None)
            changed = {k: v for k, v in entry["metadata"].items() if aggregate["metadata"].get(k) != v}
            if changed and not made:
                aggregate = aggregates.update(db, ctx, aggregate["uuid"], metadata=changed)
            add_host(db, ctx, aggregate, host)
    if traits is not None:
        have = set(hosts.custom_traits(db, host))
        if set(traits) - have:
            hosts.set_traits(db, ctx, host, sorted(set(traits) - have))
        if have - set(traits):
            hosts.unset_traits(db, ctx, host, sorted(have - set(traits)))
