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
from novakit.cli.base import app, call, console, group, guard, server_add_app, server_remove_app
from novakit.cli.output import Col, Record
from novakit.cli.verbs import Noun

security_app = group(
    "Security groups (Neutron's): which traffic may reach a server's ports and leave them.", app, "security"
)
security_group_app = group(
    "Security groups: a project's named sets of allow rules, carried by ports.", security_app, "group"
)
security_group_rule_app = group(
    "Rules of a security group: direction, ethertype, protocol, ports, remote end.",
    security_group_app,
    "rule",
)
_server_add_security = group("Add a security group to a server.", server_add_app, "security")
_server_remove_security = group("Remove a security group from a server.", server_remove_app, "security")


GROUP_REF = typer.Argument(..., metavar="GROUP", help="group name or id")
SERVER = typer.Argument(..., help="server name or id")


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
_LIBRARY = "novakit.network.security_groups"
SECURITY_GROUP = Noun(security_group_app, "security group", GROUP_SHOW, _LIBRARY, "group_ref", GROUP_REF)
RULE = Noun(
    security_group_rule_app,
    "security group rule",
    RULE_COLUMNS,
    _LIBRARY,
    "rule_id",
    typer.Argument(..., metavar="RULE", help="rule id"),
)


# --- groups --------------------------------------------------------------------------------


@security_group_app.command("create")
@output.shows(GROUP_SHOW, "security group {name}")
def security_group_create(
    name: str = typer.Argument(..., help="the group's name (unique in its project)"),
    description: str | None = typer.Option(None, "--description", help="what the group is for"),
) -> Record | None:
    """Create a security group; it starts with Neutron's egress rules (anywhere, IPv4 and IPv6)."""
    from novakit.network import security_groups

    return call(security_groups.create_group, {"name": name, "description": description})


@security_group_app.command("list")
@output.lists(GROUP_COLUMNS, "security groups")
def security_group_list() -> list[Record]:
    """Your project's security groups (an admin: every project's); your default group is made on first use."""
    from novakit.network import security_groups

    return call(security_groups.list_groups)


SECURITY_GROUP.show(
    "Show a security group and its rules.",
    lambda groups, group_ref: call(groups.show_group, group_ref),
)
SECURITY_GROUP.delete(
    "Delete a security group and its rules; refused while a port carries it, and for default.",
    lambda groups, group_ref: call(groups.delete_group, group_ref),
)


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
@output.shows(RULE_COLUMNS, "security group rule {id}")
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
) -> Record | None:
    """Add a rule to a security group; the filters of the ports carrying it change at once."""
    from novakit.network import security_groups

    low, high = _dst_port(dst_port)
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
    return call(security_groups.create_rule, data)


@security_group_rule_app.command("list")
@output.lists(RULE_COLUMNS, "security group rules")
def security_group_rule_list(
    group_ref: str | None = typer.Argument(None, metavar="[GROUP]", help="only this group's rules"),
) -> list[Record]:
    """The rules of a group, or of every group you see."""
    from novakit.network import security_groups

    return call(security_groups.list_rules, group_ref)


RULE.show("Show a rule.", lambda groups, rule_id: call(groups.show_rule, rule_id), "{noun} {id}")
RULE.delete(
    "Delete a rule; the filters of the ports carrying its group change at once.",
    lambda groups, rule_id: call(groups.delete_rule, rule_id),
)


# --- a server's groups ---------------------------------------------------------------------


@_server_add_security.command("group")
def server_add_security_group(server: str = SERVER, group_ref: str = GROUP_REF) -> None:
    """Every port of the server carries the group from now on (its filters change live)."""
    from novakit.network import security_groups

    guard(lambda: call(security_groups.add_to_server, server, group_ref))
    console.print(f"security group {group_ref} added to server {server}")


@_server_remove_security.command("group")
def server_remove_security_group(server: str = SERVER, group_ref: str = GROUP_REF) -> None:
    """No port of the server carries the group any more (its filters change live)."""
    from novakit.network import security_groups

    guard(lambda: call(security_groups.remove_from_server, server, group_ref))
    console.print(f"security group {group_ref} removed from server {server}")
