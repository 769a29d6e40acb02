"""``novakit network``, ``novakit subnet`` and ``novakit port``: openstack's verbs and flags."""

from __future__ import annotations

import typer

from novakit.cli import output
from novakit.cli.base import call, network_app, port_app, subnet_app
from novakit.cli.output import Col, Record
from novakit.cli.verbs import Noun

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
NETWORK = Noun(network_app, "network", NETWORK_COLUMNS, "novakit.network.networks")
SUBNET = Noun(subnet_app, "subnet", SUBNET_COLUMNS, "novakit.network.subnets")
PORT_SHOW = [
    *PORT_COLUMNS,
    Col("Port Security", lambda r: "enabled" if r.get("port_security_enabled") else "disabled"),
    Col("Security Groups", lambda r: ", ".join(r.get("security_groups") or [])),
]

PORT = Noun(port_app, "port", PORT_SHOW, "novakit.network.ports")


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
@output.shows(NETWORK_COLUMNS, "network {name}")
def network_create(
    name: str = typer.Argument(..., help="the network's name"),
    provider: str = typer.Option("network", help="network (a libvirt network) or bridge (a host bridge)"),
    source: str | None = typer.Option(None, help="its name on the hosts (default: the network's name)"),
    default: bool = typer.Option(False, "--default", help="servers that name no network get a port on it"),
) -> Record | None:
    """Create a network (admin only)."""
    from novakit.network import networks

    data = {"name": name, "provider": provider, "source": source, "is_default": default}
    return call(networks.create, data)


@network_app.command("list")
@output.lists(NETWORK_COLUMNS, "networks")
def network_list() -> list[Record]:
    """The networks servers can be plugged into."""
    from novakit.network import networks

    return call(networks.list_networks)


NETWORK.show("Show a network and its subnets.", lambda networks, network: call(networks.show, network))
NETWORK.delete(
    "Delete a network and its subnets (admin only); refused while ports are on it.",
    lambda networks, network: call(networks.delete, network),
)


# --- subnets -----------------------------------------------------------------------


@subnet_app.command("create")
@output.shows(SUBNET_COLUMNS, "subnet {name}")
def subnet_create(
    name: str = typer.Argument(..., help="the subnet's name"),
    network: str = typer.Option(..., help="network name or id"),
    subnet_range: str = typer.Option(..., help="the IPv4 range in CIDR notation, e.g. 10.0.0.0/24"),
    gateway: str | None = typer.Option(None, help="gateway address (default: the range's first address)"),
    dns_nameserver: list[str] | None = typer.Option(None, help="DNS server address (repeat)"),
    allocation_pool: list[str] | None = typer.Option(
        None, help="start=IP,end=IP (repeat; default: the range less network, broadcast and gateway)"
    ),
) -> Record | None:
    """Create a subnet on a network (admin only)."""
    from novakit.network import subnets

    pools = [_pairs(p, "allocation_pool", {"start", "end"}) for p in allocation_pool or []]
    data = {
        "name": name,
        "network": network,
        "cidr": subnet_range,
        "gateway_ip": gateway,
        "dns_nameservers": list(dns_nameserver or []),
        "allocation_pools": pools,
    }
    return call(subnets.create, data)


@subnet_app.command("list")
@output.lists(SUBNET_COLUMNS, "subnets")
def subnet_list(network: str | None = typer.Option(None, help="only this network's subnets")) -> list[Record]:
    """The subnets of every network (or of one)."""
    from novakit.network import subnets

    return call(subnets.list_subnets, network)


SUBNET.show("Show a subnet.", lambda subnets, subnet: call(subnets.show, subnet))
SUBNET.delete(
    "Delete a subnet (admin only); refused while any of its addresses is allocated.",
    lambda subnets, subnet: call(subnets.delete, subnet),
)


# --- ports -------------------------------------------------------------------------


@port_app.command("create")
@output.shows(PORT_SHOW, "port {name}")
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
) -> Record | None:
    """Create a port, to hand to a server at create (server create --nic port-id=PORT)."""
    from novakit.network import ports

    ips = [_pairs(fixed_ip, "fixed_ip", {"ip-address"})["ip-address"]] if fixed_ip else []
    data = {
        "name": name,
        "network": network,
        "fixed_ips": [{"ip_address": ip} for ip in ips],
        "mac_address": mac_address,
        "port_security_enabled": not disable_port_security,
    }
    return call(ports.create, data)


@port_app.command("list")
@output.lists(PORT_COLUMNS, "ports")
def port_list(
    network: str | None = typer.Option(None, help="only this network's ports"),
    server: str | None = typer.Option(None, help="only this server's ports (its id)"),
) -> list[Record]:
    """Your project's ports (an admin's: every project's)."""
    from novakit.network import ports

    return call(ports.list_ports, network=network, device_id=server)


PORT.show(
    "Show a port: its MAC, fixed IPs, server and (to an admin) host.",
    lambda ports, port: call(ports.show, port),
    lambda found: f"port {found['name'] or found['id']}",
)


PORT.delete(
    "Delete a port and free its addresses; refused while a server uses it. The ports whose "
    "rules let its address in (remote group) get their filters on their hosts at once.",
    # on_change: here the command's push to the hosts (base.call), through a cloud the service's
    lambda ports, port: call(ports.delete_port, port),
)
