#!/usr/bin/python
"""Servers, declaratively, in direct mode."""

from __future__ import annotations

DOCUMENTATION = r"""
module: server
short_description: Create, delete, start, stop, pause or suspend a novakit server
description:
  - Makes sure a server exists in the state asked for, in direct mode - the API records it, the
    conductor schedules it and builds it on the chosen compute host in this process (the host's
    registered driver and transport), and records the result, reschedules included.
  - For many servers at once across inventory hosts, use the C(novakit.cloud.boot) playbook instead.
  - A server is found by uuid or by name; names are unique among a project's live servers, so the
    same task run twice creates one server and then reports no change.
  - In check mode a server that does not exist yet is scheduled as a dry run (filters, weighers and
    quota as in a real run, nothing claimed) and RV(would_schedule_to) names the host it would get.
  - The options of an existing server (flavor, image) are not changed; a different value is an error
    that says what to do (rebuild with M(novakit.cloud.server_action), or a new server).
version_added: 0.1.0
author: novakit developers (@novakit)
extends_documentation_fragment: [novakit.cloud.common]
options:
  name:
    description: Server name (unique in the project) or uuid.
    type: str
    required: true
  state:
    description:
      - V(present) makes sure it exists (built and, when new, running); V(absent) deletes it and frees
        its resources; V(started), V(stopped), V(paused) and V(suspended) also set its power state.
    type: str
    choices: [present, absent, started, stopped, paused, suspended]
    default: present
  flavor:
    description: Flavor name or id; required to create the server.
    type: str
  image:
    description: Image name or id; required to create the server.
    type: str
  availability_zone:
    description: Availability zone to boot in.
    type: str
  server_group:
    description: Server group (name or uuid) whose policy the server follows.
    type: str
  metadata:
    description: Server metadata (strings).
    type: dict
    default: {}
  user_data:
    description: Cloud-init user data as plain text (base64-encoded by the module). Never logged.
    type: str
  admin_password:
    description: Administrator password handed to the guest. Never logged.
    type: str
  networks:
    description: Networks, each with C(type) (V(user), V(network), V(bridge)) and C(source).
    type: list
    elements: dict
    default: []
  config_drive:
    description: Attach a config drive.
    type: bool
    default: true
  key_name:
    description: Key pair name recorded with the server.
    type: str
  timeout:
    description: Seconds a graceful shutdown may take for O(state=stopped) before the power is cut.
    type: int
"""

EXAMPLES = r"""
- name: A web server
  novakit.cloud.server:
    name: web-1
    flavor: m1.small
    image: tiny
    user_data: "{{ lookup('file', 'cloud-init.yml') }}"

- name: Where would it go?
  novakit.cloud.server:
    name: web-2
    flavor: m1.small
    image: tiny
  check_mode: true
  register: plan

- name: Stop it
  novakit.cloud.server:
    name: web-1
    state: stopped
"""

RETURN = r"""
server:
  description: The server as it now is (absent after a delete).
  returned: when it exists
  type: dict
  sample: {id: 0b3f..., name: web-1, status: ACTIVE, host: compute-large, addresses: [10.0.0.5]}
id:
  description: The server's uuid.
  returned: when it exists
  type: str
would_schedule_to:
  description: In check mode, the host the scheduler would choose for a new server.
  returned: in check mode, when the server does not exist yet
  type: str
actions:
  description: The lifecycle actions run (or, in check mode, that would run), in order.
  returned: always
  type: list
  elements: str
"""

import base64  # noqa: E402

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402

# vm_state -> the actions that take it to each power state
PATHS = {
    "started": {"stopped": ["start"], "paused": ["unpause"], "suspended": ["resume"]},
    "stopped": {"active": ["stop"], "paused": ["unpause", "stop"], "suspended": ["resume", "stop"]},
    "paused": {"active": ["pause"], "stopped": ["start", "pause"], "suspended": ["resume", "pause"]},
    "suspended": {"active": ["suspend"], "stopped": ["start", "suspend"], "paused": ["unpause", "suspend"]},
}
SHOWN = ("id", "name", "status", "host", "flavor", "image", "addresses", "power_state_name")


