"""``novakit server``: servers as ``openstack server`` shows and handles them.

``server list`` takes Nova's filters (``--status``, ``--name`` as a regular
expression, ``--flavor``, ``--image``, ``--host``, ``--all-projects``,
``--deleted``) and pages (``--limit``, ``--marker``); the library applies them in
its query (``novakit.compute.listing``). Its columns are openstack's: ID, Name,
Status, Networks, Image, Flavor (names, not ids); ``--long`` adds task and power
state, the host (an admin's; a member sees the opaque Host ID), availability zone,
properties and the creation time.
"""

from __future__ import annotations

import base64
import functools
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from novakit import policy
from novakit.cli import output
from novakit.cli.base import api, conf, console, ctx, err_console, group, guard, server_app
from novakit.cli.output import COLUMN, FORMAT, OUTPUT, Col, Format

if TYPE_CHECKING:
    from novakit.compute.api import API
    from novakit.context import RequestContext


def complete_server(ctx: Any, incomplete: str) -> list[str]:
    """Shell completion of server names, read as the operator's identity.

    ``ctx`` (typer's, None when called directly) gives the command line's ``--config``
    and ``--db-url``. Quiet and quick whatever happens: a database that is missing
    (never created here), down or not migrated completes nothing rather than
    printing an error.
    """
    try:
        import os

        from novakit.compute import listing
        from novakit.config import load_config
        from novakit.context import context_from
        from novakit.db.engine import Database

        given = ctx.find_root().params if ctx is not None else {}
        db_url = given.get("db_url") or os.environ.get("NOVAKIT_DB_URL") or None
        settings = load_config(given.get("config"), db_url=db_url)
        url = settings.database_url
        if url.startswith("sqlite") and not os.path.exists(url.split("///", 1)[-1]):
            return []
        caller = context_from({}, identity=settings.identity)
        with Database(url, auto_upgrade=False).reader() as session:
            return listing.server_names(session, caller, incomplete)
    except Exception:
        return []


SERVER = typer.Argument(..., help="server name or id", autocompletion=complete_server)


def _flavor(r: dict[str, Any]) -> Any:
    return (r.get("flavor") or {}).get("name")


def _image(r: dict[str, Any]) -> Any:
    return r.get("image_name") or r.get("image")


LIST_COLUMNS = [
    Col("ID", "id"),
    Col("Name", "name"),
    Col("Status", "status"),
    Col("Networks", "addresses"),
    Col("Image", _image),
    Col("Flavor", _flavor),
]


def long_columns(admin: bool) -> list[Col]:
    """The --long columns: a member gets the Host ID where an admin gets the Host."""
    host = Col("Host", "host") if admin else Col("Host ID", "host_id")
    return [
        Col("ID", "id"),
        Col("Name", "name"),
        Col("Status", "status"),
        Col("Task State", "task_state"),
        Col("Power State", "power_state_name"),
        Col("Networks", "addresses"),
        Col("Image Name", _image),
        Col("Image ID", "image"),
        Col("Flavor Name", _flavor),
        Col("Flavor ID", lambda r: (r.get("flavor") or {}).get("flavorid")),
        Col("Availability Zone", "availability_zone"),
        host,
        Col("Properties", "metadata"),
        Col("Created", "created"),
    ]


def show_fields(admin: bool) -> list[Col]:
    fields = [
        Col("id", "id"),
        Col("name", "name"),
        Col("status", "status"),
        Col("vm_state", "vm_state"),
        Col("task_state", "task_state"),
        Col("power_state", "power_state_name"),
        *([Col("host", "host")] if admin else []),
        Col("host_id", "host_id"),
        # The zone it was placed in (its host's then), as Nova names it.
        Col("OS-EXT-AZ:availability_zone", "availability_zone"),
        Col("addresses", "addresses"),
        Col(
            "flavor",
            lambda r: (
                f"{_flavor(r)} ({r['flavor'].get('vcpus')} vCPU, {r['flavor'].get('memory_mb')} MB)"
                if r.get("flavor")
                else None
            ),
        ),
        Col(
            "image", lambda r: f"{r['image_name']} ({r['image']})" if r.get("image_name") else r.get("image")
        ),
        Col("metadata", "metadata"),
        Col("key_name", "key_name"),
        Col(
            "security_groups", lambda r: ", ".join(g["name"] for g in r.get("security_groups") or []) or None
        ),
        Col("locked", "locked"),
        Col("locked_reason", "locked_reason"),
        Col("project_id", "project_id"),
        Col("user_id", "user_id"),
        Col("created", "created"),
        Col("launched_at", "launched_at"),
        Col("terminated_at", "terminated_at"),
        Col("fault", lambda r: f"{r['fault']['code']}: {r['fault']['message']}" if r.get("fault") else None),
    ]
    return fields


