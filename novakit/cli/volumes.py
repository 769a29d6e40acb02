"""``novakit volume`` and ``novakit server add|remove volume``: Cinder's volumes, as ``openstack
volume`` shows and handles them, through ``novakit.volume`` (the functions the ``volume`` and
``volume_attachment`` modules call), here or through a cloud (``base.call``). A volume's host is
shown to those who may see hosts only (``volumes.view``): to anyone else its column is empty."""

from __future__ import annotations

from typing import Any

import typer

from novakit.cli import output
from novakit.cli.base import call, console, guard, server_add_app, server_remove_app, volume_app
from novakit.cli.output import Col, Record
from novakit.cli.verbs import Noun


def _attached_to(r: dict[str, Any]) -> str:
    return ", ".join(f"{a['server_id']} on {a['device']}" for a in r.get("attachments") or [])


VOLUME_COLUMNS = [
    Col("ID", "id"),
    Col("Name", "name"),
    Col("Status", "status"),
    Col("Size", "size"),
    Col("Attached to", _attached_to),
    Col("Host", "host"),
    Col("Bootable", "bootable"),
    Col("Image", "image_id"),
    Col("Format", "format"),
    Col("Status reason", "status_reason"),
    Col("Project ID", "project_id"),
    Col("Created At", "created_at"),
]
VOLUME = typer.Argument(..., help="volume name or id")
SERVER = typer.Argument(..., help="server name or id")
VOLUME_NOUN = Noun(volume_app, "volume", VOLUME_COLUMNS, "novakit.volume.volumes", argument=VOLUME)


@volume_app.command("create")
@output.shows(VOLUME_COLUMNS, "volume {name}", failed=lambda vol: vol["status"] == "error")
def volume_create(
    name: str = typer.Argument(..., help="the volume's name (unique among your project's live volumes)"),
    size: int = typer.Option(..., "--size", help="size in GiB (at least 1)"),
    image: str | None = typer.Option(None, "--image", help="make a bootable volume from this image"),
    host: str | None = typer.Option(
        None, "--host", help="the compute host whose pool holds it (default: the one with most free disk)"
    ),
    description: str | None = typer.Option(
        None, "--description", help="a line about the volume, shown by volume show"
    ),
) -> Record:
    """Create a volume in a host's storage pool; it ends available, or error with the reason."""
    from novakit.volume import volumes

    return call(volumes.create, name, size, image=image, host=host, description=description)


@volume_app.command("list")
@output.lists(VOLUME_COLUMNS[:6], "volumes")
def volume_list(
    all_projects: bool = typer.Option(False, "--all-projects", help="every project's volumes (admin only)"),
) -> list[Record]:
    """List your project's volumes."""
    from novakit.volume import volumes

    return call(volumes.list_volumes, all_projects=all_projects)


VOLUME_NOUN.show(
    "Show a volume: its status, size, host and attachments.",
    lambda volumes, volume: call(volumes.show, volume),
)


@volume_app.command("delete")
def volume_delete(volume: str = VOLUME) -> None:
    """Delete a volume and its data (refused while it is attached)."""
    from novakit.volume import volumes

    gone = guard(lambda: call(volumes.delete, volume))
    if gone["status"] != "deleted":
        console.print(f"volume {gone['name']} not deleted: {gone['status']}: {gone['status_reason']}")
        raise typer.Exit(1)
    console.print(f"volume {gone['name']} deleted")


@server_add_app.command("volume")
def server_add_volume(
    server: str = SERVER,
    volume: str = VOLUME,
    device: str | None = typer.Option(
        None, "--device", help="the device in the guest (default: next free vdX)"
    ),
) -> None:
    """Attach a volume to a server on its host (hot on a running server, cold on a stopped one)."""
    from novakit.compute import volume_attach

    vol = guard(lambda: call(volume_attach.attach, server, volume, device))
    [att] = [a for a in vol["attachments"]]
    console.print(f"volume {vol['name']} attached to server {server} as {att['device']}")


@server_remove_app.command("volume")
def server_remove_volume(server: str = SERVER, volume: str = VOLUME) -> None:
    """Detach a volume from a server; its data stays."""
    from novakit.compute import volume_attach

    vol = guard(lambda: call(volume_attach.detach, server, volume))
    console.print(f"volume {vol['name']} detached from server {server}")
