#!/usr/bin/python
"""Security groups, declaratively."""

from __future__ import annotations

DOCUMENTATION = r"""
module: security_group
short_description: Create or delete a novakit security group
description:
  - Makes sure a security group exists in the caller's project (O(state=present)) or does not
    (O(state=absent)), as C(openstack.cloud.security_group) does with Neutron. Its rules are
    M(novakit.cloud.security_group_rule)'s; a new group starts with Neutron's two egress rules
    (anywhere, IPv4 and IPv6).
  - The servers' ports carry groups named at boot (C(security_groups) of M(novakit.cloud.server)
    and of the boot playbook; V(default) when none is named). Each project has a V(default) group,
    made on first use, which a member cannot delete.
  - A group's name is unique in its project. An existing group is left as it is; another
    O(description) for an existing name is an error that says so.
  - Deleting a group that a port carries fails, naming how many.
version_added: 0.3.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - novakit.cloud.common
  - novakit.cloud.cloud
  - novakit.cloud.catalog
  - novakit.cloud.catalog.name
options:
  description:
    description: What the group is for.
    type: str
"""

EXAMPLES = r"""
- name: A group for the web servers
  novakit.cloud.security_group:
    name: web
    description: HTTP from anywhere, SSH from the office
"""

RETURN = r"""
security_group:
  description: The group with its rules, when it exists (not in check mode for a new one).
  returned: when state is present
  type: dict
  sample:
    id: 1f0c...
    name: web
    description: HTTP from anywhere
    project_id: team-a
    security_group_rules:
      - {id: 7d1e..., direction: egress, ethertype: IPv4, protocol: null, port_range_min: null, port_range_max: null,
         remote_ip_prefix: null, remote_group: null}
"""

from ansible_collections.novakit.cloud.plugins.module_utils.catalog import lookup  # noqa: E402
from ansible_collections.novakit.cloud.plugins.module_utils.security_groups import FilteringModule  # noqa: E402


class SecurityGroupModule(FilteringModule):
    takes_cloud = True
    resource = "security_group"
    cannot_change = "a group's description cannot change here: delete the group or use another name"
    argument_spec = {
        "description": {"type": "str"},
    }

    def find(self):
        from novakit.network import security_groups

        return lookup(self.call, security_groups.show_group, self.params["name"])

    def wanted(self):
        return {"description": self.params["description"]}

    def create(self, dry_run):
        from novakit.network import security_groups

        data = {"name": self.params["name"], "description": self.params["description"]}
        # Dry run: the real create's checks (name, quota), nothing written.
        return self.call(security_groups.create_group, data, dry_run=dry_run)

    def deleter(self):
        from novakit.network import security_groups

        return security_groups.delete_group


def main():
    SecurityGroupModule()()


if __name__ == "__main__":
    main()
