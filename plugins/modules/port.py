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
  - A new port carries its project's C(default) security group, unless it has no port security
    (O(port_security_enabled=false)), as in Neutron. Deleting a port updates, on their hosts, the
    filters of the ports whose rules let its address in (a remote group it was a member of).
version_added: 0.2.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - novakit.cloud.common
  - novakit.cloud.cloud
  - novakit.cloud.catalog
  - novakit.cloud.catalog.name
options:
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
  port_security_enabled:
    description:
      - Neutron's port security. Enabled, the port's security groups decide its traffic, and with
        no group nothing passes. Disabled, the port is not filtered and carries no security group.
      - Used when the port is made; an existing port is left as it is.
    type: bool
    default: true
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
  description:
    - The port, when it exists (not in check mode for a new one).
    - C(binding_host), the host its server is on, is there for a caller who may see hosts (an admin) only, as Neutron's C(binding:host_id).
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
    port_security_enabled: true
    security_groups: [default]
"""

from ansible_collections.novakit.cloud.plugins.module_utils.catalog import lookup  # noqa: E402
from ansible_collections.novakit.cloud.plugins.module_utils.security_groups import FilteringModule  # noqa: E402


class PortModule(FilteringModule):
    takes_cloud = True
    resource = "port"
    argument_spec = {
        "network": {"type": "str"},
        "fixed_ips": {"type": "list", "elements": "dict", "default": []},
        "mac_address": {"type": "str"},
        "port_security_enabled": {"type": "bool", "default": True},
    }
    module_kwargs = {"required_if": [("state", "present", ["network"])]}

    def find(self):
        from novakit.network import ports

        return lookup(self.call, ports.show, self.params["name"])

    def compare(self, current, wanted):
        return {}  # an existing port is left as it is

    def create(self, dry_run):
        from novakit.network import ports

        p = self.params
        data = {k: p[k] for k in ("name", "network", "fixed_ips", "mac_address", "port_security_enabled")}
        # Dry run: the real create's checks (address inside and free, MAC free), nothing written.
        return self.call(ports.create, data, dry_run=dry_run)

    def deleter(self):
        from novakit.network import ports

        return ports.delete_port


def main():
    PortModule()()


if __name__ == "__main__":
    main()
