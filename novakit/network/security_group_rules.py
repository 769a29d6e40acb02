"""A security group rule's fields checked as Neutron checks them, and spelt one way.

No database here: ``RuleCreate`` is the request, ``normalise_rule`` refuses what Neutron refuses
(naming the field and the rule) and returns ``RuleFields``, the rule as stored, in one spelling
(a protocol number with a name is the name, a prefix is its network, anywhere is None), so that
two spellings of one rule are one rule (``RuleFields.fingerprint``: Neutron's duplicate check).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from novakit import exceptions
from novakit.compute import schemas
from novakit.network.filter_rules import ICMP_PROTOCOLS, PORT_PROTOCOLS

ETHERTYPES = ("IPv4", "IPv6")
DIRECTIONS = ("ingress", "egress")

#: Neutron's protocol names (neutron_lib's IP_PROTOCOL_MAP) and their IP protocol numbers.
PROTOCOLS: dict[str, int] = {
    "ah": 51,
    "dccp": 33,
    "egp": 8,
    "esp": 50,
    "gre": 47,
    "hopopt": 0,
    "icmp": 1,
    "igmp": 2,
    "ipip": 4,
    "ipv6-encap": 41,
    "ipv6-frag": 44,
    "ipv6-icmp": 58,
    "ipv6-nonxt": 59,
    "ipv6-opts": 60,
    "ipv6-route": 43,
    "ospf": 89,
    "pgm": 113,
    "rsvp": 46,
    "sctp": 132,
    "tcp": 6,
    "udp": 17,
    "udplite": 136,
    "vrrp": 112,
}
#: Spellings of the same protocol: stored as the name on the right.
_ALIASES = {"icmpv6": "ipv6-icmp"}
#: A number with a name is stored as the name (6 -> tcp), so that "6" and "tcp" are one rule.
_NAMED_NUMBERS = {number: name for name, number in PROTOCOLS.items()}


class RuleCreate(schemas._Request):
    security_group: str = Field(min_length=1, max_length=255)
    direction: Literal["ingress", "egress"] = "ingress"
    ethertype: str = "IPv4"
    protocol: str | int | None = None
    port_range_min: int | None = None
    port_range_max: int | None = None
    remote_ip_prefix: str | None = None
    remote_group: str | None = Field(default=None, min_length=1, max_length=255)
    description: str | None = Field(default=None, max_length=255)


@dataclass(frozen=True)
class RuleFields:
    """A rule's fields as stored: checked, in one spelling (``normalise_rule``)."""

    direction: str
    ethertype: str
    protocol: str | None
    port_range_min: int | None
    port_range_max: int | None
    remote_ip_prefix: str | None

    def fingerprint(self, remote_group_id: int | None) -> str:
        parts = (
            self.direction,
            self.ethertype,
            self.protocol,
            self.port_range_min,
            self.port_range_max,
            self.remote_ip_prefix,
            remote_group_id,
        )
        return "|".join("" if p is None else str(p) for p in parts)


# --- one spelling of a rule (also what the modules compare with) ----------------------------


