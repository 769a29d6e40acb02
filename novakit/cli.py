"""The ``novakit`` command: the library's functions, for people at a terminal.

Identity is the operator's: ``NOVAKIT_PROJECT``, ``NOVAKIT_USER``, ``NOVAKIT_ROLES`` over the
configuration's ``[identity]`` (default: a member of project ``default``, never an admin);
``--project/--user/--role`` are honoured for an admin (``novakit.context``). Every read command
takes ``--output json``. Errors are one line on stderr and exit status 1; a ``server create`` whose
servers end in error prints them (with their faults) and exits with status 1 too.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from novakit import exceptions
from novakit.config import Config, load_config
from novakit.context import RequestContext, context_from


class _OneLineErrors(TyperGroup):
    """Every error a command raises becomes one line on stderr and exit status 1.

    Here rather than around each call, so that no code path (an option's file,
    a database that is down) can end in a traceback. Internal errors show only
    their class and first line: their text may quote SQL parameters, and those
    can carry user data. ``NOVAKIT_DEBUG=1`` re-raises for the traceback.
    """

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except exceptions.NovakitError as exc:
            _fail(exc.format_message())
        except Exception as exc:
            if type(exc).__module__.startswith("typer") or os.environ.get("NOVAKIT_DEBUG") == "1":
                raise  # typer's own exits and usage errors
            _fail(_describe_internal(exc))


def _describe_internal(exc: BaseException) -> str:
    from sqlalchemy.exc import DBAPIError

    if isinstance(exc, DBAPIError):
        first = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
        return f"database error ({type(exc.orig).__name__}): {first}"
    if isinstance(exc, OSError):
        return f"{exc.strerror or type(exc).__name__}: {exc.filename or ''}".rstrip(": ")
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"internal error ({type(exc).__name__}){': ' + first[:200] if first else ''}"


def _fail(message: str) -> None:
    err_console.print(f"[red]Error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


app = typer.Typer(
    help="Nova-grade scheduling, states and audit for plain libvirt fleets.",
    no_args_is_help=True,
    cls=_OneLineErrors,
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
host_app = typer.Typer(help="Compute hosts.", no_args_is_help=True)
flavor_app = typer.Typer(help="Flavors.", no_args_is_help=True)
image_app = typer.Typer(help="Images.", no_args_is_help=True)
server_app = typer.Typer(help="Servers.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(host_app, name="host")
app.add_typer(flavor_app, name="flavor")
app.add_typer(image_app, name="image")
app.add_typer(server_app, name="server")

# Piped output (a log, `| less`) gets a wide table rather than rich's 80-column default,
# so uuids and host names are not cut; COLUMNS still wins when set.
console = Console() if sys.stdout.isatty() or os.environ.get("COLUMNS") else Console(width=200)
err_console = Console(stderr=True)
T = TypeVar("T")


class Output(StrEnum):
    table = "table"
    json = "json"


class _State:
    conf: Config | None = None
    ctx: RequestContext | None = None


STATE = _State()
OUTPUT = typer.Option(Output.table, "--output", "-o", help="table or json")


@app.callback()
def main_options(
    config: Path | None = typer.Option(None, "--config", help="TOML configuration file"),
    db_url: str | None = typer.Option(None, "--db-url", envvar="NOVAKIT_DB_URL", help="database URL"),
    project: str | None = typer.Option(None, "--project", help="act as this project"),
    user: str | None = typer.Option(None, "--user", help="act as this user"),
    role: list[str] | None = typer.Option(None, "--role", help="a role of the caller (repeat)"),
    request_id: str | None = typer.Option(
        None,
        "--request-id",
        help="tie the call to this request id (default: the Ansible run's, else a new one)",
    ),
) -> None:
    STATE.conf = _guard(lambda: load_config(config, db_url=db_url))
    given = {"project": project, "user": user, "roles": role, "request_id": request_id}
    STATE.ctx = _guard(lambda: context_from(given, identity=_conf().identity))


def _guard(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except exceptions.NovakitError as exc:
        _fail(exc.format_message())
        raise  # unreachable: _fail exits


def _conf() -> Config:
    assert STATE.conf is not None
    return STATE.conf


def _ctx() -> RequestContext:
    assert STATE.ctx is not None
    return STATE.ctx


def _db() -> Any:
    from novakit.db.engine import Database

    return _guard(lambda: Database.from_config(_conf()))


def _api() -> Any:
    from novakit.compute.api import API

    return API(_db(), _conf())


def _json(data: Any) -> None:
    def default(o: Any) -> Any:
        if isinstance(o, dt.datetime):
            return o.isoformat()
        return str(o)

    sys.stdout.write(json.dumps(data, indent=2, default=default) + "\n")


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "-"
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items()) or "-"
    return str(v)


def _table(rows: list[dict[str, Any]], columns: list[str], title: str | None = None) -> None:
    table = Table(title=title)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*(_fmt(row.get(c)) for c in columns))
    console.print(table)


# ----------------------------------------------------------------------- db


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or upgrade the schema to the newest revision."""
    db = _db()
    _guard(db.upgrade_if_needed)
    console.print(f"database at revision {db.current_revision()}")


