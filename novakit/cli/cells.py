"""``novakit cell``: Nova's ``nova-manage cell_v2``, through ``novakit.cells.manage``."""

from __future__ import annotations

import typer

from novakit.cli import output
from novakit.cli.base import cell_app, console, ctx, db, guard
from novakit.cli.output import COLUMN, FORMAT, OUTPUT, Col, Format

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


@cell_app.command("create")
def cell_create(
    name: str = typer.Argument(..., help="the cell's name"),
    db_url: str = typer.Option(
        ..., "--db-url", help="its database (sqlite:///PATH or postgresql+psycopg://...)"
    ),
    migrate: bool = typer.Option(
        False, "--migrate", help="give an empty (or older) database the cell schema"
    ),
    disabled: bool = typer.Option(False, "--disabled", help="map it disabled: no new servers go there"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Map a cell to its database (admin only); the database is checked first."""
    from novakit.cells import manage

    cell = guard(lambda: manage.create_cell(db(), ctx(), name, db_url, migrate=migrate, disabled=disabled))
    guard(lambda: output.emit_show(cell, CELL_COLUMNS, fmt, out, column, f"cell {name}"))


@cell_app.command("list")
def cell_list(
    fmt: Format | None = FORMAT, out: Format | None = OUTPUT, column: list[str] | None = COLUMN
) -> None:
    """The cells, their databases (passwords hidden), hosts, servers and whether they answer."""
    from novakit.cells import manage

    rows = guard(lambda: manage.list_cells(db(), ctx()))
    guard(lambda: output.emit_list(rows, CELL_COLUMNS, fmt, out, column, "cells"))


@cell_app.command("show")
def cell_show(
    cell: str = CELL,
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """One cell."""
    from novakit.cells import manage

    found = guard(lambda: manage.show_cell(db(), ctx(), cell))
    guard(lambda: output.emit_show(found, CELL_COLUMNS, fmt, out, column, f"cell {found['name']}"))


@cell_app.command("delete")
def cell_delete(cell: str = CELL) -> None:
    """Unmap an empty cell (refused while hosts or servers are in it, and for cell0)."""
    from novakit.cells import manage

    gone = guard(lambda: manage.delete_cell(db(), ctx(), cell))
    console.print(f"cell {gone['name']} deleted", highlight=False)


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
