"""One port's effective security-group rules, as the host enforces them.

This is the contract between the records (``novakit.network.security_groups``: groups, rules,
which ports carry which groups) and what enforces them on a host (the driver's
``apply_port_filter``). The controller turns a port's groups into a flat list of
``FilterRule`` (a rule's ``remote_group`` already expanded into one rule per member's fixed
IP prefix) and sends it to the host that runs the port; the host never sees groups, and never
imports ``novakit.db``, so this module depends on nothing but the standard library.

Semantics are Neutron's: an allow-list. Traffic a rule does not allow is dropped, except replies
to connections the port's own allowed traffic opened (stateful, as Neutron's security groups).

- ``direction``: ``ingress`` (towards the guest) or ``egress`` (from the guest).
- ``ethertype``: ``IPv4`` or ``IPv6``.
- ``protocol``: ``tcp``, ``udp``, ``icmp``, ``icmpv6``, another IP protocol by name or number
  as a string (``"47"``), or ``None`` for any protocol.
- ``port_min``/``port_max``: a TCP/UDP destination port range; for ICMP, as Neutron stores it,
  ``port_min`` is the ICMP type and ``port_max`` the ICMP code (``None`` = any).
- ``remote_ip_prefix``: the other end's CIDR (the source for ingress, the destination for
  egress), ``None`` for anywhere.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

DIRECTIONS = ("ingress", "egress")
ETHERTYPES = ("IPv4", "IPv6")
#: Protocols whose rules may carry a port range (TCP/UDP ports, ICMP type/code).
PORT_PROTOCOLS = ("tcp", "udp", "sctp")
ICMP_PROTOCOLS = ("icmp", "icmpv6", "ipv6-icmp")
#: IANA numbers and aliases of the protocols that have a name, as Neutron accepts them
_PROTOCOL_NAMES = {"6": "tcp", "17": "udp", "132": "sctp", "1": "icmp", "58": "icmpv6", "ipv6-icmp": "icmpv6"}


_FIELDS = ("direction", "ethertype", "protocol", "port_min", "port_max", "remote_ip_prefix")


class FilterRuleError(ValueError):
    """A rule that cannot be enforced; the message names the field and the rule."""


@dataclass(frozen=True)
class FilterRule:
    """One allow rule of a port's filter (see the module docstring for each field)."""

    direction: str
    ethertype: str = "IPv4"
    protocol: str | None = None
    port_min: int | None = None
    port_max: int | None = None
    remote_ip_prefix: str | None = None

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise FilterRuleError(f"direction: one of {', '.join(DIRECTIONS)}, not {self.direction!r}")
        if self.ethertype not in ETHERTYPES:
            raise FilterRuleError(f"ethertype: one of {', '.join(ETHERTYPES)}, not {self.ethertype!r}")
        if self.protocol is not None and (not isinstance(self.protocol, str) or not self.protocol):
            raise FilterRuleError(f"protocol: a name, a number as a string, or None, not {self.protocol!r}")
        for name in ("port_min", "port_max"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise FilterRuleError(f"{name}: must be an integer or None, not {value!r}")
        ranged = self.port_min is not None or self.port_max is not None
        if ranged and not self.has_ports and not self.is_icmp:
            raise FilterRuleError(f"port_min/port_max: protocol {self.protocol!r} has no ports")
        if self.has_ports:
            low = self.port_min
            high = self.port_max if self.port_max is not None else low
            if low is not None and high is not None and not 1 <= low <= high <= 65535:
                raise FilterRuleError(f"port_min/port_max: need 1 <= min <= max <= 65535, got {low}-{high}")
        if self.is_icmp:
            for name in ("port_min", "port_max"):
                value = getattr(self, name)
                if value is not None and not 0 <= value <= 255:
                    raise FilterRuleError(f"{name}: an ICMP type/code is 0-255, got {value}")
            if self.port_min is None and self.port_max is not None:
                raise FilterRuleError("port_max: an ICMP code needs an ICMP type (port_min)")
        if self.remote_ip_prefix is not None:
            try:
                net = ipaddress.ip_network(self.remote_ip_prefix, strict=False)
            except ValueError as exc:
                raise FilterRuleError(f"remote_ip_prefix: not a CIDR: {self.remote_ip_prefix!r}") from exc
            if (net.version == 4) != (self.ethertype == "IPv4"):
                raise FilterRuleError(f"remote_ip_prefix: {net} is not an {self.ethertype} prefix")
            # One spelling per prefix, so that two equal rule sets compare equal (heal compares them).
            object.__setattr__(self, "remote_ip_prefix", str(net))

    @property
    def protocol_name(self) -> str | None:
        """The protocol by name where it has one (``6`` is ``tcp``), lower case."""
        if self.protocol is None:
            return None
        return _PROTOCOL_NAMES.get(self.protocol.lower(), self.protocol.lower())

    @property
    def has_ports(self) -> bool:
        return self.protocol_name in PORT_PROTOCOLS

    @property
    def is_icmp(self) -> bool:
        return self.protocol_name in ICMP_PROTOCOLS

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FilterRule:
        if not isinstance(data, dict):
            raise FilterRuleError(f"a filter rule is an object, not {type(data).__name__}")
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise FilterRuleError(f"filter rule: unknown field(s) {', '.join(unknown)}")
        if "direction" not in data:
            raise FilterRuleError("direction: required")
        return cls(**data)


def normalized(rule: FilterRule) -> FilterRule:
    """One spelling per meaning: a protocol by name where it has one (``6`` is ``tcp``), ICMP of
    IPv6 as ``icmpv6``, a single port as the range ``n-n``."""
    protocol = rule.protocol_name
    if protocol == "icmp" and rule.ethertype == "IPv6":
        protocol = "icmpv6"
    port_max = rule.port_max
    if protocol in PORT_PROTOCOLS and rule.port_min is not None and port_max is None:
        port_max = rule.port_min
    if (protocol, port_max) == (rule.protocol, rule.port_max):
        return rule
    return FilterRule(
        rule.direction, rule.ethertype, protocol, rule.port_min, port_max, rule.remote_ip_prefix
    )


def canonical(rules: Iterable[FilterRule]) -> tuple[FilterRule, ...]:
    """The rule set normalized, in one order, without duplicates: what two filters are compared by."""
    unique = {normalized(r) for r in rules}
    return tuple(sorted(unique, key=lambda r: json.dumps(r.to_json(), sort_keys=True)))


def rules_to_json(rules: Iterable[FilterRule]) -> list[dict[str, Any]]:
    return [rule.to_json() for rule in canonical(rules)]


def rules_from_json(data: Iterable[dict[str, Any]]) -> list[FilterRule]:
    return list(canonical(FilterRule.from_json(item) for item in data))
