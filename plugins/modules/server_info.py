#!/usr/bin/python
"""Read servers and their audit trail."""

from __future__ import annotations

DOCUMENTATION = r"""
module: server_info
short_description: List novakit servers, with their instance actions and faults
description:
  - Returns the servers the caller may see (its project; every project for an admin with
    O(all_projects)), optionally one server by name or uuid, optionally with its audit trail
    (instance actions with their events, as Nova's os-instance-actions).
  - Reads only; it never changes anything.
version_added: 0.1.0
extends_documentation_fragment: [ansible.builtin.action_common_attributes, novakit.cloud.common, novakit.cloud.cloud]
attributes:
  check_mode:
    details:
      - It only reads, and does the same in check mode.
  diff_mode:
    support: N/A
    details:
      - It only reads.
options:
  server:
    description: One server, by name or uuid; without it, every server that matches the filters.
    type: str
    aliases: [name]
  status:
    description: Only servers with this status (V(ACTIVE), V(ERROR), V(SHUTOFF), ...).
    type: str
  host:
    description: Only servers on this compute host (an admin's filter; a member is refused).
    type: str
  flavor:
    description: Only servers of this flavor (name or id).
    type: str
  image:
    description: Only servers built from this image (name or id).
    type: str
  name_regex:
    description: Only servers whose name matches this regular expression (a search, as Nova's C(name) filter).
    type: str
  deleted:
    description:
      - Deleted servers only (the caller's project; every project's with O(all_projects)). With O(server),
        the deleted server of that name or uuid (of a name, the one deleted last).
    type: bool
    default: false
  all_projects:
    description: Every project's servers (admins only); otherwise the caller's project.
    type: bool
    default: false
  with_actions:
    description: Add each server's instance actions and events (in each server, key C(actions)).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: What failed, and why
  novakit.cloud.server_info:
    status: ERROR
    with_actions: true
  register: failed
"""

RETURN = r"""
servers:
  description: The servers, with the keys of RV(novakit.cloud.server#module:server).
  returned: always
  type: list
  elements: dict
  contains:
    actions:
      description:
        - With O(with_actions), the server's instance actions, oldest first - C(action), C(request_id),
          C(user_id), C(project_id), C(start_time), C(finish_time), C(message) and C(events) (each with
          C(event), C(start_time), C(finish_time), C(result), C(host), C(details)).
      type: list
      elements: dict
      returned: when with_actions is true
  sample: [{id: 0b3f6a51-4a5e-4ab3-9a55-2f0f1ce7c2a4, name: web-1, status: ERROR, host: compute-large, fault: {code: 500, message: "No valid host was found."}}]
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


class ServerInfoModule(NovakitModule):
    takes_cloud = True
    argument_spec = {
        "server": {"type": "str", "aliases": ["name"]},
        "status": {"type": "str"},
        "host": {"type": "str"},
        "flavor": {"type": "str"},
        "image": {"type": "str"},
        "name_regex": {"type": "str"},
        "deleted": {"type": "bool", "default": False},
        "all_projects": {"type": "bool", "default": False},
        "with_actions": {"type": "bool", "default": False},
    }

    def run(self):
        from novakit import policy

        api, ctx, p = self.api(), self.context(), self.params
        if p["server"]:
            if p["all_projects"]:
                policy.authorize(ctx, "servers:all_projects")
            servers = [api.get(ctx, p["server"], deleted=p["deleted"])]
            if p["status"] and servers[0]["status"] != p["status"].upper():
                servers = []
            if p["host"] and servers and servers[0]["host"] != p["host"]:
                servers = []
        else:
            # The library's listing decides scope and filters, in its query (novakit.compute.listing).
            filters = ("status", "host", "flavor", "image", "deleted", "all_projects")
            query = {key: p[key] for key in filters}
            servers = api.list_servers(ctx, {**query, "name": p["name_regex"]})
        if p["with_actions"]:
            for s in servers:
                s["actions"] = api.list_actions(ctx, s["id"], deleted=p["deleted"])
        return {"changed": False, "servers": servers}


def main():
    ServerInfoModule()()


if __name__ == "__main__":
    main()