@app.command("states")
def states_table() -> None:
    """Print the instance state table (actions, allowed states, where they end)."""
    from novakit.compute.states import state_table_markdown

    sys.stdout.write(state_table_markdown() + "\n")


# ----------------------------------------------------------------------- hosts


@host_app.command("add")
def host_add(
    name: str,
    driver: str = typer.Option("fake", help="fake or libvirt"),
    uri: str | None = typer.Option(None, help="libvirt URI (libvirt driver)"),
    vcpus: int | None = typer.Option(None, help="fake driver: vCPUs"),
    memory_mb: int | None = typer.Option(None, help="fake driver: RAM in MB"),
    disk_gb: int | None = typer.Option(None, help="fake driver: disk in GB"),
    option: list[str] | None = typer.Option(None, "--option", help="driver option key=value (repeat)"),
) -> None:
    """Register a host from what its driver reports (in this process)."""
    from novakit.compute import hosts
    from novakit.virt.driver import load_driver

    opts: dict[str, Any] = {}
    for item in option or []:
        key, _, text_value = item.partition("=")
        opts[key] = text_value
    given: dict[str, str | int | None] = {
        "uri": uri,
        "vcpus": vcpus,
        "memory_mb": memory_mb,
        "local_gb": disk_gb,
    }
    opts.update({k: v for k, v in given.items() if v is not None})
    if driver == "fake" and "state_dir" not in opts and not os.environ.get("NOVAKIT_FAKE_STATE_DIR"):
        # Where the compute module keeps fake hosts too, so a playbook and the CLI see the same guests.
        opts["state_dir"] = str(_conf().state_dir / "fake")
    info = {"driver": driver, "options": opts, "transport": "local"}

    def run() -> dict[str, Any]:
        drv = load_driver(driver, name, opts)
        drv.init_host()
        return hosts.register_host(_db(), _conf(), name, drv.get_available_resource(), info, ctx=_ctx())

    result = _guard(run)
    console.print(f"host {result['host']} registered (provider {result['provider_uuid']})")


def _bar(used: int, capacity: int, width: int = 20) -> str:
    if capacity <= 0:
        return "-"
    frac = min(1.0, used / capacity)
    filled = round(frac * width)
    colour = "green" if frac < 0.7 else "yellow" if frac < 0.9 else "red"
    return f"[{colour}]{'█' * filled}[/{colour}]{'░' * (width - filled)} {used}/{capacity}"


@host_app.command("list")
def host_list(output: Output = OUTPUT) -> None:
    """Hosts with status, state (and why a host is down), last contact and usage bars."""
    from novakit.compute import hosts

    rows = _guard(lambda: hosts.list_hosts(_db(), _conf(), ctx=_ctx()))
    if output == Output.json:
        _json(rows)
        return
    table = Table(title="compute hosts")
    for col in ("host", "status", "state", "last contact", "instances", "vCPU", "RAM (MB)", "disk (GB)"):
        table.add_column(col)
    for r in rows:
        status = r["status"] + (f" ({r['disabled_reason']})" if r["disabled_reason"] else "")
        state = r["state"] + (f" ({r['down_reason']})" if r["down_reason"] else "")
        table.add_row(
            r["host"],
            escape(status),
            escape(state),
            _fmt(r["last_contact_at"] or r["last_seen_up"]),
            str(r["instances"]),
            _bar(r["used"]["VCPU"], r["capacity"]["VCPU"]),
            _bar(r["used"]["MEMORY_MB"], r["capacity"]["MEMORY_MB"]),
            _bar(r["used"]["DISK_GB"], r["capacity"]["DISK_GB"]),
        )
    console.print(table)


