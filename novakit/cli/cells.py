"""``novakit cell``: Nova's ``nova-manage cell_v2``, through ``novakit.cells.manage``."""

from __future__ import annotations

import typer

from novakit.cli import output
from novakit.cli.base import cell_app, console, ctx, db, guard
from novakit.cli.output import Col, Record
from novakit.cli.verbs import Noun

CELL_COLUMNS = [
    Col("Name", "name"),
    Col("UUID", "uuid"),
    Col("Database", "database"),
    Col("Disabled", "disabled"),
    Col("Hosts", "hosts"),
    Col("Servers", "servers"),
    Col("Status", "status"),
]
CELL = typer.Argument(..., help="cell name or uuid")
CELL_NOUN = Noun(cell_app, "cell", CELL_COLUMNS, "novakit.cells.manage", argument=CELL)


@cell_app.command("create")
@output.shows(CELL_COLUMNS, "cell {name}")
def cell_create(
    name: str = typer.Argument(..., help="the cell's name"),
    db_url: str = typer.Option(
        ..., "--db-url", help="its database (sqlite:///PATH or postgresql+psycopg://...)"
    ),
    migrate: bool = typer.Option(
        False, "--migrate", help="give an empty (or older) database the cell schema"
    ),
    disabled: bool = typer.Option(False, "--disabled", help="map it disabled: no new servers go there"),
) -> Record:
    """Map a cell to its database (admin only); the database is checked first."""
    from novakit.cells import manage

    return manage.create_cell(db(), ctx(), name, db_url, migrate=migrate, disabled=disabled)


@cell_app.command("list")
@output.lists(CELL_COLUMNS, "cells")
def cell_list() -> list[Record]:
    """The cells, their databases (passwords hidden), hosts, servers and whether they answer."""
    from novakit.cells import manage

    return manage.list_cells(db(), ctx())


CELL_NOUN.show("One cell.", lambda manage, cell: manage.show_cell(db(), ctx(), cell))
CELL_NOUN.delete(
    "Unmap an empty cell (refused while hosts or servers are in it, and for cell0).",
    lambda manage, cell: manage.delete_cell(db(), ctx(), cell),
    lambda gone, _cell: gone["name"],
)


@cell_app.command("discover-hosts")
def cell_discover_hosts(
    cell: str | None = typer.Option(None, "--cell", help="map them to this cell (default: the default cell)"),
) -> None:
    """Map every registered host that is in no cell yet (nova-manage cell_v2 discover_hosts)."""
    from novakit.cells import manage

    found = guard(lambda: manage.discover_hosts(db(), ctx(), cell))
    console.print(
        f"{len(found)} host(s) mapped" + (f": {', '.join(found)}" if found else ""), highlight=False
    )


@cell_app.command("disable")
def cell_disable(cell: str = CELL) -> None:
    """Schedule no new servers into the cell; those in it carry on."""
    from novakit.cells import manage

    guard(lambda: manage.set_disabled(db(), ctx(), cell, True))
    console.print(f"cell {cell} disabled", highlight=False)


@cell_app.command("enable")
def cell_enable(cell: str = CELL) -> None:
    """Schedule new servers into the cell again."""
    from novakit.cells import manage

    guard(lambda: manage.set_disabled(db(), ctx(), cell, False))
    console.print(f"cell {cell} enabled", highlight=False)
