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


def group(help_text: str) -> typer.Typer:
    return _Typer(help=help_text, no_args_is_help=True, cls=_Group)


app = _Typer(
    help="Nova-grade scheduling, states and audit for plain libvirt fleets.",
    no_args_is_help=True,
    cls=_OneLineErrors,
)
db_app = group("Database schema.")
host_app = group("Compute hosts: register, list, enable/disable, force down, delete.")
flavor_app = group("Flavors: the sizes servers are built with.")
image_app = group("Images: the disks servers are built from.")
server_app = group("Servers: create, list, show, act on them, read their audit trail and console.")
server_group_app = group("Server groups: affinity and anti-affinity policies for the servers in them.")
cell_app = group("Cells: the databases servers live in (Nova's cells v2), as nova-manage cell_v2.")
app.add_typer(db_app, name="db")
app.add_typer(cell_app, name="cell")
app.add_typer(host_app, name="host")
app.add_typer(flavor_app, name="flavor")
app.add_typer(image_app, name="image")
app.add_typer(server_app, name="server")
server_app.add_typer(server_group_app, name="group")
volume_app = group("Volumes: disks in a host's storage pool that outlive servers (Cinder's volumes).")
server_add_app = group("Add a volume or a security group to a server.")
server_remove_app = group("Remove a volume or a security group from a server.")
app.add_typer(volume_app, name="volume")
server_app.add_typer(server_add_app, name="add")
server_app.add_typer(server_remove_app, name="remove")
network_app = group("Networks: the libvirt networks and bridges servers' ports are on (Neutron's networks).")
subnet_app = group("Subnets: a network's address range, gateway, DNS servers and allocation pools.")
port_app = group("Ports: a MAC and fixed IPs on a network, for a server (Neutron's ports).")
app.add_typer(network_app, name="network")
app.add_typer(subnet_app, name="subnet")
app.add_typer(port_app, name="port")
migration_app = group("Migrations: servers moved between hosts.")
app.add_typer(migration_app, name="migration")

# Piped output (a log, `| less`) gets a wide table rather than rich's 80-column default,
# so uuids and host names are not cut; COLUMNS still wins when set.
console = Console() if sys.stdout.isatty() or os.environ.get("COLUMNS") else Console(width=200)
err_console = Console(stderr=True)


class _State:
    conf: Config | None = None
    ctx: RequestContext | None = None


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
) -> None:
    STATE.conf = guard(lambda: load_config(config, db_url=db_url))
    given = {"project": project, "user": user, "roles": role, "request_id": request_id}
    STATE.ctx = guard(lambda: context_from(given, identity=conf().identity))


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
    assert STATE.ctx is not None
    return STATE.ctx


def db() -> Any:
    from novakit.db.engine import Database

    return guard(lambda: Database.from_config(conf()))


def api() -> Any:
    from novakit.compute.api import API

    return API(db(), conf())
