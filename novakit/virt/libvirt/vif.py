"""A port's host side on a libvirt network: its DHCP host entry (Nova's ``plug_vifs``).

The guest learns its fixed IP from the config drive's network-config; a guest that
asks by DHCP instead (an image without cloud-init, a second boot without the drive)
gets the same address, because the network's dnsmasq holds MAC -> IP for the port.
Only IPv4 (libvirt's IPv6 host entries match no MAC), one address per NIC (DHCP hands
out one per MAC), and only on networks with a ``<dhcp>`` in the subnet's ``<ip>``:
elsewhere the static configuration is all there is.
"""

from __future__ import annotations

import ipaddress
import xml.etree.ElementTree as ET

from novakit.host.messages import InstanceSpec
from novakit.virt.libvirt.config import NetworkDhcpHost
from novakit.virt.libvirt.host import Host


def dhcp_hosts(instance: InstanceSpec) -> list[tuple[str, NetworkDhcpHost]]:
    """(libvirt network, entry) for each of the instance's ports on a libvirt network."""
    entries = []
    for nic in instance.networks:
        if nic.type != "network" or not nic.mac:
            continue
        v4 = [ip.address for ip in nic.fixed_ips if _is_ipv4(ip.address)]
        if v4:
            entries.append((nic.source, NetworkDhcpHost(nic.mac.lower(), v4[0], instance.hostname)))
    return entries


def _is_ipv4(address: str) -> bool:
    # A malformed address never reaches a guest (the config drive refuses it first); here it
    # must not stop a destroy from cleaning up the rest.
    try:
        return ipaddress.ip_address(address).version == 4
    except ValueError:
        return False


def plug_vifs(host: Host, instance: InstanceSpec) -> None:
    """Add the instance's DHCP host entries (before the guest boots and asks)."""
    for network, entry in dhcp_hosts(instance):
        host.add_dhcp_host(network, entry)


def unplug_vifs(host: Host, instance: InstanceSpec | None, domain_xml: str | None) -> None:
    """Remove the DHCP host entries of the instance's NICs: those its spec names, and those
    of the domain as libvirt has it (the spec of a destroy may carry no networks).

    Idempotent: entries already gone, and networks that no longer exist, are fine.
    """
    nics = {(net, entry.mac) for net, entry in dhcp_hosts(instance)} if instance is not None else set()
    if domain_xml:
        for iface in ET.fromstring(domain_xml).findall("devices/interface[@type='network']"):
            mac_elem, source = iface.find("mac"), iface.find("source")
            if (
                mac_elem is not None
                and source is not None
                and mac_elem.get("address")
                and source.get("network")
            ):
                nics.add((str(source.get("network")), str(mac_elem.get("address")).lower()))
    for network, mac in sorted(nics):
        host.remove_dhcp_hosts(network, mac)