@host_app.command("heartbeat")
def host_heartbeat(
    host: list[str] | None = typer.Option(None, "--host", help="only this host (repeat)"),
    output: Output = OUTPUT,
) -> None:
    """Ask each host for its resources and record the contact (run it on a schedule when
    compute.heartbeats is on); a host that does not answer is recorded down, with why."""
    from novakit.compute import hosts

    rows = _guard(lambda: hosts.heartbeat(_db(), _conf(), host or None, ctx=_ctx()))
    if output == Output.json:
        _json(rows)
        return
    for r in rows:
        heard = "answered" if r["answered"] else "did not answer"
        why = f" ({escape(r['down_reason'])})" if r["down_reason"] else ""
        console.print(f"host {r['host']} {heard}: {r['state']}{why}", highlight=False)


@host_app.command("down")
def host_down(name: str, reason: str | None = typer.Option(None, help="why (shown by host list)")) -> None:
    """Force a host down (admin only): the scheduler leaves it out until `host up`."""
    from novakit.compute import hosts

    _guard(lambda: hosts.set_forced_down(_db(), _ctx(), name, True, reason))
    console.print(f"host {name} forced down")


@host_app.command("up")
def host_up(name: str) -> None:
    """Lift a forced down (admin only), and a failed contact's mark: the next contact tells again."""
    from novakit.compute import hosts

    _guard(lambda: hosts.set_forced_down(_db(), _ctx(), name, False))
    console.print(f"host {name} up")


@host_app.command("disable")
def host_disable(name: str, reason: str | None = typer.Option(None, help="why")) -> None:
    from novakit.compute import hosts

    _guard(lambda: hosts.set_disabled(_db(), _ctx(), name, True, reason))
    console.print(f"host {name} disabled")


@host_app.command("enable")
def host_enable(name: str) -> None:
    from novakit.compute import hosts

    _guard(lambda: hosts.set_disabled(_db(), _ctx(), name, False))
    console.print(f"host {name} enabled")


# ----------------------------------------------------------------------- flavors and images


@flavor_app.command("create")
def flavor_create(
    name: str,
    vcpus: int = typer.Option(..., help="vCPUs"),
    ram: int = typer.Option(..., help="RAM in MB"),
    disk: int = typer.Option(0, help="root disk in GB"),
    ephemeral: int = typer.Option(0, help="ephemeral disk in GB"),
    swap: int = typer.Option(0, help="swap in MB"),
    flavor_id: str | None = typer.Option(None, "--id", help="flavor id (default: a new uuid)"),
    prop: list[str] | None = typer.Option(None, "--property", help="extra spec key=value (repeat)"),
) -> None:
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
    f = _guard(lambda: flavors.create(_db(), _ctx(), data))
    console.print(f"flavor {f['name']} created ({f['id']})")


@flavor_app.command("list")
def flavor_list(output: Output = OUTPUT) -> None:
    from novakit.compute import flavors

    rows = _guard(lambda: flavors.list_flavors(_db()))
    if output == Output.json:
        _json(rows)
    else:
        _table(rows, ["id", "name", "vcpus", "ram", "disk", "ephemeral", "swap"], "flavors")


@flavor_app.command("delete")
def flavor_delete(name: str) -> None:
    from novakit.compute import flavors

    _guard(lambda: flavors.delete(_db(), _ctx(), name))
    console.print(f"flavor {name} deleted")


@image_app.command("create")
def image_create(
    name: str,
    location: str = typer.Option("", help="path or file:// URL on the compute hosts"),
    disk_format: str = typer.Option("qcow2", help="qcow2, raw, aki, ari, ami"),
    checksum: str | None = typer.Option(None, help="sha256 of the file"),
    prop: list[str] | None = typer.Option(None, "--property", help="image property key=value (repeat)"),
) -> None:
    from novakit.compute import images

    props = dict(p.split("=", 1) for p in (prop or []) if "=" in p)
    data = {
        "name": name,
        "location": location,
        "disk_format": disk_format,
        "checksum": checksum,
        "properties": props,
    }
    i = _guard(lambda: images.create(_db(), _ctx(), data))
    console.print(f"image {i['name']} created ({i['id']})")


