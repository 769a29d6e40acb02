"""A port's security groups as a libvirt network filter (nwfilter), one filter per port.

The filter ``novakit-port-<port uuid>`` is what the port's NIC references in the domain XML
(``<filterref filter=...>``). libvirt instantiates it on the guest's tap device with iptables
(and ebtables for the anti-spoofing filters it references), and ``nwfilterDefineXML`` on an
existing name updates every running guest that uses it: a rule change needs no reboot.

What a filter says, in order of its rules' priorities (lower first):

1. anti-spoofing (libvirt's own filters ``no-mac-spoofing``, ``no-ip-spoofing``,
   ``no-arp-spoofing``, with the port's fixed IPv4 address as ``IP`` on the NIC), as Neutron's
   port security does: a guest sends only from its MAC and its address;
2. DHCP replies to the guest (Neutron allows them to every port);
3. one ``accept`` per security-group rule. A rule of an iptables-layer protocol (``tcp``,
   ``udp``, ``icmp``, ``all`` and their IPv6 forms) keeps libvirt's default ``statematch``: the
   traffic it allows may open a connection, and the connection's replies come back in the other
   direction (Neutron's stateful groups). libvirt's direction ``in`` is towards the guest
   (ingress), ``out`` from it (egress); the attributes are the packet's, so an ingress rule's
   remote prefix is ``srcipaddr`` and an egress rule's is ``dstipaddr``;
4. drop everything else, both ways, IPv4 and IPv6.

Only libvirt's system daemon has network filters; a session daemon has none, so a host on one
cannot filter (``LibvirtDriver.capabilities``).
"""

from __future__ import annotations

import ipaddress
import xml.etree.ElementTree as ET

from novakit.network.filter_rules import FilterRule

PREFIX = "novakit-port-"
#: the priority band of the security-group rules; what parse() reads back as rules
RULE_PRIORITY = 500
_DHCP_PRIORITY = 400
_DROP_PRIORITY = 1000

# (protocol, ethertype) -> libvirt's protocol element (iptables layer: stateful)
_ELEMENTS = {
    ("tcp", "IPv4"): "tcp",
    ("udp", "IPv4"): "udp",
    ("sctp", "IPv4"): "sctp",
    ("icmp", "IPv4"): "icmp",
    ("tcp", "IPv6"): "tcp-ipv6",
    ("udp", "IPv6"): "udp-ipv6",
    ("sctp", "IPv6"): "sctp-ipv6",
    ("icmp", "IPv6"): "icmpv6",
    ("icmpv6", "IPv6"): "icmpv6",
    ("ipv6-icmp", "IPv6"): "icmpv6",
    (None, "IPv4"): "all",
    (None, "IPv6"): "all-ipv6",
}
_BY_ELEMENT = {
    "tcp": ("tcp", "IPv4"),
    "udp": ("udp", "IPv4"),
    "sctp": ("sctp", "IPv4"),
    "icmp": ("icmp", "IPv4"),
    "tcp-ipv6": ("tcp", "IPv6"),
    "udp-ipv6": ("udp", "IPv6"),
    "sctp-ipv6": ("sctp", "IPv6"),
    "icmpv6": ("icmpv6", "IPv6"),
    "all": (None, "IPv4"),
    "all-ipv6": (None, "IPv6"),
}


#: what the filter of a port that is no longer filtered (no port security) allows while its guest
#: still references it; a port with port security and no group gets no rule: everything is dropped
OPEN = [
    FilterRule(direction, ethertype) for direction in ("ingress", "egress") for ethertype in ("IPv4", "IPv6")
]


def filter_name(port_id: str) -> str:
    return PREFIX + port_id


def port_of(name: str) -> str | None:
    """The port uuid of a filter novakit made, or None for any other filter."""
    return name[len(PREFIX) :] if name.startswith(PREFIX) else None


def _protocol(rule: FilterRule) -> str | None:
    return rule.protocol_name


