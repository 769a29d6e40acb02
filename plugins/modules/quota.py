#!/usr/bin/python
"""Project quotas, declaratively."""

from __future__ import annotations

DOCUMENTATION = r"""
module: quota
short_description: Set a project's novakit quotas
description:
  - Sets a project's hard limits for instances, cores, RAM (MB), volumes and volume gigabytes,
    security groups and their rules;
    V(-1) means unlimited.
    Options left out keep their current limit. Limits not set for a project come from the
    configuration (C([quota]) section).
  - Usage is counted from the resources servers hold (as Nova counts from placement). A limit below
    what the project holds now is refused, as Nova refuses it, unless O(force); a forced lower limit
    never removes servers - it refuses new ones.
  - Setting quotas needs the C(admin) role.
version_added: 0.1.0
extends_documentation_fragment: [ansible.builtin.action_common_attributes, novakit.cloud.common, novakit.cloud.cloud]
options:
  name:
    description: The project whose limits to set (default the caller's project).
    type: str
  instances:
    description: Most servers the project may have.
    type: int
  cores:
    description: Most vCPUs the project's servers may hold.
    type: int
  ram:
    description: Most RAM (MB) the project's servers may hold.
    type: int
  volumes:
    description: Most volumes the project may have (Cinder's C(volumes)).
    type: int
    version_added: 0.2.0
  gigabytes:
    description: Most GiB the project's volumes may add up to (Cinder's C(gigabytes)).
    type: int
    version_added: 0.2.0
  security_groups:
    description: Most security groups the project may have, its default group included (Neutron's C(security_group), 10).
    type: int
    version_added: 0.3.0
  security_group_rules:
    description: Most rules the project's security groups may hold together (Neutron's C(security_group_rule), 100).
    type: int
    version_added: 0.3.0
  key_pairs:
    description: Most key pairs each user of the project may have (Nova's C(key_pairs), counted per user).
    type: int
    version_added: 0.2.0
  force:
    description:
      - Set a limit below what the project holds now (Nova's C(force)); without it such a limit is refused
        and nothing is set.
    type: bool
    default: false
    version_added: 0.3.0
"""

EXAMPLES = r"""
- name: Team A may run 20 servers with 40 vCPUs and 80 GB of RAM
  novakit.cloud.quota:
    name: team-a
    instances: 20
    cores: 40
    ram: 81920
"""

RETURN = r"""
project:
  description: The project whose limits were set.
  returned: always
  type: str
  sample: team-a
quota:
  description: For each resource, its C(limit) (V(-1) unlimited) and what is C(in_use).
  returned: always
  type: dict
  contains:
    instances:
      description: Servers.
      type: dict
    cores:
      description: vCPUs.
      type: dict
    ram:
      description: RAM in MB.
      type: dict
    volumes:
      description: Volumes.
      type: dict
    gigabytes:
      description: GiB of volumes.
      type: dict
    security_groups:
      description: Security groups.
      type: dict
    security_group_rules:
      description: Rules of the security groups.
      type: dict
    key_pairs:
      description: Key pairs per user (C(in_use) is 0 here; each user's count is checked when it adds one).
      type: dict
  sample: {instances: {limit: 20, in_use: 3}, cores: {limit: 40, in_use: 3}, ram: {limit: 81920, in_use: 6144}}
"""

from ansible_collections.novakit.cloud.plugins.module_utils.catalog import CatalogModule  # noqa: E402

RESOURCES = (
    "instances",
    "cores",
    "ram",
    "volumes",
    "gigabytes",
    "key_pairs",
    "security_groups",
    "security_group_rules",
)


class QuotaModule(CatalogModule):
    """A project's limits always exist (the defaults): the task is one library call."""

    takes_cloud = True
    resource = "quota"
    family_args = {}  # no O(state), and O(name) may be left out (the caller's project)
    argument_spec = {
        "name": {"type": "str"},
        **{resource: {"type": "int"} for resource in RESOURCES},
        # a count of key pairs, not a key
        "key_pairs": {"type": "int", "no_log": False},
        "force": {"type": "bool", "default": False},
    }

    def run(self):
        from novakit import quota

        limits = {r: self.params[r] for r in RESOURCES if self.params[r] is not None}
        done = self.call(
            quota.apply, self.params["name"], limits, force=self.params["force"], dry_run=self.check_mode
        )
        out = self.result(done["changed"], done["before"], done["after"])
        return {**out, "project": done["project"], "quota": done["quota"]}


def main():
    QuotaModule()()


if __name__ == "__main__":
    main()
