"""``novakit aggregate`` and ``novakit availability zone``, as ``openstack aggregate`` and
``openstack availability zone`` (Nova's os-aggregates and os-availability-zone).

The library is ``novakit.fleet.aggregates``: admin only, and a host is in one zone only. Every
command is one of its calls (``base.call``), so ``--os-cloud`` runs them in ``novakit serve``.
"""

from __future__ import annotations

from typing import Any

import typer

from novakit.cli import output
from novakit.cli.base import app as root_app
from novakit.cli.base import call, console, group, guard, key_values
from novakit.cli.output import COLUMN, FORMAT, OUTPUT, Col, Format, Record

aggregate_app = group(
    "Host aggregates: groups of hosts with metadata; one with a zone is an availability zone."
)
aggregate_add_app = group("Add a host to an aggregate.")
aggregate_remove_app = group("Remove a host from an aggregate.")
zone_app = group("Availability zones: the zone aggregates' hosts, and the default zone's.")
zone_parent = group("Availability zones.")
root_app.add_typer(aggregate_app, name="aggregate")
aggregate_app.add_typer(aggregate_add_app, name="add")
aggregate_app.add_typer(aggregate_remove_app, name="remove")
root_app.add_typer(zone_parent, name="availability")
zone_parent.add_typer(zone_app, name="zone")


def _properties(record: Record) -> str:
    return ", ".join(f"{k}='{v}'" for k, v in sorted(record["metadata"].items()))


COLUMNS = [Col("ID", "id"), Col("Name", "name"), Col("Availability Zone", "availability_zone")]
LONG_COLUMNS = [
    Col("ID", "id"),
    Col("UUID", "uuid"),
    Col("Name", "name"),
    Col("Availability Zone", "availability_zone"),
    Col("Properties", _properties),
    Col("Hosts", lambda r: ", ".join(r["hosts"])),
]
FIELDS = [
    Col("availability_zone", "availability_zone"),
    Col("hosts", lambda r: ", ".join(r["hosts"])),
    Col("id", "id"),
    Col("name", "name"),
    Col("properties", _properties),
    Col("uuid", "uuid"),
]
PROPERTY = typer.Option(None, "--property", help="metadata key=value (repeat)")


@aggregate_app.command("create")
@output.shows(FIELDS, "aggregate {name}")
def aggregate_create(
    name: str = typer.Argument(..., help="the aggregate's name (unique)"),
    zone: str | None = typer.Option(None, "--zone", help="make its hosts this availability zone"),
    prop: list[str] | None = PROPERTY,
) -> Record:
    """Create an aggregate (admin only)."""
    from novakit.fleet import aggregates

    return call(aggregates.create, name, availability_zone=zone, metadata=key_values(prop))


@aggregate_app.command("list")
def aggregate_list(
    long: bool = typer.Option(False, "--long", help="with properties and hosts"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """The aggregates (admin only)."""
    from novakit.fleet import aggregates

    rows = guard(lambda: call(aggregates.list_aggregates))
    guard(lambda: output.emit_list(rows, LONG_COLUMNS if long else COLUMNS, fmt, out, column, "aggregates"))


@aggregate_app.command("show")
@output.shows(FIELDS, "aggregate {name}")
def aggregate_show(aggregate: str = typer.Argument(..., help="name, uuid or id")) -> Record:
    """One aggregate with its hosts and properties (admin only)."""
    from novakit.fleet import aggregates

    return call(aggregates.show, aggregate)


@aggregate_app.command("set")
@output.shows(FIELDS, "aggregate {name}")
def aggregate_set(
    aggregate: str = typer.Argument(..., help="name, uuid or id"),
    name: str | None = typer.Option(None, "--name", help="a new name"),
    zone: str | None = typer.Option(None, "--zone", help="its availability zone (its hosts move with it)"),
    prop: list[str] | None = PROPERTY,
    no_property: bool = typer.Option(False, "--no-property", help="remove every property first"),
) -> Record:
    """Rename, set the zone, add or change properties (admin only). Servers stay where they are."""
    from novakit.fleet import aggregates

    unset: list[str] = []
    if no_property:
        unset = [k for k in call(aggregates.show, aggregate)["metadata"] if k not in key_values(prop)]
    return call(
        aggregates.update,
        aggregate,
        name=name,
        availability_zone=zone,
        metadata=key_values(prop),
        unset_metadata=unset,
    )


@aggregate_app.command("unset")
@output.shows(FIELDS, "aggregate {name}")
def aggregate_unset(
    aggregate: str = typer.Argument(..., help="name, uuid or id"),
    prop: list[str] | None = typer.Option(None, "--property", help="a property to remove (repeat)"),
    zone: bool = typer.Option(False, "--zone", help="its hosts go back to the default zone"),
) -> Record:
    """Remove properties, or the zone (admin only)."""
    from novakit.fleet import aggregates

    return call(aggregates.update, aggregate, unset_metadata=list(prop or []), unset_zone=zone)


@aggregate_app.command("delete")
def aggregate_delete(
    aggregates_: list[str] = typer.Argument(..., metavar="AGGREGATE...", help="names, uuids or ids"),
) -> None:
    """Delete aggregates (admin only); one that holds hosts is refused."""
    from novakit.fleet import aggregates

    for ref in aggregates_:
        gone = guard(lambda r=ref: call(aggregates.delete, r))  # type: ignore[misc]
        console.print(f"aggregate {gone['name']} deleted")


@aggregate_add_app.command("host")
@output.shows(FIELDS, "aggregate {name}")
def aggregate_add_host(
    aggregate: str = typer.Argument(..., help="name, uuid or id"),
    host: str = typer.Argument(..., help="the compute host"),
) -> Record:
    """Put a host into an aggregate (and its zone); a host is in one zone only."""
    from novakit.fleet import aggregates

    return call(aggregates.add_host, aggregate, host)


@aggregate_remove_app.command("host")
@output.shows(FIELDS, "aggregate {name}")
def aggregate_remove_host(
    aggregate: str = typer.Argument(..., help="name, uuid or id"),
    host: str = typer.Argument(..., help="the compute host"),
) -> Record:
    """Take a host out of an aggregate; its servers keep the zone they were placed in."""
    from novakit.fleet import aggregates

    return call(aggregates.remove_host, aggregate, host)


ZONE_COLUMNS = [
    Col("Zone Name", "zone"),
    Col("Zone Status", lambda r: "available" if r["available"] else "not available"),
]
ZONE_LONG_COLUMNS = [*ZONE_COLUMNS, Col("Host Name", "host")]


@zone_app.command("list")
def zone_list(
    long: bool = typer.Option(False, "--long", help="one row per host (admin only)"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """The availability zones and whether each has an enabled host."""
    from novakit.fleet import aggregates

    zones = guard(lambda: call(aggregates.list_zones, long=long))
    rows: list[dict[str, Any]] = zones
    if long:
        rows = [{**z, "host": h} for z in zones for h in z["hosts"] or [None]]
    guard(
        lambda: output.emit_list(
            rows, ZONE_LONG_COLUMNS if long else ZONE_COLUMNS, fmt, out, column, "availability zones"
        )
    )
