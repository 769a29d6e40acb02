"""``novakit flavor`` and ``novakit image``: what servers are built with and from."""

from __future__ import annotations

import typer

from novakit.cli import output
from novakit.cli.base import console, ctx, db, flavor_app, guard, image_app
from novakit.cli.output import COLUMN, FORMAT, OUTPUT, Col, Format

FLAVOR_COLUMNS = [
    Col("ID", "id"),
    Col("Name", "name"),
    Col("VCPUs", "vcpus"),
    Col("RAM", "ram"),
    Col("Disk", "disk"),
    Col("Ephemeral", "ephemeral"),
    Col("Swap", "swap"),
]
IMAGE_COLUMNS = [
    Col("ID", "id"),
    Col("Name", "name"),
    Col("Disk Format", "disk_format"),
    Col("Checksum", "checksum"),
    Col("Location", "location"),
]


@flavor_app.command("create")
def flavor_create(
    name: str = typer.Argument(..., help="the flavor's name"),
    vcpus: int = typer.Option(..., help="vCPUs"),
    ram: int = typer.Option(..., help="RAM in MB"),
    disk: int = typer.Option(0, help="root disk in GB"),
    ephemeral: int = typer.Option(0, help="ephemeral disk in GB"),
    swap: int = typer.Option(0, help="swap in MB"),
    flavor_id: str | None = typer.Option(None, "--id", help="flavor id (default: a new uuid)"),
    prop: list[str] | None = typer.Option(None, "--property", help="extra spec key=value (repeat)"),
) -> None:
    """Create a flavor (admin only)."""
    from novakit.compute import flavors

    specs = dict(p.split("=", 1) for p in (prop or []) if "=" in p)
    data = {
        "name": name,
        "vcpus": vcpus,
        "memory_mb": ram,
        "root_gb": disk,
        "ephemeral_gb": ephemeral,
        "swap": swap,
        "flavorid": flavor_id,
        "extra_specs": specs,
    }
    f = guard(lambda: flavors.create(db(), ctx(), data))
    console.print(f"flavor {f['name']} created ({f['id']})")


@flavor_app.command("list")
def flavor_list(
    fmt: Format | None = FORMAT, out: Format | None = OUTPUT, column: list[str] | None = COLUMN
) -> None:
    """The flavors servers can be created with."""
    from novakit.compute import flavors

    rows = guard(lambda: flavors.list_flavors(db()))
    guard(lambda: output.emit_list(rows, FLAVOR_COLUMNS, fmt, out, column, "flavors"))


@flavor_app.command("delete")
def flavor_delete(name: str = typer.Argument(..., help="flavor name or id")) -> None:
    """Delete a flavor (admin only); servers built with it keep their copy of it."""
    from novakit.compute import flavors

    guard(lambda: flavors.delete(db(), ctx(), name))
    console.print(f"flavor {name} deleted")


@image_app.command("create")
def image_create(
    name: str = typer.Argument(..., help="the image's name"),
    location: str = typer.Option("", help="path or file:// URL on the compute hosts"),
    disk_format: str = typer.Option("qcow2", help="qcow2, raw, aki, ari, ami"),
    checksum: str | None = typer.Option(None, help="sha256 of the file"),
    prop: list[str] | None = typer.Option(None, "--property", help="image property key=value (repeat)"),
) -> None:
    """Register an image (admin only): a file the compute hosts can read."""
    from novakit.compute import images

    props = dict(p.split("=", 1) for p in (prop or []) if "=" in p)
    data = {
        "name": name,
        "location": location,
        "disk_format": disk_format,
        "checksum": checksum,
        "properties": props,
    }
    i = guard(lambda: images.create(db(), ctx(), data))
    console.print(f"image {i['name']} created ({i['id']})")


@image_app.command("list")
def image_list(
    fmt: Format | None = FORMAT, out: Format | None = OUTPUT, column: list[str] | None = COLUMN
) -> None:
    """The images servers can be built from."""
    from novakit.compute import images

    rows = guard(lambda: images.list_images(db()))
    guard(lambda: output.emit_list(rows, IMAGE_COLUMNS, fmt, out, column, "images"))


@image_app.command("delete")
def image_delete(name: str = typer.Argument(..., help="image name or id")) -> None:
    """Delete an image (admin only); servers built from it keep running."""
    from novakit.compute import images

    guard(lambda: images.delete(db(), ctx(), name))
    console.print(f"image {name} deleted")
