#!/usr/bin/python
"""Ports, declaratively."""

from __future__ import annotations

DOCUMENTATION = r"""
module: port
short_description: Create or delete a novakit port
description:
  - Makes sure a port exists (O(state=present)) or does not (O(state=absent)) - a MAC and a fixed
    IP on a network, chosen once, to hand to a server (M(novakit.cloud.server) O(novakit.cloud.server#module:nics) C(port-id)).
    A server's delete unbinds it and keeps it.
  - An existing port (by name, in the caller's project) is left as it is; deleting one a server
    uses fails.
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
    description: Port name.
    type: str
    required: true
  state:
    description: Whether the port should exist.
    type: str
    choices: [present, absent]
    default: present
  network:
    description: The network's name or id.
    type: str
  fixed_ips:
    description: The fixed IP, as a list of one mapping with C(ip_address); default the first free address.
    type: list
    elements: dict
    default: []
  mac_address:
    description: The MAC; default a new C(fa:16:3e:xx:xx:xx).
    type: str
"""

EXAMPLES = r"""
- name: An address for the database server, known before it exists
  novakit.cloud.port:
    name: db-port
    network: lan
    fixed_ips:
      - ip_address: 192.168.122.10
"""

RETURN = r"""
port:
  description: The port, when it exists (not in check mode for a new one).
  returned: when state is present
  type: dict
  sample:
    id: 0c4d...
    name: db-port
    network: lan
    mac_address: "fa:16:3e:12:34:56"
    fixed_ips: [{subnet: lan-v4, ip_address: 192.168.122.10}]
    device_id: null
    binding_host: null
    status: DOWN
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


class PortModule(NovakitModule):
    argument_spec = {
        "name": {"type": "str", "required": True},
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "network": {"type": "str"},
        "fixed_ips": {"type": "list", "elements": "dict", "default": []},
        "mac_address": {"type": "str"},
    }
    module_kwargs = {"supports_check_mode": True, "required_if": [("state", "present", ["network"])]}

    def run(self):
        from novakit.network import ports

        db, ctx, p = self.database(), self.context(), self.params
        existing = next((x for x in ports.list_ports(db, ctx) if x["name"] == p["name"]), None)
        if p["state"] == "absent":
            if existing and not self.check_mode:
                ports.delete_port(db, ctx, existing["id"])
            return {"changed": existing is not None}
        if existing:
            return {"changed": False, "port": existing}
        data = {
            "name": p["name"],
            "network": p["network"],
            "fixed_ips": p["fixed_ips"],
            "mac_address": p["mac_address"],
        }
        # Check mode asks the real create's checks (address inside and free, MAC free), writing nothing.
        made = ports.create(db, ctx, data, dry_run=self.check_mode)
        return {"changed": True, **({"port": made} if made else {})}


def main():
    PortModule()()


if __name__ == "__main__":
    main()
