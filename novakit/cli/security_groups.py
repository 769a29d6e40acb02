"""``novakit security group`` and ``security group rule``; ``server add/remove security group``.

openstack's verbs and flags (``--dst-port 22:22``, ``--remote-ip``, ``--remote-group``,
``--ingress/--egress``). A change that alters ports' filters sends them to the ports' hosts
(``filter_sync.push_filters``); a host that could not take one is named on stderr, and heal
applies it later.
"""

from __future__ import annotations

from typing import Any

import typer

from novakit.cli import output
from novakit.cli.base import (
    api,
    app,
    conf,
    console,
    ctx,
    db,
    err_console,
    group,
    guard,
    server_add_app,
    server_remove_app,
)
from novakit.cli.output import COLUMN, FORMAT, OUTPUT, Col, Format

security_app = group("Security groups (Neutron's): which traffic may reach a server's ports and leave them.")
security_group_app = group("Security groups: a project's named sets of allow rules, carried by ports.")
security_group_rule_app = group(
    "Rules of a security group: direction, ethertype, protocol, ports, remote end."
)
app.add_typer(security_app, name="security")
security_app.add_typer(security_group_app, name="group")
security_group_app.add_typer(security_group_rule_app, name="rule")
_server_add_security = group("Add a security group to a server.")
_server_remove_security = group("Remove a security group from a server.")
server_add_app.add_typer(_server_add_security, name="security")
server_remove_app.add_typer(_server_remove_security, name="security")


def _port_range(r: dict[str, Any]) -> str:
    low, high = r["port_range_min"], r["port_range_max"]
    if low is None and high is None:
        return ""
    return f"{low}:{high}"


RULE_COLUMNS = [
    Col("ID", "id"),
    Col("IP Protocol", "protocol"),
    Col("Ethertype", "ethertype"),
    Col("IP Range", "remote_ip_prefix"),
    Col("Port Range", _port_range),
    Col("Direction", "direction"),
    Col("Remote Security Group", "remote_group"),
    Col("Security Group", "security_group"),
]


def _rule_line(r: dict[str, Any]) -> str:
    parts = [r["direction"], r["ethertype"], r["protocol"] or "any"]
    if _port_range(r):
        parts.append(_port_range(r))
    if r["remote_group"]:
        parts.append(
            f"from group {r['remote_group']}"
            if r["direction"] == "ingress"
            else f"to group {r['remote_group']}"
        )
    elif r["remote_ip_prefix"]:
        parts.append(r["remote_ip_prefix"])
    return " ".join(parts)


GROUP_COLUMNS = [
    Col("ID", "id"),
    Col("Name", "name"),
    Col("Description", "description"),
    Col("Project", "project_id"),
]
GROUP_SHOW = [
    *GROUP_COLUMNS,
    Col("Rules", lambda g: "\n".join(_rule_line(r) for r in g["security_group_rules"])),
]


def _push() -> Any:
    """What a change calls with the ports whose filters it changed: their hosts get them now."""

    def push(port_uuids: list[str]) -> None:
        from novakit.network import filter_sync

        failed = filter_sync.push_filters(api().conductor.rpc, ctx().request_id, port_uuids)
        for port, why in sorted(failed.items()):
            err_console.print(
                f"warning: the filter of port {port} was not applied on its host ({why}); heal applies it"
            )

    return push


# --- groups --------------------------------------------------------------------------------


