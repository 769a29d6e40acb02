"""Availability zones, aggregates and custom traits as the ``compute_node`` module wants them,
over the library (``novakit.fleet.aggregates``, ``novakit.fleet.hosts``), which owns every
rule: names, the one zone a host may be in, which traits a host may be given. (The
``host_aggregate`` module's task is one library call: ``novakit.fleet.aggregates.apply``.)

Check mode runs the real calls in one database transaction that is rolled back at the end
(``dry_run``): every check and refusal of a real run, in the same words, and nothing written.

Many hosts may apply their inventory variables at once (``place_host``): each one touches only
its own membership and its own traits, and an aggregate another host made a moment earlier is
found and used, not made twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def dry_run(db: Any, fn: Callable[[Any], T]) -> T:
    """``fn(dry)``, ``dry`` being ``db`` in one transaction that is rolled back
    (``novakit.fleet.aggregates.in_one_transaction``)."""
    from novakit.fleet import aggregates

    return aggregates.in_one_transaction(db, fn, keep=False)


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
        target = aggregates.ensure(db, ctx, zone, availability_zone=zone)[0]
        if target["availability_zone"] != zone:
            raise exceptions.ValidationError(
                "availability_zone",
                f"the zone's aggregate is the one named after it, and aggregate {zone} exists with "
                f"availability zone {target['availability_zone'] or 'none'}; set its zone "
                f"(novakit aggregate set --zone {zone} {zone}) or name another zone",
            )
        for other in mine:
            if other["availability_zone"] not in (None, zone):
                aggregates.without(db, ctx, other, host)
        aggregates.holding(db, ctx, target, host)
    if entries is not None:
        # By name, so that hosts running at once take shared aggregates in one order.
        wanted = {e["name"] for e in entries}
        for other in sorted(mine, key=lambda a: a["name"]):
            if other["availability_zone"] is None and other["name"] not in wanted:
                aggregates.without(db, ctx, other, host)
        for entry in sorted(entries, key=lambda e: e["name"]):
            aggregate, made = aggregates.ensure(db, ctx, entry["name"], metadata=entry["metadata"] or None)
            changed = {k: v for k, v in entry["metadata"].items() if aggregate["metadata"].get(k) != v}
            if changed and not made:
                aggregate = aggregates.update(db, ctx, aggregate["uuid"], metadata=changed)
            aggregates.holding(db, ctx, aggregate, host)
    if traits is not None:
        have = set(hosts.custom_traits(db, host))
        if set(traits) - have:
            hosts.set_traits(db, ctx, host, sorted(set(traits) - have))
        if have - set(traits):
            hosts.unset_traits(db, ctx, host, sorted(have - set(traits)))
