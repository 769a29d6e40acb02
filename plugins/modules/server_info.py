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
author: novakit developers (@novakit)
extends_documentation_fragment: [novakit.cloud.common]
options:
  server:
    description: One server, by name or uuid; without it, every server that matches the filters.
    type: str
    aliases: [name]
  status:
    description: Only servers with this status (V(ACTIVE), V(ERROR), V(SHUTOFF), ...).
    type: str
  host:
    description: Only servers on this compute host.
    type: str
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
  description: The servers (id, name, status, vm_state, task_state, power_state, host, addresses, fault...).
  returned: always
  type: list
  elements: dict
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


class ServerInfoModule(NovakitModule):
    argument_spec = {
        "server": {"type": "str", "aliases": ["name"]},
        "status": {"type": "str"},
        "host": {"type": "str"},
        "all_projects": {"type": "bool", "default": False},
        "with_actions": {"type": "bool", "default": False},
    }
    module_kwargs = {"supports_check_mode": True}

    def run(self):
        api, ctx, p = self.api(), self.context(), self.params
        if ctx.is_admin and not p["all_projects"] and not p["server"]:
            # An admin sees every project; without all_projects, show its own like anyone else.
            servers = [s for s in api.list(ctx) if s["project_id"] == ctx.project_id]
        elif not ctx.is_admin and p["all_projects"]:
            self.fail("all_projects needs the admin role")
        else:
            servers = [api.get(ctx, p["server"])] if p["server"] else api.list(ctx)
        servers = [
            s
            for s in servers
            if (not p["status"] or s["status"] == p["status"].upper())
            and (not p["host"] or s["host"] == p["host"])
        ]
        if p["with_actions"]:
            for s in servers:
                s["actions"] = api.list_actions(ctx, s["id"])
        return {"changed": False, "servers": servers}


def main():
    ServerInfoModule()()


if __name__ == "__main__":
    main()
