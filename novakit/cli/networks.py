"""``novakit network``, ``novakit subnet`` and ``novakit port``: openstack's verbs and flags."""

from __future__ import annotations

import functools

import typer

from novakit.cli import output
from novakit.cli.base import console, ctx, db, guard, network_app, port_app, subnet_app
from novakit.cli.output import COLUMN, FORMAT, OUTPUT, Col, Format

NETWORK_COLUMNS = [
    Col("ID", "id"),
    Col("Name", "name"),
    Col("Provider", "provider"),
    Col("Source", "source"),
    Col("Default", "is_default"),
    Col("Subnets", lambda r: ", ".join(r["subnets"])),
]
SUBNET_COLUMNS = [
    Col("ID", "id"),
    Col("Name", "name"),
    Col("Network", "network"),
    Col("Subnet", "cidr"),
    Col("Gateway", "gateway_ip"),
    Col("DNS Nameservers", lambda r: ", ".join(r["dns_nameservers"])),
    Col("Allocation Pools", lambda r: ", ".join(f"{p['start']}-{p['end']}" for p in r["allocation_pools"])),
]
PORT_COLUMNS = [
    Col("ID", "id"),
    Col("Name", "name"),
    Col("Network", "network"),
    Col("MAC Address", "mac_address"),
    Col("Fixed IP Addresses", lambda r: ", ".join(ip["ip_address"] for ip in r["fixed_ips"])),
    Col("Device ID", "device_id"),
    Col("Host", "binding_host"),
    Col("Status", "status"),
]
PORT_SHOW = [
    *PORT_COLUMNS,
    Col("Port Security", lambda r: "enabled" if r.get("port_security_enabled") else "disabled"),
    Col("Security Groups", lambda r: ", ".join(r.get("security_groups") or [])),
]


def _pairs(text: str, option: str, keys: set[str]) -> dict[str, str]:
    """``key=value,key=value`` as openstack's options take them; a bad one is refused by name."""
    from novakit import exceptions

    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or key not in keys or not value:
            raise exceptions.ValidationError(
                option, f"{text!r} must be {','.join(sorted(keys))} as key=value pairs"
            )
        out[key] = value
    return out


# --- networks ----------------------------------------------------------------------