@image_app.command("list")
def image_list(output: Output = OUTPUT) -> None:
    from novakit.compute import images

    rows = _guard(lambda: images.list_images(_db()))
    if output == Output.json:
        _json(rows)
    else:
        _table(rows, ["id", "name", "disk_format", "checksum", "location"], "images")


@image_app.command("delete")
def image_delete(name: str) -> None:
    from novakit.compute import images

    _guard(lambda: images.delete(_db(), _ctx(), name))
    console.print(f"image {name} deleted")


# ----------------------------------------------------------------------- servers

SERVER_COLUMNS = ["id", "name", "status", "task_state", "power_state_name", "host", "addresses"]


@server_app.command("create")
def server_create(
    cli: typer.Context,
    name: str,
    flavor: str = typer.Option(..., help="flavor name or id"),
    image: str = typer.Option(..., help="image name or id"),
    count: int | None = typer.Option(
        None, help="how many servers: NAME-1 ... NAME-N (without --count: one server named NAME)"
    ),
    min_count: int | None = typer.Option(None, help="fewer than this is a failure (default: count)"),
    user_data: Path | None = typer.Option(
        None, help="file with cloud-init user data", exists=True, dir_okay=False, readable=True
    ),
    meta: list[str] | None = typer.Option(None, "--meta", help="metadata key=value (repeat)"),
    group: str | None = typer.Option(None, help="server group name or id"),
    availability_zone: str | None = typer.Option(None, help="availability zone"),
    wait: bool = typer.Option(
        True,
        "--wait/--no-wait",
        help="build now and wait (default); --no-wait records the servers (building/scheduling), "
        "hands their build to a background worker and returns, printing the worker's log path",
    ),
    output: Output = OUTPUT,
) -> None:
    """Create servers; with --wait (default) they are built before the command returns.

    With --no-wait a background worker schedules and builds them; `novakit server list`
    shows how far they are.
    """
    from rich.progress import Progress

    api = _api()
    data: dict[str, Any] = {
        "name": name,
        "flavor": flavor,
        "image": image,
        "metadata": dict(m.split("=", 1) for m in (meta or []) if "=" in m),
        "server_group": group,
        "availability_zone": availability_zone,
    }
    # Only the counts given: a request with none is one server named NAME (``novakit.compute.names``).
    if count is not None:
        data["max_count"] = count
    if min_count is not None or count is not None:
        data["min_count"] = min_count or count
    if user_data is not None:
        data["user_data"] = base64.b64encode(user_data.read_bytes()).decode()
    ctx = _ctx()
    started = time.monotonic()
    if not wait:
        from novakit import worker

        servers = _guard(lambda: api.create(ctx, data, build=False))
        # The worker reads the configuration this command was given.
        given = cli.find_root().params
        job = worker.Job.for_context(
            ctx,
            servers[0]["id"],
            config=str(Path(given["config"]).resolve()) if given.get("config") else None,
            db_url=given.get("db_url"),
            build=[s["id"] for s in servers],
        )
        _, log = worker.start(_conf(), job)
        err_console.print(
            f"{len(servers)} server(s) recorded; a background worker builds them (log: {log})",
            highlight=False,
            soft_wrap=True,
        )
    else:
        from novakit import notifications

        with Progress(console=err_console, transient=True) as progress:
            task = progress.add_task(f"building {count or 1} server(s)", total=count or 1)

            def on_note(note: dict[str, Any]) -> None:
                if note["event_type"] in ("instance.create.end", "instance.create.error"):
                    progress.advance(task)

            unsubscribe = notifications.subscribe(on_note)
            try:
                servers = _guard(lambda: api.create(ctx, data))
            finally:
                unsubscribe()
        active = sum(1 for s in servers if s["status"] == "ACTIVE")
        took = time.monotonic() - started
        err_console.print(f"{active} of {len(servers)} server(s) active in {took:.1f} s", highlight=False)
    if output == Output.json:
        _json(servers)
    else:
        _table(servers, SERVER_COLUMNS, f"request {ctx.request_id}")
        for s in servers:
            if s.get("fault"):
                err_console.print(f"{s['name']}: {escape(s['fault']['message'])}", highlight=False)
    # A create whose servers ended in error failed, whatever was printed (scripts and AWX read the status).
    if any(s["status"] == "ERROR" for s in servers):
        raise typer.Exit(1)


