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
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - novakit.cloud.common
  - novakit.cloud.cloud
  - novakit.cloud.catalog
  - novakit.cloud.catalog.name
options:
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

from ansible_collections.novakit.cloud.plugins.module_utils.catalog import CatalogModule  # noqa: E402


class SubnetModule(CatalogModule):
    takes_cloud = True
    resource = "subnet"
    argument_spec = {
        "network_name": {"type": "str", "aliases": ["network"]},
        "cidr": {"type": "str"},
        "gateway_ip": {"type": "str"},
        "dns_nameservers": {"type": "list", "elements": "str", "default": []},
        "allocation_pool_start": {"type": "str"},
        "allocation_pool_end": {"type": "str"},
    }
    module_kwargs = {
        "required_if": [("state", "present", ["network_name", "cidr"])],
        "required_together": [("allocation_pool_start", "allocation_pool_end")],
    }

    def library(self):
        from novakit.network import subnets

        # Its create's dry run runs the real create's checks (range, pools, overlap), writing nothing.
        return subnets

    def wanted(self):
        p = self.params
        start, end = p["allocation_pool_start"], p["allocation_pool_end"]
        return {
            "network": p["network_name"],
            "cidr": p["cidr"],
            "gateway_ip": p["gateway_ip"],
            "dns_nameservers": p["dns_nameservers"],
            "allocation_pools": [{"start": start, "end": end}] if start else [],
        }

    def compare(self, current, wanted):
        # The range and the network (by name or id) make a subnet; the rest is left as it is.
        changes = {}
        if current["cidr"] != wanted["cidr"]:
            changes["cidr"] = (current["cidr"], wanted["cidr"])
        if wanted["network"] not in (current["network"], current["network_id"]):
            changes["network"] = (current["network"], wanted["network"])
        return changes


def main():
    SubnetModule()()


if __name__ == "__main__":
    main()