@network_app.command("create")
def network_create(
    name: str = typer.Argument(..., help="the network's name"),
    provider: str = typer.Option("network", help="network (a libvirt network) or bridge (a host bridge)"),
    source: str | None = typer.Option(None, help="its name on the hosts (default: the network's name)"),
    default: bool = typer.Option(False, "--default", help="servers that name no network get a port on it"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Create a network (admin only)."""
    from novakit.network import networks

    data = {"name": name, "provider": provider, "source": source, "is_default": default}
    guard(lambda: output.validated(NETWORK_COLUMNS, fmt, out, column))
    net = guard(lambda: networks.create(db(), ctx(), data))
    assert net is not None
    guard(lambda: output.emit_show(net, NETWORK_COLUMNS, fmt, out, column, f"network {name}"))


@network_app.command("list")
def network_list(
    fmt: Format | None = FORMAT, out: Format | None = OUTPUT, column: list[str] | None = COLUMN
) -> None:
    """The networks servers can be plugged into."""
    from novakit.network import networks

    rows = guard(lambda: networks.list_networks(db()))
    guard(lambda: output.emit_list(rows, NETWORK_COLUMNS, fmt, out, column, "networks"))


@network_app.command("show")
def network_show(
    network: str = typer.Argument(..., help="network name or id"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Show a network and its subnets."""
    from novakit.network import networks

    net = guard(lambda: networks.show(db(), network))
    guard(lambda: output.emit_show(net, NETWORK_COLUMNS, fmt, out, column, f"network {net['name']}"))


@network_app.command("delete")
def network_delete(network: str = typer.Argument(..., help="network name or id")) -> None:
    """Delete a network and its subnets (admin only); refused while ports are on it."""
    from novakit.network import networks

    guard(lambda: networks.delete(db(), ctx(), network))
    console.print(f"network {network} deleted")


# --- subnets -----------------------------------------------------------------------


@subnet_app.command("create")
def subnet_create(
    name: str = typer.Argument(..., help="the subnet's name"),
    network: str = typer.Option(..., help="network name or id"),
    subnet_range: str = typer.Option(..., help="the IPv4 range in CIDR notation, e.g. 10.0.0.0/24"),
    gateway: str | None = typer.Option(None, help="gateway address (default: the range's first address)"),
    dns_nameserver: list[str] | None = typer.Option(None, help="DNS server address (repeat)"),
    allocation_pool: list[str] | None = typer.Option(
        None, help="start=IP,end=IP (repeat; default: the range less network, broadcast and gateway)"
    ),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Create a subnet on a network (admin only)."""
    from novakit.network import subnets

    pools = [
        guard(functools.partial(_pairs, p, "allocation_pool", {"start", "end"}))
        for p in allocation_pool or []
    ]
    data = {
        "name": name,
        "network": network,
        "cidr": subnet_range,
        "gateway_ip": gateway,
        "dns_nameservers": list(dns_nameserver or []),
        "allocation_pools": pools,
    }
    guard(lambda: output.validated(SUBNET_COLUMNS, fmt, out, column))
    sub = guard(lambda: subnets.create(db(), ctx(), data))
    assert sub is not None
    guard(lambda: output.emit_show(sub, SUBNET_COLUMNS, fmt, out, column, f"subnet {name}"))


@subnet_app.command("list")
def subnet_list(
    network: str | None = typer.Option(None, help="only this network's subnets"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """The subnets of every network (or of one)."""
    from novakit.network import subnets

    rows = guard(lambda: subnets.list_subnets(db(), network))
    guard(lambda: output.emit_list(rows, SUBNET_COLUMNS, fmt, out, column, "subnets"))


@subnet_app.command("show")
def subnet_show(
    subnet: str = typer.Argument(..., help="subnet name or id"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Show a subnet."""
    from novakit.network import subnets

    sub = guard(lambda: subnets.show(db(), subnet))
    guard(lambda: output.emit_show(sub, SUBNET_COLUMNS, fmt, out, column, f"subnet {sub['name']}"))


@subnet_app.command("delete")
def subnet_delete(subnet: str = typer.Argument(..., help="subnet name or id")) -> None:
    """Delete a subnet (admin only); refused while any of its addresses is allocated."""
    from novakit.network import subnets

    guard(lambda: subnets.delete(db(), ctx(), subnet))
    console.print(f"subnet {subnet} deleted")


# --- ports -------------------------------------------------------------------------


@port_app.command("create")
def port_create(
    name: str = typer.Argument(..., help="the port's name"),
    network: str = typer.Option(..., help="network name or id"),
    fixed_ip: str | None = typer.Option(None, help="ip-address=IP (default: the first free address)"),
    mac_address: str | None = typer.Option(None, help="its MAC (default: a new fa:16:3e:xx:xx:xx)"),
    disable_port_security: bool = typer.Option(
        False,
        "--disable-port-security",
        help="no port security: the port is not filtered and carries no security group "
        "(default: enabled, with the project's default group)",
    ),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Create a port, to hand to a server at create (server create --nic port-id=PORT)."""
    from novakit.network import ports

    ips = [guard(lambda: _pairs(fixed_ip, "fixed_ip", {"ip-address"}))["ip-address"]] if fixed_ip else []
    data = {
        "name": name,
        "network": network,
        "fixed_ips": [{"ip_address": ip} for ip in ips],
        "mac_address": mac_address,
        "port_security_enabled": not disable_port_security,
    }
    guard(lambda: output.validated(PORT_SHOW, fmt, out, column))
    port = guard(lambda: ports.create(db(), ctx(), data))
    assert port is not None
    guard(lambda: output.emit_show(port, PORT_SHOW, fmt, out, column, f"port {name}"))


@port_app.command("list")
def port_list(
    network: str | None = typer.Option(None, help="only this network's ports"),
    server: str | None = typer.Option(None, help="only this server's ports (its id)"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Your project's ports (an admin's: every project's)."""
    from novakit.network import ports

    rows = guard(lambda: ports.list_ports(db(), ctx(), network=network, device_id=server))
    guard(lambda: output.emit_list(rows, PORT_COLUMNS, fmt, out, column, "ports"))


@port_app.command("show")
def port_show(
    port: str = typer.Argument(..., help="port name or id"),
    fmt: Format | None = FORMAT,
    out: Format | None = OUTPUT,
    column: list[str] | None = COLUMN,
) -> None:
    """Show a port: its MAC, fixed IPs, server and host."""
    from novakit.network import ports

    found = guard(lambda: ports.show(db(), ctx(), port))
    guard(
        lambda: output.emit_show(found, PORT_SHOW, fmt, out, column, f"port {found['name'] or found['id']}")
    )


@port_app.command("delete")
def port_delete(port: str = typer.Argument(..., help="port name or id")) -> None:
    """Delete a port and free its addresses; refused while a server uses it. The ports whose
    rules let its address in (remote group) get their filters on their hosts at once."""
    from novakit.cli.security_groups import _push as push_on_change
    from novakit.network import ports

    guard(lambda: ports.delete_port(db(), ctx(), port, on_change=push_on_change()))
    console.print(f"port {port} deleted")
