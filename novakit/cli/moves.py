"""Moving servers, with openstack's verbs: ``server resize|migrate|evacuate|shelve|unshelve|rescue|
unrescue``, ``server image create``, ``migration list`` and ``host drain``.

Each server command is one action of the state table run through ``API.act``, as every other
server command (``servers._action``): the API decides whether the move may start, the conductor
carries it out (``novakit.moves``). A move that fails on a host is rolled back: the server is
ACTIVE again where it was (only a rollback that fails leaves it in ERROR), with the action's
message ``Error`` and the failed events in its audit trail. Its status alone would read as
success, so every command here reads this request's action afterwards (``_check_outcome``) and
exits 1 with what failed.
"""

from __future__ import annotations

from typing import Any

import typer

from novakit.cli import output
from novakit.cli.base import (
    api,
    call,
    console,
    ctx,
    err_console,
    fail,
    group,
    guard,
    host_app,
    key_values,
    migration_app,
    server_app,
)
from novakit.cli.output import COLUMN, FORMAT, OUTPUT, Col, Format
from novakit.cli.servers import SERVER, complete_server

server_image_app = group(
    "Server images: snapshots of a server's root disk, bootable as any image.", server_app, "image"
)

#: the first argument of ``server resize`` that answers a finished resize, and its action
ANSWERS = {"confirm": "confirm_resize", "revert": "revert_resize"}
HOST = typer.Option(None, "--host", help="the destination host (admin only; default: the scheduler's choice)")


