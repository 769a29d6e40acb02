#!/usr/bin/python
"""Server groups, declaratively."""

from __future__ import annotations

DOCUMENTATION = r"""
module: server_group
short_description: Create or delete a novakit server group
description:
  - Makes sure a server group with a placement policy exists in the caller's project
    (O(state=present)) or does not (O(state=absent)), by a name unique in the project. Servers
    join it at boot (C(server_group) of M(novakit.cloud.server) or of the boot playbook).
  - V(affinity) puts members on one host, V(anti-affinity) on different hosts (at most
    C(max_server_per_host) per host, default 1); the soft policies prefer that through the
    weighers but do not insist.
  - A group's policy and rules cannot change once it exists (as in Nova); other values for an
    existing name are an error that says so.
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - novakit.cloud.common
  - novakit.cloud.cloud
  - novakit.cloud.catalog
  - novakit.cloud.catalog.name
options:
  policy:
    description: Placement policy; required to create the group.
    type: str
    choices: [affinity, anti-affinity, soft-affinity, soft-anti-affinity]
  rules:
    description: Policy rules; V(anti-affinity) accepts C(max_server_per_host) (a positive integer).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Spread the database servers, at most two per host
  novakit.cloud.server_group:
    name: db
    policy: anti-affinity
    rules:
      max_server_per_host: 2
"""

RETURN = r"""
server_group:
  description: The group, when it exists.
  returned: when state is present
  type: dict
  contains:
    id:
      description: The group's uuid (in check mode, for a new group, absent).
      type: str
    name:
      description: Its name.
      type: str
    policy:
      description: Its placement policy.
      type: str
    rules:
      description: Its policy rules.
      type: dict
    members:
      description: The uuids of its live servers.
      type: list
      elements: str
    project_id:
      description: The project that owns it.
      type: str
    user_id:
      description: The user that created it.
      type: str
  sample: {id: 5a2d..., name: db, policy: anti-affinity, rules: {max_server_per_host: 2}, members: [], project_id: team-a, user_id: alice}
"""

from ansible_collections.novakit.cloud.plugins.module_utils.catalog import CatalogModule  # noqa: E402


class ServerGroupModule(CatalogModule):
    takes_cloud = True
    resource = "server_group"
    unset_is_wanted = True
    cannot_change = "a group's policy cannot change: delete it or use another name"
    plan_in_result = True
    argument_spec = {
        "policy": {
            "type": "str",
            "choices": ["affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity"],
        },
        "rules": {"type": "dict", "default": {}},
    }
    module_kwargs = {"required_if": [("state", "present", ["policy"])]}

    def find(self):
        from novakit.compute import server_groups

        return self.call(server_groups.find, self.params["name"])

    def wanted(self):
        from novakit.compute import server_groups

        return {
            "policy": self.params["policy"],
            "rules": server_groups.validate(self.params["policy"], self.params["rules"]),
        }

    def create(self, dry_run):
        from novakit.compute import server_groups

        p = self.params
        return self.call(server_groups.create, p["name"], p["policy"], p["rules"], dry_run=dry_run)

    def delete(self, current, dry_run):
        from novakit.compute import server_groups

        if not dry_run:  # found in the caller's project is all a delete checks
            self.call(server_groups.delete_group, current["id"])


def main():
    ServerGroupModule()()


if __name__ == "__main__":
    main()