@server_app.command("list")
def server_list(
    host: str | None = typer.Option(None, help="only this host"), output: Output = OUTPUT
) -> None:
    servers = _guard(lambda: _api().list(_ctx(), host=host))
    if output == Output.json:
        _json(servers)
    else:
        _table(servers, SERVER_COLUMNS, "servers")


@server_app.command("show")
def server_show(server: str, output: Output = OUTPUT) -> None:
    s = _guard(lambda: _api().get(_ctx(), server))
    if output == Output.json:
        _json(s)
        return
    table = Table(show_header=False, title=s["name"])
    for key in (
        "id",
        "name",
        "status",
        "vm_state",
        "task_state",
        "power_state_name",
        "host",
        "addresses",
        "flavor",
        "image",
        "metadata",
        "locked",
        "locked_reason",
        "created",
        "launched_at",
    ):
        value = s.get(key)
        if key == "flavor" and isinstance(value, dict):
            value = f"{value.get('name')} ({value.get('vcpus')} vCPU, {value.get('memory_mb')} MB)"
        table.add_row(key, _fmt(value))
    if s.get("fault"):
        table.add_row("fault", f"{s['fault']['code']}: {s['fault']['message']}")
    console.print(table)


@server_app.command("events")
def server_events(server: str, output: Output = OUTPUT) -> None:
    """The server's actions and their events (the audit trail)."""
    acts = _guard(lambda: _api().list_actions(_ctx(), server))
    if output == Output.json:
        _json(acts)
        return
    table = Table(title=f"actions of {server}")
    for col in ("action", "request_id", "start", "finish", "message", "event", "host", "result"):
        table.add_column(col)
    for a in acts:
        table.add_row(
            a["action"],
            a["request_id"],
            _fmt(a["start_time"]),
            _fmt(a["finish_time"]),
            _fmt(a["message"]),
            "",
            "",
            "",
        )
        for e in a["events"]:
            table.add_row(
                "",
                "",
                _fmt(e["start_time"]),
                _fmt(e["finish_time"]),
                "",
                e["event"],
                _fmt(e["host"]),
                _fmt(e["result"]),
            )
    console.print(table)


def _action(action: str, server: str, options: dict[str, Any] | None = None) -> None:
    s = _guard(lambda: _api().act(_ctx(), server, action, options).server)
    console.print(f"{s['name']}: {s['status']} (vm_state {s['vm_state']}, power {s['power_state_name']})")
    if s.get("fault") and s["status"] == "ERROR":
        err_console.print(f"fault: {escape(s['fault']['message'])}", highlight=False)


@server_app.command("delete")
def server_delete(server: str) -> None:
    _action("delete", server)


@server_app.command("stop")
def server_stop(
    server: str, timeout: int | None = typer.Option(None, help="graceful shutdown seconds")
) -> None:
    _action("stop", server, {"timeout": timeout})


@server_app.command("start")
def server_start(server: str) -> None:
    _action("start", server)


@server_app.command("reboot")
def server_reboot(server: str, hard: bool = typer.Option(False, "--hard", help="hard reboot")) -> None:
    _action("reboot", server, {"reboot_type": "HARD" if hard else "SOFT"})


@server_app.command("pause")
def server_pause(server: str) -> None:
    _action("pause", server)


@server_app.command("unpause")
def server_unpause(server: str) -> None:
    _action("unpause", server)


@server_app.command("suspend")
def server_suspend(server: str) -> None:
    _action("suspend", server)


@server_app.command("resume")
def server_resume(server: str) -> None:
    _action("resume", server)


@server_app.command("lock")
def server_lock(server: str, reason: str | None = typer.Option(None, help="why")) -> None:
    _action("lock", server, {"reason": reason})


@server_app.command("unlock")
def server_unlock(server: str) -> None:
    _action("unlock", server)


@server_app.command("rename")
def server_rename(server: str, name: str) -> None:
    _action("rename", server, {"name": name})


@server_app.command("rebuild")
def server_rebuild(server: str, image: str = typer.Option(..., help="new image name or id")) -> None:
    _action("rebuild", server, {"image": image})