def _move(action: str, server: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``action`` as every server command does; exit 1 if the move failed (``ActOutcome.error``:
    the server's status alone would read as success, a failed move being rolled back)."""
    out = guard(lambda: api().act(ctx(), server, action, options))
    s = out.server
    assert s is not None
    console.print(f"{s['name']}: {s['status']} (vm_state {s['vm_state']}, power {s['power_state_name']})")
    if out.error is not None:
        what = f"{action.replace('_', ' ')} of {s['name']} failed"
        if s["status"] == "ERROR":
            fail(f"{what} and could not be rolled back; the server is in ERROR: {out.error}")
        fail(f"{what} and was rolled back: {out.error} ({s['name']} is {s['status']} where it was)")
    return s


def _next_step(server: dict[str, Any]) -> None:
    """A resize or cold migration ends in VERIFY_RESIZE: say how it is answered."""
    if server["status"] == "VERIFY_RESIZE":
        err_console.print(
            f"confirm with: novakit server resize confirm {server['name']} (or revert to go back)",
            highlight=False,
        )


# ------------------------------------------------------------------ resize, migrate, evacuate


@server_app.command("resize")
def server_resize(
    first: str = typer.Argument(
        ...,
        metavar="SERVER",
        help="the server; or confirm / revert, to answer its finished resize",
        autocompletion=complete_server,
    ),
    second: str | None = typer.Argument(
        None, metavar="FLAVOR", help="the new flavor; after confirm / revert, the server"
    ),
    flavor: str | None = typer.Option(None, "--flavor", help="the new flavor (name or id)"),
) -> None:
    """Resize a server to another flavor, or answer a finished resize.

    `resize SERVER FLAVOR` (or `resize --flavor FLAVOR SERVER`) moves the server to a host with
    room for the new flavor; it then waits in VERIFY_RESIZE, its old host still holding its disks.
    `resize confirm SERVER` keeps the new size; `resize revert SERVER` goes back to the old host
    and flavor. A server literally named confirm or revert is resized with --flavor (or by its id).
    """
    if flavor is not None:
        if second is not None:
            fail(f"give the flavor once: --flavor {flavor} or a second argument, not both")
        _next_step(_move("resize", first, {"flavor": flavor}))
        return
    if first in ANSWERS:
        if second is None:
            fail(f"resize {first} needs the server: novakit server resize {first} SERVER")
        assert second is not None
        _move(ANSWERS[first], second)
        return
    if second is None:
        fail("resize needs a flavor: novakit server resize SERVER FLAVOR (or --flavor FLAVOR)")
    _next_step(_move("resize", first, {"flavor": second}))


@server_app.command("migrate")
def server_migrate(
    server: str = SERVER,
    host: str | None = HOST,
    live: bool = typer.Option(False, "--live", help="keep the guest running while it moves (live migration)"),
) -> None:
    """Move a server to another host (admin only), cold or --live.

    A cold migration ends in VERIFY_RESIZE, answered as a resize is (`resize confirm|revert`); a
    live one keeps the guest running. A move that fails is rolled back: the server stays where it
    was and the command exits 1.
    """
    if live:
        _move("live_migrate", server, {"host": host})
    else:
        _next_step(_move("migrate", server, {"host": host}))


@server_app.command("evacuate")
def server_evacuate(server: str = SERVER, host: str | None = HOST) -> None:
    """Rebuild a server whose host is down on another host, from its image, ports kept (admin only)."""
    _move("evacuate", server, {"host": host})


# ------------------------------------------------------------------ shelve, unshelve


@server_app.command("shelve")
def server_shelve(
    server: str = SERVER,
    offload: bool = typer.Option(
        False, "--offload", help="offload it now too (frees its host), whatever shelved_offload_time says"
    ),
) -> None:
    """Shelve a server: powered off, its root disk kept as an image.

    With compute.shelved_offload_time 0 (the default) it is offloaded at once: its host and
    claim are freed (SHELVED_OFFLOADED); otherwise --offload does that now.
    """
    s = _move("shelve", server)
    if offload and s["status"] == "SHELVED":
        _move("shelve_offload", s["id"])


@server_app.command("shelve-offload")
def server_shelve_offload(server: str = SERVER) -> None:
    """Offload a shelved server: its guest leaves its host, and so does its claim."""
    _move("shelve_offload", server)


@server_app.command("unshelve")
def server_unshelve(server: str = SERVER) -> None:
    """Bring a shelved server back (an offloaded one is scheduled anew, from its shelved image)."""
    _move("unshelve", server)


# ------------------------------------------------------------------ snapshot, rescue


@server_image_app.command("create")
def server_image_create(
    server: str = SERVER,
    name: str = typer.Option(..., "--name", help="the new image's name (unique among images)"),
    prop: list[str] | None = typer.Option(None, "--property", help="image property KEY=VALUE (repeat)"),
) -> None:
    """Snapshot a server's root disk into a new image (a running guest is paused for the copy)."""
    from novakit.catalog import images

    metadata = guard(lambda: key_values(prop) or None)
    _move("create_image", server, {"name": name, "metadata": metadata})

    image = guard(lambda: call(images.show, name))
    console.print(f"image {image['name']} created ({image['id']}, {image['size']} bytes)", highlight=False)


@server_app.command("rescue")
def server_rescue(
    server: str = SERVER,
    image: str | None = typer.Option(
        None, "--image", help="the image to boot from (name or id; default: the server's own)"
    ),
) -> None:
    """Boot a server from a rescue image, its own root disk attached as the second disk."""
    _move("rescue", server, {"image": image})


@server_app.command("unrescue")
def server_unrescue(server: str = SERVER) -> None:
    """Boot a rescued server from its own root disk again."""
    _move("unrescue", server)


# ------------------------------------------------------------------ migration list

MIGRATION_COLUMNS = [
    Col("ID", "id"),
    Col("Server", "server"),
    Col("Type", "type"),
    Col("Status", "status"),
    Col("Source Compute", "source_compute"),
    Col("Dest Compute", "dest_compute"),
    Col("Old Flavor", "old_flavor"),
    Col("New Flavor", "new_flavor"),
    Col("Created At", "created_at"),
    Col("Updated At", "updated_at"),
]


@migration_app.command("list")
def migration_list(
    server: str | None = typer.Option(None, "--server", help="only this server's (name or id)"),
    host: str | None = typer.Option(None, "--host", help="only moves from or to this host"),
    status: str | None = typer.Option(None, "--status", help="only in this status (finished, error, ...)"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Migrations of servers between hosts, newest first (admin only)."""
    from novakit.moves import migrations

    caller = ctx()
    compute = api()
    uuid = guard(lambda: compute.get(caller, server)["id"]) if server else None
    rows = guard(
        lambda: migrations.list_migrations(compute.db, caller, server=uuid, host=host, status=status)
    )
    guard(lambda: output.emit_list(rows, MIGRATION_COLUMNS, fmt, out, column, "migrations"))


# ------------------------------------------------------------------ host drain

DRAIN_COLUMNS = [
    Col("Server", "name"),
    Col("ID", "id"),
    Col("Status", "status"),
    Col("From", "from"),
    Col("To", "to"),
    Col("How", "how"),
    Col("Result", "result"),
    Col("Reason", "reason"),
]


@host_app.command("drain")
def host_drain(
    name: str = typer.Argument(..., help="the host"),
    live: bool = typer.Option(False, "--live", help="only live migrations (running servers stay running)"),
    cold: bool = typer.Option(False, "--cold", help="only cold migrations, confirmed at once"),
    reason: str | None = typer.Option(None, help="why it is disabled (shown by host list)"),
    enable_after: bool = typer.Option(
        False, "--enable-after", help="enable the host again once every server has left it"
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="check each move as a real run would; disable and move nothing"
    ),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Disable a host and move every server off it (admin only), for its maintenance.

    Live where possible, cold otherwise (--live or --cold: only that way), each server placed by
    the scheduler as a boot is (its server group, networks, capacity); cold moves are confirmed at
    once. Exits 1, after moving what it can, when a server is left on the host, naming it and why.
    """
    from novakit.fleet import hosts
    from novakit.moves.drain import drain_host

    if live and cold:
        fail("give --live or --cold, not both (neither: live where possible, cold otherwise)")
    how = True if live else False if cold else None
    report = guard(lambda: call(drain_host, name, live=how, reason=reason, dry_run=dry_run))
    left = [r for r in report["servers"] if r["result"] in ("failed", "skipped")]
    if enable_after and not left and not dry_run:
        guard(lambda: call(hosts.set_disabled, name, False))
        report["disabled"] = False
    form = guard(lambda: output.chosen(fmt, out))
    if form in (Format.json, Format.yaml) and not column:
        output.dump(report, form)
    else:
        title = f"drain of {name}" + (" (dry run: nothing changed)" if dry_run else "")
        guard(lambda: output.emit_list(report["servers"], DRAIN_COLUMNS, form, None, column, title))
    if left:
        names = "; ".join(f"{r['name']} ({r['result']}: {r['reason']})" for r in left)
        fail(f"{len(left)} server(s) left on {name}, which stays disabled: {names}")
    if form == Format.table and not dry_run:
        state = "enabled again" if enable_after else "left disabled (novakit host enable to take it back)"
        console.print(f"host {name} is empty, {state}", highlight=False)