class ServerModule(NovakitModule):
    argument_spec = {
        "name": {"type": "str", "required": True},
        "state": {
            "type": "str",
            "default": "present",
            "choices": ["present", "absent", "started", "stopped", "paused", "suspended"],
        },
        "flavor": {"type": "str"},
        "image": {"type": "str"},
        "availability_zone": {"type": "str"},
        "server_group": {"type": "str"},
        "metadata": {"type": "dict", "default": {}},
        "user_data": {"type": "str", "no_log": True},
        "admin_password": {"type": "str", "no_log": True},
        "networks": {"type": "list", "elements": "dict", "default": []},
        "config_drive": {"type": "bool", "default": True},
        "key_name": {"type": "str", "no_log": False},
        "timeout": {"type": "int"},
    }
    module_kwargs = {"supports_check_mode": True}

    def run(self):
        from novakit import exceptions

        api, ctx, p = self.api(), self.context(), self.params
        try:
            server = api.get(ctx, p["name"])
        except exceptions.InstanceNotFound:
            server = None
        before = {k: server[k] for k in SHOWN} if server else None
        if p["state"] == "absent":
            if server and not self.check_mode:
                api.delete(ctx, server["id"])
            return self.with_diff(
                {"changed": server is not None, "actions": ["delete"] if server else []}, before, None
            )
        if server is None:
            return self._create()
        self._check_same(server)
        todo = PATHS.get(p["state"], {}).get(server["vm_state"], [])
        if server["vm_state"] == "error" or (server["task_state"] and todo):
            self.fail(
                f"server {server['name']} is {server['status']} (task: {server['task_state'] or 'none'}); "
                f"it cannot be brought to state {p['state']} now",
                server=server,
            )
        for action in [] if self.check_mode else todo:
            server = self._act(api, ctx, action, server)
        return self.with_diff(
            {"changed": bool(todo), "actions": todo, "server": server, "id": server["id"]},
            before,
            {k: server[k] for k in SHOWN},
        )

    def _act(self, api, ctx, action, server):
        if action == "stop":
            return api.stop(ctx, server["id"], timeout=self.params["timeout"])
        return getattr(api, action)(ctx, server["id"])

    def _create(self):
        from novakit.playflow import plan

        api, ctx, p = self.api(), self.context(), self.params
        if not (p["flavor"] and p["image"]):
            self.fail(f"server {p['name']} does not exist; flavor and image are needed to create it")
        request = {
            k: p[k]
            for k in (
                "name",
                "flavor",
                "image",
                "availability_zone",
                "server_group",
                "metadata",
                "networks",
                "config_drive",
                "key_name",
                "admin_password",
            )
        }
        if p["user_data"] is not None:
            request["user_data"] = base64.b64encode(p["user_data"].encode()).decode()
        todo = ["create", *PATHS.get(p["state"], {}).get("active", [])]
        if self.check_mode:
            host = plan(api, ctx, request)["would_schedule_to"][p["name"]]
            return self.with_diff(
                {"changed": True, "actions": todo, "would_schedule_to": host},
                None,
                {"name": p["name"], "host": host},
            )
        (server,) = api.create(ctx, request, build=True)
        if server["vm_state"] == "error":
            fault = server.get("fault") or {}
            self.fail(
                f"server {p['name']} failed to build: {fault.get('message', 'no fault recorded')}",
                server=server,
                id=server["id"],
                fault=fault,
            )
        for action in todo[1:]:
            server = self._act(api, ctx, action, server)
        return self.with_diff(
            {"changed": True, "actions": todo, "server": server, "id": server["id"]},
            None,
            {k: server[k] for k in SHOWN},
        )

    def _check_same(self, server):
        p = self.params
        if p["flavor"] and p["flavor"] not in (
            server["flavor"].get("name"),
            server["flavor"].get("flavorid"),
        ):
            self.fail(
                f"server {server['name']} exists with flavor {server['flavor'].get('name')}; resizing is "
                "not supported: delete it and create it again, or use another name"
            )
        if p["image"]:
            from novakit.compute import images

            with self.database().reader() as session:
                image = images.get(session, p["image"])
            if image.uuid != server["image"]:
                self.fail(
                    f"server {server['name']} runs another image; rebuild it with "
                    "novakit.cloud.server_action (action: rebuild) to change it"
                )


def main():
    ServerModule()()


if __name__ == "__main__":
    main()