@security_group_app.command("create")
def security_group_create(
    name: str = typer.Argument(..., help="the group's name (unique in its project)"),
    description: str | None = typer.Option(None, "--description", help="what the group is for"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Create a security group; it starts with Neutron's egress rules (anywhere, IPv4 and IPv6)."""
    from novakit.network import security_groups

    guard(lambda: output.validated(GROUP_SHOW, fmt, out, column))
    made = guard(
        lambda: security_groups.create_group(db(), conf(), ctx(), {"name": name, "description": description})
    )
    assert made is not None
    guard(lambda: output.emit_show(made, GROUP_SHOW, fmt, out, column, f"security group {name}"))


@security_group_app.command("list")
def security_group_list(
    fmt: Format | None = FORMAT, out: Format | None = OUTPUT, column: list[str] | None = COLUMN
) -> None:
    """Your project's security groups (an admin: every project's); your default group is made on first use."""
    from novakit.network import security_groups

    rows = guard(lambda: security_groups.list_groups(db(), ctx()))
    guard(lambda: output.emit_list(rows, GROUP_COLUMNS, fmt, out, column, "security groups"))


@security_group_app.command("show")
def security_group_show(
    group_ref: str = typer.Argument(..., metavar="GROUP", help="group name or id"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Show a security group and its rules."""
    from novakit.network import security_groups

    found = guard(lambda: security_groups.show_group(db(), ctx(), group_ref))
    guard(lambda: output.emit_show(found, GROUP_SHOW, fmt, out, column, f"security group {found['name']}"))


@security_group_app.command("delete")
def security_group_delete(
    group_ref: str = typer.Argument(..., metavar="GROUP", help="group name or id"),
) -> None:
    """Delete a security group and its rules; refused while a port carries it, and for default."""
    from novakit.network import security_groups

    guard(lambda: security_groups.delete_group(db(), ctx(), group_ref, on_change=_push()))
    console.print(f"security group {group_ref} deleted")


# --- rules ---------------------------------------------------------------------------------


def _dst_port(text: str | None) -> tuple[int | None, int | None]:
    """``22``, ``8000:8080``; for ICMP ``TYPE:CODE`` (openstack's --dst-port)."""
    from novakit import exceptions

    if text is None:
        return None, None
    low, sep, high = text.partition(":")
    try:
        first = int(low)
        return first, int(high) if sep else first
    except ValueError:
        raise exceptions.ValidationError(
            "--dst-port", f"{text!r} must be a port or a range PORT:PORT (ICMP: TYPE:CODE)"
        ) from None


@security_group_rule_app.command("create")
def security_group_rule_create(
    group_ref: str = typer.Argument(..., metavar="GROUP", help="the group the rule is added to"),
    protocol: str | None = typer.Option(
        None, "--protocol", help="tcp, udp, icmp, ipv6-icmp, another name or number 0-255, or any (default)"
    ),
    dst_port: str | None = typer.Option(
        None, "--dst-port", help="destination port or range PORT:PORT (for ICMP: TYPE or TYPE:CODE)"
    ),
    remote_ip: str | None = typer.Option(
        None, "--remote-ip", help="the other end's CIDR (default: anywhere)"
    ),
    remote_group: str | None = typer.Option(
        None, "--remote-group", help="the other end: the ports carrying this group of your project"
    ),
    ingress: bool = typer.Option(
        True, "--ingress/--egress", help="traffic to the server (default) or from it"
    ),
    ethertype: str = typer.Option("IPv4", "--ethertype", help="IPv4 (default) or IPv6"),
    description: str | None = typer.Option(None, "--description", help="what the rule is for"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Add a rule to a security group; the filters of the ports carrying it change at once."""
    from novakit.network import security_groups

    guard(lambda: output.validated(RULE_COLUMNS, fmt, out, column))
    low, high = guard(lambda: _dst_port(dst_port))
    data = {
        "security_group": group_ref,
        "direction": "ingress" if ingress else "egress",
        "ethertype": ethertype,
        "protocol": protocol,
        "port_range_min": low,
        "port_range_max": high,
        "remote_ip_prefix": remote_ip,
        "remote_group": remote_group,
        "description": description,
    }
    rule = guard(lambda: security_groups.create_rule(db(), conf(), ctx(), data, on_change=_push()))
    assert rule is not None
    guard(lambda: output.emit_show(rule, RULE_COLUMNS, fmt, out, column, f"security group rule {rule['id']}"))


@security_group_rule_app.command("list")
def security_group_rule_list(
    group_ref: str | None = typer.Argument(None, metavar="[GROUP]", help="only this group's rules"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """The rules of a group, or of every group you see."""
    from novakit.network import security_groups

    rows = guard(lambda: security_groups.list_rules(db(), ctx(), group_ref))
    guard(lambda: output.emit_list(rows, RULE_COLUMNS, fmt, out, column, "security group rules"))


@security_group_rule_app.command("show")
def security_group_rule_show(
    rule_id: str = typer.Argument(..., metavar="RULE", help="rule id"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Show a rule."""
    from novakit.network import security_groups

    rule = guard(lambda: security_groups.show_rule(db(), ctx(), rule_id))
    guard(lambda: output.emit_show(rule, RULE_COLUMNS, fmt, out, column, f"security group rule {rule_id}"))


@security_group_rule_app.command("delete")
def security_group_rule_delete(rule_id: str = typer.Argument(..., metavar="RULE", help="rule id")) -> None:
    """Delete a rule; the filters of the ports carrying its group change at once."""
    from novakit.network import security_groups

    guard(lambda: security_groups.delete_rule(db(), ctx(), rule_id, on_change=_push()))
    console.print(f"security group rule {rule_id} deleted")


# --- a server's groups ---------------------------------------------------------------------


@_server_add_security.command("group")
def server_add_security_group(
    server: str = typer.Argument(..., help="server name or id"),
    group_ref: str = typer.Argument(..., metavar="GROUP", help="group name or id"),
) -> None:
    """Every port of the server carries the group from now on (its filters change live)."""
    from novakit.network import security_groups

    guard(lambda: security_groups.add_to_server(db(), ctx(), server, group_ref, on_change=_push()))
    console.print(f"security group {group_ref} added to server {server}")


@_server_remove_security.command("group")
def server_remove_security_group(
    server: str = typer.Argument(..., help="server name or id"),
    group_ref: str = typer.Argument(..., metavar="GROUP", help="group name or id"),
) -> None:
    """No port of the server carries the group any more (its filters change live)."""
    from novakit.network import security_groups

    guard(lambda: security_groups.remove_from_server(db(), ctx(), server, group_ref, on_change=_push()))
    console.print(f"security group {group_ref} removed from server {server}")
