#!/usr/bin/python
"""Subnets, declaratively."""

from __future__ import annotations

DOCUMENTATION = r"""
module: subnet
short_description: Create or delete a subnet of a novakit network
description:
  - Makes sure a subnet exists (O(state=present)) or does not (O(state=absent)) - an IPv4 range
    of a network, its gateway, DNS servers and the pool servers' fixed IPs are taken from.
  - The gateway defaults to the range's first address, the pool to the rest less the broadcast
    address. Overlapping subnets of one network, and a pool outside the range or holding the
    gateway, are refused naming the option and the rule.
  - An existing subnet is left as it is; other values for an existing name are an error that says so.
    Deleting a subnet whose addresses are allocated fails.
version_added: 0.2.0
author: novakit developers (@novakit)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - novakit.cloud.attributes
  - novakit.cloud.common
attributes:
  diff_mode:
    support: none
options:
  name:
    description: Subnet name.
    type: str
    required: true
  state:
    description: Whether the subnet should exist.
    type: str
    choices: [present, absent]
    default: present
  network_name:
    description: The network's name or id.
    type: str
    aliases: [network]
  cidr:
    description: The IPv4 range, e.g. V(10.0.0.0/24).
    type: str
  gateway_ip:
    description: The gateway's address.
    type: str
  dns_nameservers:
    description: DNS servers the guests are told.
    type: list
    elements: str
    default: []
  allocation_pool_start:
    description: First address of the allocation pool (with O(allocation_pool_end)).
    type: str
  allocation_pool_end:
    description: Last address of the allocation pool.
    type: str
"""

EXAMPLES = r"""
- name: The addresses servers on lan get
  novakit.cloud.subnet:
    name: lan-v4
    network_name: lan
    cidr: 192.168.122.0/24
    dns_nameservers: [192.168.122.1]
    allocation_pool_start: 192.168.122.100
    allocation_pool_end: 192.168.122.199
"""

RETURN = r"""
subnet:
  description: The subnet, when it exists (not in check mode for a new one).
  returned: when state is present
  type: dict
  sample:
    id: 7d1e...
    name: lan-v4
    network: lan
    cidr: 192.168.122.0/24
    gateway_ip: 192.168.122.1
    dns_nameservers: []
    allocation_pools: [{start: 192.168.122.100, end: 192.168.122.199}]
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


class SubnetModule(NovakitModule):
    argument_spec = {
        "name": {"type": "str", "required": True},
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "network_name": {"type": "str", "aliases": ["network"]},
        "cidr": {"type": "str"},
        "gateway_ip": {"type": "str"},
        "dns_nameservers": {"type": "list", "elements": "str", "default": []},
        "allocation_pool_start": {"type": "str"},
        "allocation_pool_end": {"type": "str"},
    }
    module_kwargs = {
        "supports_check_mode": True,
        "required_if": [("state", "present", ["network_name", "cidr"])],
        "required_together": [("allocation_pool_start", "allocation_pool_end")],
    }

    def run(self):
        from novakit.network import subnets

        db, ctx, p = self.database(), self.context(), self.params
        existing = next((s for s in subnets.list_subnets(db) if s["name"] == p["name"]), None)
        if p["state"] == "absent":
            if existing and not self.check_mode:
                subnets.delete(db, ctx, p["name"])
            return {"changed": existing is not None}
        start, end = p["allocation_pool_start"], p["allocation_pool_end"]
        data = {
            "name": p["name"],
            "network": p["network_name"],
            "cidr": p["cidr"],
            "gateway_ip": p["gateway_ip"],
            "dns_nameservers": p["dns_nameservers"],
            "allocation_pools": [{"start": start, "end": end}] if start else [],
        }
        if existing:
            same = existing["cidr"] == p["cidr"] and p["network_name"] in (
                existing["network"],
                existing["network_id"],
            )
            if not same:
                self.ansible.fail_json(
                    msg=f"subnet {p['name']} exists with range {existing['cidr']} on network "
                    f"{existing['network']}; delete it first to change them"
                )
            return {"changed": False, "subnet": existing}
        # Check mode asks the real create's checks (range, pools, overlap), writing nothing.
        made = subnets.create(db, ctx, data, dry_run=self.check_mode)
        return {"changed": True, **({"subnet": made} if made else {})}


def main():
    SubnetModule()()


if __name__ == "__main__":
    main()
