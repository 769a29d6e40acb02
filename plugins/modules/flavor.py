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
    description: Flavor name.
    type: str
    required: true
  state:
    description: Whether the flavor should exist.
    type: str
    choices: [present, absent]
    default: present
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
  description: The flavor, when it exists (not in check mode for a new one).
  returned: when state is present
  type: dict
  contains:
    id:
      description: The flavor's id (C(flavorid)).
      type: str
    name:
      description: Its name.
      type: str
    vcpus:
      description: vCPUs.
      type: int
    ram:
      description: RAM in MB.
      type: int
    disk:
      description: Root disk in GB.
      type: int
    ephemeral:
      description: Ephemeral disk in GB.
      type: int
    swap:
      description: Swap in MB.
      type: int
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

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


class FlavorModule(NovakitModule):
    argument_spec = {
        "name": {"type": "str", "required": True},
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "vcpus": {"type": "int"},
        "ram": {"type": "int"},
        "disk": {"type": "int", "default": 0},
        "ephemeral": {"type": "int", "default": 0},
        "swap": {"type": "int", "default": 0},
        "extra_specs": {"type": "dict", "default": {}},
    }
    module_kwargs = {"supports_check_mode": True, "required_if": [("state", "present", ["vcpus", "ram"])]}

    def run(self):
        from novakit.compute import flavors

        db, ctx, p = self.database(), self.context(), self.params
        existing = next((f for f in flavors.list_flavors(db) if f["name"] == p["name"]), None)
        if p["state"] == "absent":
            if existing and not self.check_mode:
                flavors.delete(db, ctx, p["name"])
            return {"changed": existing is not None}
        wanted = {
            "vcpus": p["vcpus"],
            "ram": p["ram"],
            "disk": p["disk"],
            "ephemeral": p["ephemeral"],
            "swap": p["swap"],
            "extra_specs": {k: str(v) for k, v in p["extra_specs"].items()},
        }
        if existing:
            diff = {k: (existing[k], v) for k, v in wanted.items() if existing[k] != v}
            if diff:
                self.ansible.fail_json(
                    msg=f"flavor {p['name']} exists with other values {diff}; "
                    "flavors cannot change: create one with a new name"
                )
            return {"changed": False, "flavor": existing}
        if self.check_mode:
            return {"changed": True}
        flavor = flavors.create(
            db,
            ctx,
            {
                "name": p["name"],
                "vcpus": p["vcpus"],
                "memory_mb": p["ram"],
                "root_gb": p["disk"],
                "ephemeral_gb": p["ephemeral"],
                "swap": p["swap"],
                "extra_specs": wanted["extra_specs"],
            },
        )
        return {"changed": True, "flavor": flavor}


def main():
    FlavorModule()()


if __name__ == "__main__":
    main()
