#!/usr/bin/python
"""Security group rules, declaratively."""

from __future__ import annotations

DOCUMENTATION = r"""
module: security_group_rule
short_description: Add or remove a rule of a novakit security group
description:
  - Makes sure a security group has a rule (O(state=present)) or does not (O(state=absent)), as
    C(openstack.cloud.security_group_rule) does with Neutron. A rule is found by its fields, spelt
    as Neutron keeps them (V(6) is V(tcp), a prefix is its network, V(0.0.0.0/0) is anywhere), so a
    second identical run reports no change.
  - The filters of the ports carrying the group change at once on their hosts; a host that cannot
    take one is a warning, and heal applies it later.
  - Rules are checked as Neutron checks them; a bad one is refused naming the field and the rule
    (a port range on a protocol without ports, min above max, ports outside 1-65535, an ICMP type
    or code outside 0-255, a prefix of the other ethertype, an unknown protocol).
version_added: 0.3.0
extends_documentation_fragment: [ansible.builtin.action_common_attributes, novakit.cloud.common, novakit.cloud.cloud, novakit.cloud.catalog]
options:
  security_group:
    description: The group's name or id.
    type: str
    required: true
  direction:
    description: V(ingress) (traffic to the servers) or V(egress) (traffic from them).
    type: str
    choices: [ingress, egress]
    default: ingress
  ether_type:
    description: The IP version the rule is for.
    type: str
    choices: [IPv4, IPv6]
    default: IPv4
    aliases: [ethertype]
  protocol:
    description:
      - V(tcp), V(udp), V(icmp), V(ipv6-icmp), another protocol name Neutron knows, a number 0-255, or V(any).
      - Unset is any protocol.
    type: str
  port_range_min:
    description: The first destination port (TCP, UDP, SCTP), or the ICMP type.
    type: int
  port_range_max:
    description: The last destination port (default O(port_range_min)), or the ICMP code.
    type: int
  remote_ip_prefix:
    description: The other end's CIDR; unset (or V(0.0.0.0/0), V(::/0)) is anywhere.
    type: str
  remote_group:
    description: The other end as a group of the same project (name or id) - its ports' fixed IPs.
    type: str
  description:
    description: What the rule is for (not compared with an existing rule).
    type: str
"""

EXAMPLES = r"""
- name: SSH from the office
  novakit.cloud.security_group_rule:
    security_group: web
    protocol: tcp
    port_range_min: 22
    port_range_max: 22
    remote_ip_prefix: 192.0.2.0/24

- name: Ping from the other members of the group
  novakit.cloud.security_group_rule:
    security_group: web
    protocol: icmp
    remote_group: web
"""

RETURN = r"""
rule:
  description: The rule, when it exists (not in check mode for a new one).
  returned: when state is present
  type: dict
  sample:
    id: 7d1e...
    security_group: web
    direction: ingress
    ethertype: IPv4
    protocol: tcp
    port_range_min: 22
    port_range_max: 22
    remote_ip_prefix: 192.0.2.0/24
    remote_group: null
"""

from ansible_collections.novakit.cloud.plugins.module_utils.catalog import STATE_ARG  # noqa: E402
from ansible_collections.novakit.cloud.plugins.module_utils.security_groups import FilteringModule  # noqa: E402


class SecurityGroupRuleModule(FilteringModule):
    takes_cloud = True
    resource = "rule"
    family_args = {"state": STATE_ARG}  # a rule is found by its fields, not by a name
    argument_spec = {
        "security_group": {"type": "str", "required": True},
        "direction": {"type": "str", "choices": ["ingress", "egress"], "default": "ingress"},
        "ether_type": {
            "type": "str",
            "choices": ["IPv4", "IPv6"],
            "default": "IPv4",
            "aliases": ["ethertype"],
        },
        "protocol": {"type": "str"},
        "port_range_min": {"type": "int"},
        "port_range_max": {"type": "int"},
        "remote_ip_prefix": {"type": "str"},
        "remote_group": {"type": "str"},
        "description": {"type": "str"},
    }

    def request(self):
        p = self.params
        return {
            "security_group": p["security_group"],
            "direction": p["direction"],
            "ethertype": p["ether_type"],
            "protocol": p["protocol"],
            "port_range_min": p["port_range_min"],
            "port_range_max": p["port_range_max"],
            "remote_ip_prefix": p["remote_ip_prefix"],
            "remote_group": p["remote_group"],
        }

    def find(self):
        from novakit.network import security_groups

        return self.call(security_groups.find_rule, self.request())

    def create(self, dry_run):
        from novakit.network import security_groups

        data = {**self.request(), "description": self.params["description"]}
        # Dry run: the real create's checks (the group, the fields, duplicates, quota), nothing written.
        return self.call(security_groups.create_rule, data, dry_run=dry_run)

    def deleter(self):
        from novakit.network import security_groups

        return security_groups.delete_rule


def main():
    SecurityGroupRuleModule()()


if __name__ == "__main__":
    main()
