"""Which DHCP host entries an instance's ports need (``novakit.virt.libvirt.vif``)."""

from __future__ import annotations

from collections.abc import Callable

from novakit.host.messages import FixedIp, InstanceSpec, NetworkSpec
from novakit.virt.libvirt.config import NetworkDhcpHost
from novakit.virt.libvirt.vif import dhcp_hosts


def test_one_ipv4_entry_per_port_on_a_libvirt_network(make_instance: Callable[..., InstanceSpec]) -> None:
    v6 = FixedIp(address="2001:db8::5", cidr="2001:db8::/64")
    inst = make_instance(
        hostname="web-1",
        networks=[
            NetworkSpec(
                type="network",
                source="tenant",
                mac="FA:16:3E:00:00:01",
                fixed_ips=[
                    v6,
                    FixedIp(address="10.0.0.5", cidr="10.0.0.0/24"),
                    FixedIp(address="10.0.0.6", cidr="10.0.0.0/24"),
                ],
            ),
            # A bridge has no libvirt DHCP server; a NIC without a port, or with IPv6 only, has no entry.
            NetworkSpec(
                type="bridge",
                source="br0",
                mac="fa:16:3e:00:00:02",
                fixed_ips=[FixedIp(address="10.1.0.5", cidr="10.1.0.0/24")],
            ),
            NetworkSpec(type="network", source="default", mac="fa:16:3e:00:00:03"),
            NetworkSpec(type="network", source="v6", mac="fa:16:3e:00:00:04", fixed_ips=[v6]),
        ],
    )
    assert dhcp_hosts(inst) == [("tenant", NetworkDhcpHost("fa:16:3e:00:00:01", "10.0.0.5", "web-1"))]