def _rule_element(rule: FilterRule) -> ET.Element:
    protocol = _protocol(rule)
    tag = _ELEMENTS.get((protocol, rule.ethertype))
    attrs: dict[str, str] = {}
    if tag is None:
        # Another IP protocol: matched by number at the ebtables layer (no connection state).
        tag = "ip" if rule.ethertype == "IPv4" else "ipv6"
        attrs["protocol"] = str(protocol)
    if rule.remote_ip_prefix is not None:
        net = ipaddress.ip_network(rule.remote_ip_prefix)
        side = "src" if rule.direction == "ingress" else "dst"
        attrs[f"{side}ipaddr"] = str(net.network_address)
        attrs[f"{side}ipmask"] = str(net.prefixlen)
    if rule.is_icmp:
        if rule.port_min is not None:
            attrs["type"] = str(rule.port_min)
        if rule.port_max is not None:
            attrs["code"] = str(rule.port_max)
    elif rule.port_min is not None:
        attrs["dstportstart"] = str(rule.port_min)
        attrs["dstportend"] = str(rule.port_max if rule.port_max is not None else rule.port_min)
    return ET.Element(tag, attrs)


def build(port_id: str, rules: list[FilterRule], uuid: str | None = None) -> str:
    """The filter's XML. ``uuid``: the existing filter's, so that a redefinition updates it."""
    root = ET.Element("filter", name=filter_name(port_id), chain="root")
    if uuid:
        ET.SubElement(root, "uuid").text = uuid
    for spoof in ("no-mac-spoofing", "no-ip-spoofing", "no-arp-spoofing"):
        ET.SubElement(root, "filterref", filter=spoof)
    dhcp = ET.SubElement(root, "rule", action="accept", direction="in", priority=str(_DHCP_PRIORITY))
    ET.SubElement(dhcp, "udp", srcportstart="67", dstportstart="68")
    for rule in sorted(set(rules), key=lambda r: repr(r.to_json())):
        direction = "in" if rule.direction == "ingress" else "out"
        elem = ET.SubElement(root, "rule", action="accept", direction=direction, priority=str(RULE_PRIORITY))
        elem.append(_rule_element(rule))
    for everything in ("all", "all-ipv6"):
        drop = ET.SubElement(root, "rule", action="drop", direction="inout", priority=str(_DROP_PRIORITY))
        ET.SubElement(drop, everything)
    return ET.tostring(root, encoding="unicode")


def _int(value: str | None) -> int | None:
    return int(value, 0) if value not in (None, "") else None


def parse(xml: str) -> list[FilterRule]:
    """The security-group rules a filter made by ``build`` holds (as libvirt gives it back)."""
    out: list[FilterRule] = []
    for rule in ET.fromstring(xml).findall("rule"):
        if rule.get("action") != "accept" or _int(rule.get("priority")) != RULE_PRIORITY:
            continue
        direction = {"in": "ingress", "out": "egress"}.get(rule.get("direction") or "")
        if direction is None or len(rule) != 1:
            continue
        elem = rule[0]
        if elem.tag in _BY_ELEMENT:
            protocol, ethertype = _BY_ELEMENT[elem.tag]
        elif elem.tag in ("ip", "ipv6"):
            protocol, ethertype = elem.get("protocol"), "IPv4" if elem.tag == "ip" else "IPv6"
        else:
            continue
        side = "src" if direction == "ingress" else "dst"
        address, mask = elem.get(f"{side}ipaddr"), elem.get(f"{side}ipmask")
        prefix = f"{address}/{mask}" if address and mask else address
        if protocol in ("icmp", "icmpv6"):
            low, high = _int(elem.get("type")), _int(elem.get("code"))
        else:
            low, high = _int(elem.get("dstportstart")), _int(elem.get("dstportend"))
        out.append(
            FilterRule(
                direction=direction,
                ethertype=ethertype,
                protocol=protocol,
                port_min=low,
                port_max=high,
                remote_ip_prefix=prefix,
            )
        )
    return out