# ----------------------------------------------------------------------- heal


@app.command("heal")
def heal_command(
    host: list[str] | None = typer.Option(None, "--host", help="only this host (repeat)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="report what would change, change nothing"),
    destroy_orphans: bool = typer.Option(
        False, "--destroy-orphans", help="destroy guests that no server on their host owns"
    ),
    output: Output = OUTPUT,
) -> None:
    """Make the database agree with the hypervisors (power states, vanished guests, stuck builds, orphans)."""
    from novakit.heal import heal

    report = heal(
        _db(), _conf(), hosts=host or None, dry_run=dry_run, destroy_orphans=destroy_orphans, ctx=_ctx()
    )
    if output == Output.json:
        _json(report.model_dump(mode="json"))
        return
    title = f"heal {report.request_id}" + (" (dry run: nothing changed)" if dry_run else "")
    table = Table(title=title)
    for col in ("kind", "instance", "host", "before", "after", "applied", "detail"):
        table.add_column(col)
    for c in report.corrections:
        applied = "yes" if c.applied else ("no: " + c.error if c.error else "no")
        table.add_row(c.kind, c.instance, _fmt(c.host), c.before, c.after, applied, escape(c.detail))
    console.print(table)
    console.print(f"{len(report.corrections)} correction(s) on {len(report.hosts)} host(s)", highlight=False)
    for name, why in sorted(report.unreachable.items()):
        err_console.print(f"host {name} did not answer: {escape(why)}", highlight=False, soft_wrap=True)


#: how much of the playbook's output a failed `novakit boot` shows
BOOT_FAILURE_LINES = 20


@app.command("boot")
def boot_command(
    name: str,
    flavor: str = typer.Option("m1.small", help="flavor name or id"),
    image: str = typer.Option("tiny", help="image name or id"),
    count: int | None = typer.Option(
        None,
        help="the wanted number of servers NAME-1 ... NAME-N: a re-run with another count adds the "
        "missing ones and deletes those numbered above it (without --count: one server named NAME)",
    ),
    inventory: Path | None = typer.Option(None, help="Ansible inventory (default: inventory/local.yml)"),
    user_data: Path | None = typer.Option(None, help="file with cloud-init user data"),
    check: bool = typer.Option(False, "--check", help="check mode: say where they would land"),
    keep_artifacts: bool = typer.Option(
        False,
        "--keep-artifacts",
        help="keep ansible-runner's directory of the run (output, events; never the environment)",
    ),
    output: Output = OUTPUT,
) -> None:
    """Boot servers with playbooks/boot.yml through ansible-runner, showing its progress."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from novakit import runner

    if user_data is not None and not user_data.is_file():
        _fail(f"--user-data: no such file: {user_data}")
    text = user_data.read_text() if user_data is not None else None
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as progress:
        task = progress.add_task("starting ansible-playbook", total=None)

        def on_event(event: dict[str, Any]) -> None:
            data = event.get("event_data") or {}
            if event.get("event") == "playbook_on_task_start" and data.get("task"):
                progress.update(task, description=escape(str(data["task"])))

        result = _guard(
            lambda: runner.boot(
                name,
                flavor=flavor,
                image=image,
                count=count,
                inventory=inventory,
                user_data=text,
                check=check,
                keep_artifacts=keep_artifacts,
                on_event=on_event,
            )
        )
    servers = result.servers
    if output == Output.json:
        _json({"ok": result.ok, "request_id": result.request_id, "servers": servers})
    else:
        _table(servers, ["id", "name", "status", "host", "addresses"], f"request {result.request_id}")
    if result.artifact_dir is not None:
        err_console.print(
            f"the run's artifacts are in {result.artifact_dir}", highlight=False, soft_wrap=True
        )
    if not result.ok:
        if result.artifact_dir is None:
            # The run's directory is gone: its output's end says which task failed and why.
            tail = "\n".join(result.stdout.rstrip().splitlines()[-BOOT_FAILURE_LINES:])
            err_console.print(escape(tail), highlight=False, soft_wrap=True)
        err_console.print(
            f"ansible-playbook failed (rc {result.rc})"
            + ("" if result.artifact_dir is not None else "; --keep-artifacts keeps the whole run"),
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
