"""``novakit server add|remove port`` and ``novakit server add network``: a port attached to a built
server and detached again, as ``openstack server add port`` does it, through
``novakit.compute.interfaces``."""

from __future__ import annotations

import typer

from novakit.cli.base import call, console, guard, server_add_app, server_remove_app

SERVER = typer.Argument(..., help="server name or id")
PORT = typer.Argument(..., help="port name or id")


@server_add_app.command("port")
def server_add_port(server: str = SERVER, port: str = PORT) -> None:
    """Attach a port to a server (hot on a running server, in the definition of a stopped one)."""
    from novakit.compute import interfaces

    shown = guard(lambda: call(interfaces.attach, server, port=port))
    console.print(f"port {shown['name'] or shown['id']} attached to server {server}")


@server_add_app.command("network")
def server_add_network(
    server: str = SERVER,
    network: str = typer.Argument(..., help="network name or id"),
    fixed_ip: str | None = typer.Option(
        None, "--fixed-ip", help="the new port's address (default: a free one)"
    ),
) -> None:
    """Attach a new port on a network to a server (the server's security groups apply to it)."""
    from novakit.compute import interfaces

    shown = guard(lambda: call(interfaces.attach, server, network=network, fixed_ip=fixed_ip))
    addresses = ", ".join(ip["ip_address"] for ip in shown["fixed_ips"])
    console.print(
        f"port {shown['id']} on network {shown['network']} attached to server {server} ({addresses})"
    )


@server_remove_app.command("port")
def server_remove_port(server: str = SERVER, port: str = PORT) -> None:
    """Detach a port from a server; one its boot or an attach made is deleted, one you gave is kept."""
    from novakit.compute import interfaces

    shown = guard(lambda: call(interfaces.detach, server, port))
    console.print(f"port {shown['name'] or shown['id']} detached from server {server}")
