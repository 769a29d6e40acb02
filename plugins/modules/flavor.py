#!/usr/bin/python
"""Flavors, declaratively."""

from __future__ import annotations

DOCUMENTATION = r"""
module: flavor
short_description: Create or delete a novakit flavor
description:
  - Makes sure a flavor exists with the given sizes (O(state=present)) or does not (O(state=absent)).
  - A flavor's sizes cannot change once created (as in Nova); a different size for an existing
    name is an error that says so.
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - novakit.cloud.common
  - novakit.cloud.cloud
  - novakit.cloud.catalog
  - novakit.cloud.catalog.name
options:
  vcpus:
    description: vCPUs.
    type: int
  ram:
    description: RAM in MB.
    type: int
  disk:
    description: Root disk in GB.
    type: int
    default: 0
  ephemeral:
    description: Ephemeral disk in GB.
    type: int
    default: 0
  swap:
    description: Swap in MB.
    type: int
    default: 0
  extra_specs:
    description: Extra specs (C(trait:NAME=required), C(hw:...)).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: A small flavor
  novakit.cloud.flavor:
    name: m1.small
    vcpus: 1
    ram: 2048
    disk: 20
"""

RETURN = r"""
flavor:
  description:
    - The flavor, when it exists (not in check mode for a new one).
    - Its C(name), C(vcpus), C(ram), C(disk), C(ephemeral) and C(swap) are as the options of those names say.
  returned: when state is present
  type: dict
  contains:
    id:
      description: The flavor's id (C(flavorid)).
      type: str
    extra_specs:
      description: Its extra specs.
      type: dict
    is_public:
      description: Whether every project may use it.
      type: bool
    description:
      description: Its description.
      type: str
  sample: {id: 6f1e..., name: m1.small, vcpus: 1, ram: 2048, disk: 20, ephemeral: 0, swap: 0, extra_specs: {}, is_public: true, description: null}
"""

from ansible_collections.novakit.cloud.plugins.module_utils.catalog import CatalogModule  # noqa: E402


class FlavorModule(CatalogModule):
    takes_cloud = True
    resource = "flavor"
    cannot_change = "flavors cannot change: create one with a new name"
    argument_spec = {
        "vcpus": {"type": "int"},
        "ram": {"type": "int"},
        "disk": {"type": "int", "default": 0},
        "ephemeral": {"type": "int", "default": 0},
        "swap": {"type": "int", "default": 0},
        "extra_specs": {"type": "dict", "default": {}},
    }
    module_kwargs = {"required_if": [("state", "present", ["vcpus", "ram"])]}

    def library(self):
        from novakit.catalog import flavors

        # find is its show, as the caller may see flavors: an admin every one (a private one too),
        # so a name taken is found; a member the public ones and those given to its project,
        # whose create is refused by the policy (flavor:create) rather than told of the others.
        return flavors

    def wanted(self):
        p = self.params
        specs = {k: str(v) for k, v in p["extra_specs"].items()}
        return {**{k: p[k] for k in ("vcpus", "ram", "disk", "ephemeral", "swap")}, "extra_specs": specs}

    def create(self, dry_run):
        w = self.wanted()
        data = {
            "name": self.params["name"],
            "vcpus": w["vcpus"],
            "memory_mb": w["ram"],
            "root_gb": w["disk"],
            "ephemeral_gb": w["ephemeral"],
            "swap": w["swap"],
            "extra_specs": w["extra_specs"],
        }
        return self.call(self.library().create, data, dry_run=dry_run)


def main():
    FlavorModule()()


if __name__ == "__main__":
    main()