def normalise_protocol(value: str | int | None, field: str = "protocol") -> str | None:
    """A protocol as stored: None for any, a name of ``PROTOCOLS``, or a number 0-255 as a string
    (a number with a name the hosts know is stored as that name)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise exceptions.ValidationError(field, f"{value!r} is not a protocol")
    text = str(value).strip().lower()
    if text in ("", "any"):
        return None
    if text.isdigit():
        number = int(text)
        if not 0 <= number <= 255:
            raise exceptions.ValidationError(field, f"a protocol number is 0 to 255, got {number}")
        return _NAMED_NUMBERS.get(number, str(number))
    text = _ALIASES.get(text, text)
    if text not in PROTOCOLS:
        raise exceptions.ValidationError(
            field,
            f"Security group rule protocol {value} not supported: give one of "
            f"{', '.join(sorted(PROTOCOLS))}, a number 0 to 255, or any",
        )
    return text


def normalise_ethertype(value: str) -> str:
    for known in ETHERTYPES:
        if str(value).lower() == known.lower():
            return known
    raise exceptions.ValidationError("ethertype", f"must be IPv4 or IPv6, got {value!r}")


def normalise_rule(req: RuleCreate) -> RuleFields:
    """Check a rule's fields as Neutron does and spell them one way; each refusal names the field."""
    ethertype = normalise_ethertype(req.ethertype)
    protocol = normalise_protocol(req.protocol)
    if ethertype == "IPv6" and protocol == "icmp":
        raise exceptions.ValidationError(
            "protocol", "Invalid ethertype IPv6 for protocol icmp: an IPv6 rule's ICMP is ipv6-icmp"
        )
    if ethertype == "IPv4" and protocol == "ipv6-icmp":
        raise exceptions.ValidationError(
            "protocol", "Invalid ethertype IPv4 for protocol ipv6-icmp: an IPv4 rule's ICMP is icmp"
        )
    low, high = _port_range(protocol, req.port_range_min, req.port_range_max)
    if req.remote_ip_prefix is not None and req.remote_group is not None:
        raise exceptions.ValidationError(
            "remote_ip_prefix", "Only remote_ip_prefix or remote_group may be provided, not both"
        )
    prefix = _remote_prefix(req.remote_ip_prefix, ethertype)
    return RuleFields(req.direction, ethertype, protocol, low, high, prefix)


def _port_range(protocol: str | None, low: int | None, high: int | None) -> tuple[int | None, int | None]:
    """A rule's port range as stored: a TCP/UDP/SCTP range with both ends (one given is both), an
    ICMP type and code as given; refused for a protocol without ports, or any protocol."""
    if low is None and high is None:
        return None, None
    field = "port_range_min" if low is not None else "port_range_max"
    if protocol is None:
        raise exceptions.ValidationError(
            field, "a port range needs a protocol (tcp, udp, sctp; or icmp's type and code)"
        )
    if protocol in PORT_PROTOCOLS:
        low = low if low is not None else high
        high = high if high is not None else low
        assert low is not None and high is not None
        for name, value in (("port_range_min", low), ("port_range_max", high)):
            if not 1 <= value <= 65535:
                raise exceptions.ValidationError(name, f"a port is 1 to 65535, got {value}")
        if low > high:
            raise exceptions.ValidationError(
                "port_range_min",
                f"For TCP/UDP protocols, port_range_min must be <= port_range_max ({low} > {high})",
            )
    elif protocol in ICMP_PROTOCOLS:
        if low is None:
            raise exceptions.ValidationError(
                "port_range_max",
                f"ICMP code (port_range_max) {high} is provided but ICMP type (port_range_min) is missing",
            )
        for name, what, given in (("port_range_min", "type", low), ("port_range_max", "code", high)):
            if given is not None and not 0 <= given <= 255:
                raise exceptions.ValidationError(
                    name, f"Invalid value for ICMP {what} ({name}) {given}. It must be 0 to 255."
                )
    else:
        raise exceptions.ValidationError(
            field,
            f"protocol {protocol} has no ports: a port range is only for {', '.join(PORT_PROTOCOLS)} "
            "(and ICMP's type and code)",
        )
    return low, high


def _remote_prefix(prefix: str | None, ethertype: str) -> str | None:
    """A remote prefix as stored: its network, of the rule's ethertype; None for anywhere."""
    if prefix is None:
        return None
    try:
        net = ipaddress.ip_network(prefix.strip(), strict=False)
    except ValueError:
        raise exceptions.ValidationError(
            "remote_ip_prefix", f"{prefix!r} is not a CIDR (10.0.0.0/24, 2001:db8::/64)"
        ) from None
    if (net.version == 4) != (ethertype == "IPv4"):
        raise exceptions.ValidationError(
            "remote_ip_prefix",
            f"Conflicting value ethertype {ethertype} for CIDR {net}: an {ethertype} rule takes an "
            f"{ethertype} prefix",
        )
    # Anywhere is anywhere, however it is spelt (0.0.0.0/0 and none are one rule).
    return None if net.prefixlen == 0 else str(net)
