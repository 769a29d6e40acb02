"""``novakit server group``: Nova's server groups, through ``novakit.compute.server_groups``
(the functions the ``server_group`` module calls)."""

from __future__ import annotations

import typer

from novakit.cli import output
from novakit.cli.base import console, ctx, db, guard, server_group_app
from novakit.cli.output import COLUMN, FORMAT, OUTPUT, Col, Format

GROUP_COLUMNS = [
    Col("ID", "id"),
    Col("Name", "name"),
    Col("Policy", "policy"),
    Col("Rules", "rules"),
    Col("Members", "members"),
    Col("Project ID", "project_id"),
    Col("User ID", "user_id"),
]
GROUP = typer.Argument(..., help="server group name or id")


@server_group_app.command("create")
def group_create(
    name: str = typer.Argument(..., help="the group's name (unique among your project's groups)"),
    policy: str = typer.Option(..., help="affinity, anti-affinity, soft-affinity or soft-anti-affinity"),
    max_server_per_host: int | None = typer.Option(
        None, help="anti-affinity only: at most this many members on one host"
    ),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Create a server group; servers join it at create (server create --group)."""
    from novakit.compute import server_groups

    rules = {"max_server_per_host": max_server_per_host} if max_server_per_host is not None else {}
    guard(lambda: output.validated(GROUP_COLUMNS, fmt, out, column))
    group = guard(lambda: server_groups.create(db(), ctx(), name, policy, rules))
    guard(lambda: output.emit_show(group, GROUP_COLUMNS, fmt, out, column, f"server group {name}"))


@server_group_app.command("list")
def group_list(
    all_projects: bool = typer.Option(False, "--all-projects", help="every project's groups (admin only)"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """List your project's server groups."""
    from novakit import policy
    from novakit.compute import server_groups

    caller = ctx()
    if all_projects:
        guard(lambda: policy.authorize(caller, "servers:all_projects"))
    rows = guard(lambda: server_groups.list_groups(db(), caller, all_projects=all_projects))
    guard(lambda: output.emit_list(rows, GROUP_COLUMNS[:5], fmt, out, column, "server groups"))


@server_group_app.command("show")
def group_show(
    group: str = GROUP,
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Show a server group: its policy, rules and members."""
    from novakit.compute import server_groups

    found = guard(lambda: server_groups.get(db(), ctx(), group))
    guard(lambda: output.emit_show(found, GROUP_COLUMNS, fmt, out, column, f"server group {found['name']}"))


@server_group_app.command("delete")
def group_delete(group: str = GROUP) -> None:
    """Delete a server group; its members keep running, outside any group."""
    from novakit.compute import server_groups

    gone = guard(lambda: server_groups.delete_group(db(), ctx(), group))
    console.print(f"server group {gone['name']} deleted")
