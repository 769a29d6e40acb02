"""``novakit server group``: Nova's server groups, through ``novakit.compute.server_groups``
(the functions the ``server_group`` module calls)."""

from __future__ import annotations

import typer

from novakit.cli import output
from novakit.cli.base import call, ctx, server_group_app
from novakit.cli.output import Col, Record
from novakit.cli.verbs import Noun

GROUP_COLUMNS = [
    Col("ID", "id"),
    Col("Name", "name"),
    Col("Policy", "policy"),
    Col("Rules", "rules"),
    Col("Members", "members"),
    Col("Project ID", "project_id"),
    Col("User ID", "user_id"),
]
SERVER_GROUP = Noun(server_group_app, "server group", GROUP_COLUMNS, "novakit.compute.server_groups", "group")


@server_group_app.command("create")
@output.shows(GROUP_COLUMNS, "server group {name}")
def group_create(
    name: str = typer.Argument(..., help="the group's name (unique among your project's groups)"),
    policy: str = typer.Option(..., help="affinity, anti-affinity, soft-affinity or soft-anti-affinity"),
    max_server_per_host: int | None = typer.Option(
        None, help="anti-affinity only: at most this many members on one host"
    ),
) -> Record:
    """Create a server group; servers join it at create (server create --group)."""
    from novakit.compute import server_groups

    rules = {"max_server_per_host": max_server_per_host} if max_server_per_host is not None else {}
    return call(server_groups.create, name, policy, rules)


@server_group_app.command("list")
@output.lists(GROUP_COLUMNS[:5], "server groups")
def group_list(
    all_projects: bool = typer.Option(False, "--all-projects", help="every project's groups (admin only)"),
) -> list[Record]:
    """List your project's server groups."""
    from novakit import policy
    from novakit.compute import server_groups

    caller = ctx()
    if all_projects:
        policy.authorize(caller, "servers:all_projects")
    return call(server_groups.list_groups, all_projects=all_projects)


SERVER_GROUP.show(
    "Show a server group: its policy, rules and members.",
    lambda server_groups, group: call(server_groups.get, group),
)
SERVER_GROUP.delete(
    "Delete a server group; its members keep running, outside any group.",
    lambda server_groups, group: call(server_groups.delete_group, group),
    lambda gone, _group: gone["name"],
)
