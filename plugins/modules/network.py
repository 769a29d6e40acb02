#!/usr/bin/python
"""Networks, declaratively."""

from __future__ import annotations

DOCUMENTATION = r"""
module: network
short_description: Create or delete a novakit network
description:
  - Makes sure a network exists (O(state=present)) or does not (O(state=absent)). A network is a
    libvirt network or a bridge the compute hosts have; servers get ports on it
    (M(novakit.cloud.server) O(novakit.cloud.server#module:nics)). Only a host that has it takes such a server.
  - An existing network is left as it is; other values for an existing name are an error that says so.
  - Deleting a network that still has ports fails, naming how many.
version_added: 0.2.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - novakit.cloud.common
  - novakit.cloud.cloud
  - novakit.cloud.catalog
  - novakit.cloud.catalog.name
options:
  provider:
    description: V(network) (a libvirt network) or V(bridge) (a host bridge).
    type: str
    choices: [network, bridge]
    default: network
  source:
    description: Its name on the hosts (the libvirt network's or the bridge's); default O(name).
    type: str
  is_default:
    description: Servers whose request names no network get a port on it (at most one network).
    type: bool
    default: false
  mtu:
    description: MTU of the network.
    type: int
"""

EXAMPLES = r"""
- name: The hosts' libvirt network "default", the one servers get when they name none
  novakit.cloud.network:
    name: lan
    source: default
    is_default: true
"""

RETURN = r"""
network:
  description: The network, when it exists (not in check mode for a new one).
  returned: when state is present
  type: dict
  sample: {id: 2b7c..., name: lan, provider: network, source: default, is_default: true, mtu: null, shared: true, subnets: [lan-v4]}
"""

from ansible_collections.novakit.cloud.plugins.module_utils.catalog import CatalogModule  # noqa: E402


class NetworkModule(CatalogModule):
    takes_cloud = True
    resource = "network"
    unset_is_wanted = True
    argument_spec = {
        "provider": {"type": "str", "choices": ["network", "bridge"], "default": "network"},
        "source": {"type": "str"},
        "is_default": {"type": "bool", "default": False},
        "mtu": {"type": "int"},
    }

    def library(self):
        from novakit.network import networks

        # Its create's dry run runs the real create's checks (policy, the one default), writing nothing.
        return networks

    def wanted(self):
        p = self.params
        return {
            "provider": p["provider"],
            "source": p["source"] or p["name"],
            "is_default": p["is_default"],
            "mtu": p["mtu"],
        }


def main():
    NetworkModule()()


if __name__ == "__main__":
    main()