@server_app.command("create")
def server_create(
    cli: typer.Context,
    name: str = typer.Argument(..., help="the server's name (several get -1, -2, ...)"),
    flavor: str = typer.Option(..., help="flavor name or id"),
    image: str | None = typer.Option(None, help="image name or id (required unless --volume)"),
    count: int | None = typer.Option(
        None, help="how many servers: NAME-1 ... NAME-N (without --count: one server named NAME)"
    ),
    min_count: int | None = typer.Option(None, help="fewer than this is a failure (default: count)"),
    user_data: Path | None = typer.Option(
        None, help="file with cloud-init user data", exists=True, dir_okay=False, readable=True
    ),
    meta: list[str] | None = typer.Option(None, "--meta", help="metadata key=value (repeat)"),
    group: str | None = typer.Option(None, help="server group name or id"),
    key_name: str | None = typer.Option(None, "--key-name", help="your key pair for it (novakit keypair)"),
    availability_zone: str | None = typer.Option(None, help="availability zone"),
    nic: list[str] | None = typer.Option(
        None,
        "--nic",
        help="net-id=NET[,v4-fixed-ip=IP] or port-id=PORT (repeat; none: the default network, if any)",
    ),
    security_group: list[str] | None = typer.Option(
        None,
        "--security-group",
        help="a security group of the ports the create makes, name or id (repeat; none: default)",
    ),
    boot_from_volume: int | None = typer.Option(
        None, metavar="SIZE", help="boot from a new SIZE GiB volume made from --image on the chosen host"
    ),
    volume: str | None = typer.Option(
        None, help="boot from this existing bootable volume (name or id); the server goes to its host"
    ),
    delete_on_termination: bool | None = typer.Option(
        None,
        "--delete-on-termination/--no-delete-on-termination",
        help="whether the root volume goes with the server (default: yes for a new one, no for --volume)",
    ),
    wait: bool = typer.Option(
        True,
        "--wait/--no-wait",
        help="build now and wait (default); --no-wait records the servers (building/scheduling), "
        "hands their build to a background worker and returns, printing the worker's log path",
    ),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Create servers; with --wait (default) they are built before the command returns.

    With --no-wait a background worker schedules and builds them; `novakit server list`
    shows how far they are. A create whose servers end in error exits with status 1.
    """
    compute = api()
    data: dict[str, Any] = {
        "name": name,
        "flavor": flavor,
        "image": image,
        "metadata": dict(m.split("=", 1) for m in (meta or []) if "=" in m),
        "server_group": group,
        "key_name": key_name,
        "availability_zone": availability_zone,
        "boot_from_volume": boot_from_volume,
        "boot_volume": volume,
        "delete_on_termination": delete_on_termination,
    }
    # Only the counts given: a request with none is one server named NAME (``novakit.compute.names``).
    if count is not None:
        data["max_count"] = count
    if min_count is not None or count is not None:
        data["min_count"] = min_count if min_count is not None else count
    if user_data is not None:
        data["user_data"] = base64.b64encode(user_data.read_bytes()).decode()
    if nic:
        from novakit.network.allocation import nic_request

        data["networks"] = [guard(functools.partial(nic_request, n, "--nic")) for n in nic]
    if security_group:
        data["security_groups"] = list(security_group)
    caller = ctx()
    # The listing's columns, and the host for those who may see it (openstack's create shows them all).
    columns = (
        [*LIST_COLUMNS[:3], Col("Host", "host"), *LIST_COLUMNS[3:]]
        if policy.allowed(caller, "host:show")
        else LIST_COLUMNS
    )
    form = guard(lambda: output.validated(columns, fmt, out, column))
    if wait:
        servers = _create_and_wait(compute, caller, data, count or 1)
    else:
        servers = _create_in_background(cli, compute, caller, data)
    guard(lambda: output.emit_list(servers, columns, form, None, column, f"request {caller.request_id}"))
    if form == Format.table:
        for s in servers:
            if s.get("fault"):
                err_console.print(f"{s['name']}: {escape(s['fault']['message'])}", highlight=False)
    # A create whose servers ended in error failed, whatever was printed (scripts and AWX read the status).
    if any(s["status"] == "ERROR" for s in servers):
        raise typer.Exit(1)


def _create_and_wait(
    compute: API, caller: RequestContext, data: dict[str, Any], count: int
) -> list[dict[str, Any]]:
    """Create and build the servers, a progress bar counting the builds that end; say how many
    came up active."""
    from rich.progress import Progress

    from novakit import notifications

    started = time.monotonic()
    with Progress(console=err_console, transient=True) as progress:
        task = progress.add_task(f"building {count} server(s)", total=count)

        def on_note(note: dict[str, Any]) -> None:
            if note["event_type"] in ("instance.create.end", "instance.create.error"):
                progress.advance(task)

        unsubscribe = notifications.subscribe(on_note)
        try:
            servers: list[dict[str, Any]] = guard(lambda: compute.create(caller, data))
        finally:
            unsubscribe()
    active = sum(1 for s in servers if s["status"] == "ACTIVE")
    took = time.monotonic() - started
    err_console.print(f"{active} of {len(servers)} server(s) active in {took:.1f} s", highlight=False)
    return servers


def _create_in_background(
    cli: typer.Context, compute: API, caller: RequestContext, data: dict[str, Any]
) -> list[dict[str, Any]]:
    """Record the servers and hand their build to a background worker, which reads the
    configuration this command was given; say where its log is."""
    from novakit import worker
    from novakit.client.api import CloudAPI

    servers: list[dict[str, Any]] = guard(lambda: compute.create(caller, data, build=False))
    if isinstance(compute, CloudAPI):  # the service builds what it records
        err_console.print(f"{len(servers)} server(s) recorded; novakit serve builds them", highlight=False)
        return servers
    given = cli.find_root().params
    job = worker.Job.for_context(
        caller,
        servers[0]["id"],
        config=str(Path(given["config"]).resolve()) if given.get("config") else None,
        db_url=given.get("db_url"),
        build=[s["id"] for s in servers],
    )
    _, log = worker.start(conf(), job)
    err_console.print(
        f"{len(servers)} server(s) recorded; a background worker builds them (log: {log})",
        highlight=False,
        soft_wrap=True,
    )
    return servers


def _page_size(value: int | None) -> int | None:
    """openstack's --limit: a page size, or -1 for every server (a usage error otherwise)."""
    if value is not None and value != -1 and value < 1:
        raise typer.BadParameter("must be -1 (all) or at least 1")
    return value


def _warn_unanswered(cells: list[str]) -> None:
    """Say which cells did not answer: a listing without them is not the whole of it."""
    for cell in cells:
        err_console.print(
            f"Warning: cell {escape(cell)} did not answer: its servers are listed with status UNKNOWN",
            highlight=False,
        )


def _list_columns(admin: bool, long: bool, chosen: bool) -> list[Col]:
    """The listing's columns (``long``: --long's); with -c (``chosen``) every column is there to
    choose from, those of --long too."""
    columns = long_columns(admin) if long else LIST_COLUMNS
    if not chosen:
        return columns
    shown = {c.header for c in columns}
    return [*columns, *(c for c in long_columns(admin) if c.header not in shown)]


@server_app.command("list")
def server_list(
    status: str | None = typer.Option(None, help="only servers in this status (ACTIVE, SHUTOFF, ERROR, ...)"),
    name: str | None = typer.Option(None, help="only servers whose name matches this regular expression"),
    flavor: str | None = typer.Option(None, help="only servers of this flavor (name or id)"),
    image: str | None = typer.Option(None, help="only servers built from this image (name or id)"),
    host: str | None = typer.Option(None, help="only servers on this host (admin only)"),
    all_projects: bool = typer.Option(False, "--all-projects", help="every project's servers (admin only)"),
    deleted: bool = typer.Option(
        False, "--deleted", help="deleted servers only (your project's; every project's with --all-projects)"
    ),
    long: bool = typer.Option(False, "--long", help="more columns: task and power state, host, zone, ..."),
    limit: int | None = typer.Option(
        None, help="at most this many servers (a page); -1: all", callback=_page_size
    ),
    marker: str | None = typer.Option(None, help="start after this server id (the previous page's last)"),
    sort_key: str = typer.Option("created_at", help="order by created_at, name, vm_state or uuid"),
    sort_dir: str = typer.Option("asc", help="asc or desc"),
    project: str | None = typer.Option(None, help="only this project's servers (another's: admin only)"),
    user: str | None = typer.Option(None, help="only the servers this user created"),
    changes_since: str | None = typer.Option(
        None, help="only servers changed at or after this ISO 8601 time (deleted ones too)"
    ),
    ip: str | None = typer.Option(
        None, help="only servers with an IPv4 address this regular expression matches"
    ),
    ip6: str | None = typer.Option(
        None, help="only servers with an IPv6 address this regular expression matches"
    ),
    sort_column: list[str] | None = output.SORT_COLUMN,
    sort_descending: bool = output.SORT_DESCENDING,
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """List servers (your project's; an admin's --all-projects: every project's)."""
    query = {
        "status": status,
        "name": name,
        "flavor": flavor,
        "image": image,
        "host": host,
        "all_projects": all_projects,
        "deleted": deleted,
        "limit": None if limit == -1 else limit,
        "marker": marker,
        "sort_key": sort_key,
        "sort_dir": sort_dir,
        "project": project,
        "user": user,
        "changes_since": changes_since,
        "ip": ip,
        "ip6": ip6,
    }
    caller = ctx()
    servers, down = guard(lambda: api().list_servers_and_down(caller, query))
    _warn_unanswered(down)
    columns = _list_columns(policy.allowed(caller, "host:show"), long, bool(column))
    servers = guard(lambda: output.sorted_rows(servers, columns, sort_column, sort_descending))
    guard(lambda: output.emit_list(servers, columns, fmt, out, column, "servers"))


DELETED = typer.Option(False, "--deleted", help="a deleted server (of a name: the last deleted)")


@server_app.command("show")
@output.shows(lambda: show_fields(policy.allowed(ctx(), "host:show")), "{name}")
def server_show(server: str = SERVER, deleted: bool = DELETED) -> dict[str, Any]:
    """Show one server: its states, host, addresses, flavor, image, metadata and last fault."""
    found: dict[str, Any] = api().get(ctx(), server, deleted=deleted)
    return found


EVENT_COLUMNS = [
    Col("Action", "action"),
    Col("Request ID", "request_id"),
    Col("Start", "start_time"),
    Col("Finish", "finish_time"),
    Col("Message", "message"),
    Col("Event", "event"),
    Col("Host", "host"),
    Col("Result", "result"),
]


@server_app.command("events")
def server_events(
    server: str = SERVER,
    deleted: bool = DELETED,
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """The server's actions and their events (the audit trail)."""
    acts = guard(lambda: api().list_actions(ctx(), server, deleted=deleted))
    form = guard(lambda: output.chosen(fmt, out))
    if form in (Format.json, Format.yaml) and not column:
        output.dump(acts, form)
        return
    # One row per action, then one per event of it (the action's columns left blank).
    rows: list[dict[str, Any]] = []
    for a in acts:
        rows.append({k: a[k] for k in ("action", "request_id", "start_time", "finish_time", "message")})
        for e in a["events"]:
            rows.append({k: e[k] for k in ("event", "start_time", "finish_time", "host", "result")})
    if form == Format.table:
        blank = {"action": "", "request_id": "", "message": "", "event": "", "host": "", "result": ""}
        rows = [{**blank, **r} for r in rows]
    guard(lambda: output.emit_list(rows, EVENT_COLUMNS, form, None, column, f"actions of {server}"))


server_event_app = group("A server's actions and their events, as openstack server event list/show.")
server_app.add_typer(server_event_app, name="event")


# openstack's name for the same command: one function, registered under both names.
server_event_app.command("list")(server_events)


@server_app.command("console")
def server_console(
    server: str = SERVER,
    lines: int | None = typer.Option(None, help="only the last N lines of the log"),
) -> None:
    """Print the server's console log (its serial console so far), read from its host."""
    import sys

    text = guard(lambda: api().console_output(ctx(), server, lines))
    sys.stdout.write(text if not text or text.endswith("\n") else text + "\n")


def _action(action: str, server: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    s: dict[str, Any] = guard(lambda: api().act(ctx(), server, action, options).server)
    _report(s)
    return s


def _report(s: dict[str, Any]) -> None:
    console.print(f"{s['name']}: {s['status']} (vm_state {s['vm_state']}, power {s['power_state_name']})")
    if s.get("fault") and s["status"] == "ERROR":
        err_console.print(f"fault: {escape(s['fault']['message'])}", highlight=False)


def _each(action: str, servers: list[str], options: dict[str, Any] | None = None) -> None:
    """``action`` on each of ``servers`` in turn, as openstack's commands that take several do:
    one refused is said and the others still go; the command then exits 1, naming how many."""
    from novakit import exceptions

    compute = api()
    failed = 0
    for server in servers:
        try:
            outcome = compute.act(ctx(), server, action, options)
        except exceptions.NovakitError as exc:
            failed += 1
            message = f"{server}: {exc.format_message()}"
            err_console.print(f"[red]Error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
            continue
        if outcome.server is not None:
            _report(outcome.server)
    if failed:
        if len(servers) > 1:
            err_console.print(f"{failed} of {len(servers)} servers failed to {action}", highlight=False)
        raise typer.Exit(1)


SERVERS = typer.Argument(..., help="server names or ids (one or more)", autocompletion=complete_server)
# openstack's --wait: novakit carries an action out in this process, so every command returns
# once its action has finished; the flag is taken so that openstack's command lines work as typed.
WAIT = typer.Option(False, "--wait", help="return when the action has finished (novakit always does)")


@server_app.command("delete")
def server_delete(servers: list[str] = SERVERS, wait: bool = WAIT) -> None:
    """Delete servers: their guests and disks on their hosts, and their claims."""
    _each("delete", servers)


@server_app.command("stop")
def server_stop(
    servers: list[str] = SERVERS,
    timeout: int | None = typer.Option(None, help="seconds of graceful shutdown before forcing it off"),
    wait: bool = WAIT,
) -> None:
    """Shut servers down (SHUTOFF)."""
    _each("stop", servers, {"timeout": timeout})


@server_app.command("start")
def server_start(servers: list[str] = SERVERS, wait: bool = WAIT) -> None:
    """Start stopped servers."""
    _each("start", servers)


@server_app.command("reboot")
def server_reboot(
    server: str = SERVER,
    hard: bool = typer.Option(False, "--hard", help="reset, do not ask the guest"),
) -> None:
    """Reboot a server (soft: the guest is asked; --hard: it is reset)."""
    _action("reboot", server, {"reboot_type": "HARD" if hard else "SOFT"})


#: The actions that take servers and nothing else, each a command of its name: its help.
PLAIN_ACTIONS = {
    "pause": "Pause servers: their vCPUs stop, their memory stays.",
    "unpause": "Unpause paused servers.",
    "suspend": "Suspend servers: their memory is saved to disk.",
    "resume": "Resume suspended servers from their saved memory.",
}


def _plain_action(action: str, help_text: str) -> None:
    def command(servers: list[str] = SERVERS) -> None:
        _each(action, servers)

    server_app.command(action, help=help_text)(command)


for _action_name, _help in PLAIN_ACTIONS.items():
    _plain_action(_action_name, _help)


@server_app.command("lock")
def server_lock(
    servers: list[str] = SERVERS, reason: str | None = typer.Option(None, help="why (shown by server show)")
) -> None:
    """Lock servers: actions on them are refused to non-admins until they are unlocked."""
    _each("lock", servers, {"reason": reason})


@server_app.command("unlock")
def server_unlock(servers: list[str] = SERVERS) -> None:
    """Unlock locked servers."""
    _each("unlock", servers)


@server_app.command("rename")
def server_rename(server: str = SERVER, name: str = typer.Argument(..., help="the new name")) -> None:
    """Give a server a new name."""
    _action("rename", server, {"name": name})


@server_app.command("rebuild")
def server_rebuild(
    server: str = SERVER,
    image: str = typer.Option(..., help="new image name or id"),
    key_name: str | None = typer.Option(None, "--key-name", help="a new key pair for it (default: its own)"),
) -> None:
    """Rebuild a server from an image: a new root disk, the same server (and key, unless --key-name)."""
    _action("rebuild", server, {"image": image, **({"key_name": key_name} if key_name else {})})


@server_app.command("action")
def server_action(
    action: str = typer.Argument(..., help="an action of the state table (novakit states)"),
    servers: list[str] = SERVERS,
    option: list[str] = typer.Option(
        [], "--option", "-o", help="an option of the action, NAME=VALUE (repeat for more)"
    ),
) -> None:
    """Run any action of the state table on servers, by its name: the commands above are its
    short forms, and an action the table gains is here with no command of its own."""
    options: dict[str, Any] = {}
    for given in option:
        name, sep, value = given.partition("=")
        if not sep or not name:
            err_console.print(f"[red]Error:[/red] --option {escape(given)!r}: write it as NAME=VALUE")
            raise typer.Exit(2)
        options[name] = value
    _each(action, servers, options)
