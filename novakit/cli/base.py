"""What every ``novakit`` command shares: the app and its groups, the caller, one-line errors.

Identity is the operator's: ``NOVAKIT_PROJECT``, ``NOVAKIT_USER``, ``NOVAKIT_ROLES`` over the
configuration's ``[identity]`` (default: a member of project ``default``, never an admin);
``--project/--user/--role`` are honoured for an admin (``novakit.context``). Errors are one line
on stderr and exit status 1.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from novakit import exceptions
from novakit.config import Config, load_config
from novakit.context import RequestContext, context_from

T = TypeVar("T")


def _no_flag_values(params: list[Any]) -> list[Any]:
    """Typer labels every option with its type, which makes ``--hard <bool>`` read as if it took
    a value. A flag takes none: it is shown without one."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class _Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _no_flag_values(super().get_params(ctx))


class _OneLineErrors(_Group):
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
            fail(exc.format_message())
        except Exception as exc:
            if type(exc).__module__.startswith("typer") or os.environ.get("NOVAKIT_DEBUG") == "1":
                raise  # typer's own exits and usage errors
            fail(_describe_internal(exc))


class Command(TyperCommand):
    """A command whose flags show no value in its help (``_no_flag_values``)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _no_flag_values(super().get_params(ctx))


def _describe_internal(exc: BaseException) -> str:
    from sqlalchemy.exc import DBAPIError

    if isinstance(exc, DBAPIError):
        first = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
        return f"database error ({type(exc.orig).__name__}): {first}"
    if isinstance(exc, OSError):
        return f"{exc.strerror or type(exc).__name__}: {exc.filename or ''}".rstrip(": ")
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"internal error ({type(exc).__name__}){': ' + first[:200] if first else ''}"


def fail(message: str) -> None:
    err_console.print(f"[red]Error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


class _Typer(typer.Typer):
    """Every command of the app is a ``Command``."""

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", Command)
        return super().command(*args, **kwargs)


def group(help_text: str, parent: typer.Typer | None = None, name: str | None = None) -> typer.Typer:
    """A group of commands; with ``parent``, mounted under it as ``name``."""
    commands = _Typer(help=help_text, no_args_is_help=True, cls=_Group)
    if parent is not None:
        parent.add_typer(commands, name=name)
    return commands


app = _Typer(
    help="Nova-grade scheduling, states and audit for plain libvirt fleets.",
    no_args_is_help=True,
    cls=_OneLineErrors,
)
#: The command groups below the root, by their path on the command line, in the order ``--help``
#: lists them: what it says of each. A group's parent is its path less the last word; the
#: module named for the noun adds its commands (and groups of its own, as ``security group``).
GROUPS = {
    "db": "Database schema.",
    "cell": "Cells: the databases servers live in (Nova's cells v2), as nova-manage cell_v2.",
    "host": "Compute hosts: register, list, enable/disable, force down, delete.",
    "flavor": "Flavors: the sizes servers are built with.",
    "image": "Images: the disks servers are built from.",
    "server": "Servers: create, list, show, act on them, read their audit trail and console.",
    "server group": "Server groups: affinity and anti-affinity policies for the servers in them.",
    "volume": "Volumes: disks in a host's storage pool that outlive servers (Cinder's volumes).",
    "server add": "Add a volume or a security group to a server.",
    "server remove": "Remove a volume or a security group from a server.",
    "network": "Networks: the libvirt networks and bridges servers' ports are on (Neutron's networks).",
    "subnet": "Subnets: a network's address range, gateway, DNS servers and allocation pools.",
    "port": "Ports: a MAC and fixed IPs on a network, for a server (Neutron's ports).",
    "migration": "Migrations: servers moved between hosts.",
}


def _mounted(groups: dict[str, str]) -> dict[str, typer.Typer]:
    """Each group of ``groups`` made and mounted under its parent, by path ("": the root)."""
    mounted: dict[str, typer.Typer] = {"": app}
    for path, help_text in groups.items():
        parent, _, name = path.rpartition(" ")
        mounted[path] = group(help_text, mounted[parent], name)
    return mounted


_MOUNTED = _mounted(GROUPS)

db_app = _MOUNTED["db"]
cell_app = _MOUNTED["cell"]
host_app = _MOUNTED["host"]
flavor_app = _MOUNTED["flavor"]
image_app = _MOUNTED["image"]
server_app = _MOUNTED["server"]
server_group_app = _MOUNTED["server group"]
volume_app = _MOUNTED["volume"]
server_add_app = _MOUNTED["server add"]
server_remove_app = _MOUNTED["server remove"]
network_app = _MOUNTED["network"]
subnet_app = _MOUNTED["subnet"]
port_app = _MOUNTED["port"]
migration_app = _MOUNTED["migration"]

# Piped output (a log, `| less`) gets a wide table rather than rich's 80-column default,
# so uuids and host names are not cut; COLUMNS still wins when set.
console = Console() if sys.stdout.isatty() or os.environ.get("COLUMNS") else Console(width=200)
err_console = Console(stderr=True)


class _State:
    conf: Config | None = None
    ctx: RequestContext | None = None
    cloud: str | None = None  # the cloud the command goes through (``novakit.client``), else None
    cloud_api: Any = None
    db_url: str | None = None  # --db-url (or NOVAKIT_DB_URL), as given


STATE = _State()


@app.callback()
def main_options(
    config: Path | None = typer.Option(None, "--config", help="TOML configuration file"),
    db_url: str | None = typer.Option(None, "--db-url", envvar="NOVAKIT_DB_URL", help="database URL"),
    project: str | None = typer.Option(None, "--project", help="act as this project (admins)"),
    user: str | None = typer.Option(None, "--user", help="act as this user (admins)"),
    role: list[str] | None = typer.Option(None, "--role", help="a role of the caller (repeat; admins)"),
    request_id: str | None = typer.Option(
        None,
        "--request-id",
        help="tie the call to this request id (default: the Ansible run's, else a new one)",
    ),
    os_cloud: str | None = typer.Option(
        None,
        "--os-cloud",
        help="go through novakit serve as this cloud of clouds.yaml (default: OS_CLOUD, unless a "
        "database URL is given); no database URL is then needed",
    ),
) -> None:
    from novakit.client import cloud_name, refuse_identity

    STATE.conf = guard(lambda: load_config(config, db_url=db_url))
    STATE.cloud = cloud_name(os_cloud, db_url)
    STATE.db_url = db_url
    given = {"project": project, "user": user, "roles": role, "request_id": request_id}
    if STATE.cloud is not None:
        cloud = STATE.cloud
        guard(lambda: refuse_identity({"--project": project, "--user": user, "--role": role}, cloud))
        return  # the caller is the cloud's token's, read when a command first needs it (``ctx``)
    STATE.ctx = guard(lambda: context_from(given, identity=conf().identity))


def playbook_env() -> dict[str, str]:
    """What a playbook the command runs (``novakit boot``) needs in its environment to take the
    command's path: through its cloud (``OS_CLOUD``, and no database URL, which would win), or
    the database URL the command was given."""
    if STATE.cloud is not None:
        env = {"OS_CLOUD": STATE.cloud, "NOVAKIT_DB_URL": ""}
        if os.environ.get("OS_CLIENT_CONFIG_FILE"):
            env["OS_CLIENT_CONFIG_FILE"] = os.environ["OS_CLIENT_CONFIG_FILE"]
        return env
    return {"NOVAKIT_DB_URL": STATE.db_url} if STATE.db_url else {}


def key_values(given: list[str] | None, option: str = "--property") -> dict[str, str]:
    """``KEY=VALUE`` items of a repeated option; one without ``=`` or a key is refused, never dropped."""
    pairs: dict[str, str] = {}
    for item in given or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise exceptions.ValidationError(option, f"{item!r} must be KEY=VALUE")
        pairs[key] = value
    return pairs


def guard(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except exceptions.NovakitError as exc:
        fail(exc.format_message())
        raise  # unreachable: fail exits


def conf() -> Config:
    assert STATE.conf is not None
    return STATE.conf


def ctx() -> RequestContext:
    if STATE.ctx is None and STATE.cloud is not None:
        STATE.ctx = guard(lambda: api().caller())
    assert STATE.ctx is not None
    return STATE.ctx


def db() -> Any:
    """The database, for the commands that open it (the operator path)."""
    from novakit.db.engine import Database

    if STATE.cloud is not None:
        from novakit.client import opens_database

        fail(opens_database(STATE.cloud, "this command", "--db-url"))
    return guard(lambda: Database.from_config(conf()))


def push_on_change() -> Callable[[list[str]], None]:
    """What a change calls with the ports whose filters it changed (a call's ``on_change`` in the
    command's process): their hosts get them now; a host that could not take one is a warning,
    and heal applies it later."""

    def push(port_uuids: list[str]) -> None:
        from novakit.network import filter_sync

        failed = filter_sync.push_filters(api().conductor.rpc, ctx().request_id, port_uuids)
        for port, why in sorted(failed.items()):
            err_console.print(
                f"warning: the filter of port {port} was not applied on its host ({why}); heal applies it"
            )

    return push


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A library front-door call with the command's database, configuration and caller, given by
    name (``novakit.client.calls``); through a cloud, the service runs it with its own and the
    token's caller (``CloudAPI.call``)."""
    if STATE.cloud is not None:
        answered: T = api().call(fn, *args, **kwargs)
        return answered
    from novakit.client.calls import run_here

    provide = {
        "db": db,
        "conf": conf,
        "ctx": ctx,
        "on_change": push_on_change,
        "svc": lambda: api().conductor,
        "api": api,
        "later": lambda: None,
    }
    done: T = run_here(fn, provide, args, kwargs)
    return done


def api() -> Any:
    """The library's API, or through a cloud the same calls to novakit serve (``novakit.client``)."""
    from novakit.compute.api import API

    if STATE.cloud is not None:
        if STATE.cloud_api is None:
            from novakit.client.api import connect

            STATE.cloud_api = guard(lambda: connect(str(STATE.cloud)))
        return STATE.cloud_api
    return API(db(), conf())
