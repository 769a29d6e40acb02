#!/usr/bin/python
"""Servers, declaratively, in direct mode."""

from __future__ import annotations

DOCUMENTATION = r"""
module: server
short_description: Create, delete, start, stop, pause or suspend a novakit server
description:
  - Makes sure a server exists in the state asked for, in direct mode - the API records it, the
    conductor schedules it and builds it on the chosen compute host (through the host's registered
    driver and transport), and records the result, reschedules included.
  - For many servers at once across inventory hosts, use the C(novakit.cloud.boot) playbook instead.
  - A server is found by uuid or by name; names are unique among a project's live servers, so the
    same task run twice creates one server and then reports no change.
  - In check mode a server that does not exist yet is scheduled as a dry run (filters, weighers and
    quota as in a real run, nothing claimed) and RV(would_schedule_to) names the host it would get.
  - The work runs in a background process of its own (C(python -m novakit.worker)), started by the
    module once the request is recorded; O(wait) and O(timeout) say whether and how long the task
    waits for it, as for C(openstack.cloud.server).
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
  shutdown_timeout:
    description:
      - Seconds a graceful shutdown may take for O(state=stopped) before the power is cut
        (default the configuration's C(compute.shutdown_timeout)).
    type: int
  wait:
    description:
      - V(true) returns once the server has reached a steady state - ACTIVE, SHUTOFF, PAUSED or
        SUSPENDED as O(state) asks, deleted for O(state=absent), or ERROR (a failure, with its fault).
        A server that is busy when the task starts (still building, say) is waited for first.
      - V(false) returns as soon as the request is recorded and accepted (validation, quota, locks
        and the state table checked; a new server is BUILD) and leaves the work to a background
        process that outlives the task, logging to RV(worker_log) under the novakit state directory.
    type: bool
    default: true
  timeout:
    description:
      - Seconds O(wait) waits. When they pass first the task fails with the server's status and
        task state, and the work goes on in the background.
    type: int
    default: 180
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

- name: Ask for three servers without waiting for each build
  novakit.cloud.server:
    name: "batch-{{ item }}"
    flavor: m1.small
    image: tiny
    wait: false
  loop: [1, 2, 3]

- name: Then wait for them, at most five minutes each (an existing server is waited for)
  novakit.cloud.server:
    name: "batch-{{ item }}"
    timeout: 300
  loop: [1, 2, 3]
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
worker_log:
  description:
    - The log of the background process that carries the work on (scheduling, building, the
      actions); it names servers, hosts and actions, never secrets.
  returned: when the task started work on a compute host
  type: str
  sample: /root/.local/state/novakit/workers/req-7c1d...-0b3f....log
"""

import base64  # noqa: E402

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import (  # noqa: E402
    WAIT_ARGS,
    NovakitModule,
    carry_on,
    wait_until,
)

# vm_state -> the actions that take it to each power state
PATHS = {
    "started": {"stopped": ["start"], "paused": ["unpause"], "suspended": ["resume"]},
    "stopped": {"active": ["stop"], "paused": ["unpause", "stop"], "suspended": ["resume", "stop"]},
    "paused": {"active": ["pause"], "stopped": ["start", "pause"], "suspended": ["resume", "pause"]},
    "suspended": {"active": ["suspend"], "stopped": ["start", "suspend"], "paused": ["unpause", "suspend"]},
}
# state -> the vm_state it ends in, and the status a user sees there
ENDS = {
    "present": ("active", "ACTIVE"),
    "started": ("active", "ACTIVE"),
    "stopped": ("stopped", "SHUTOFF"),
    "paused": ("paused", "PAUSED"),
    "suspended": ("suspended", "SUSPENDED"),
}
SHOWN = ("id", "name", "status", "host", "flavor", "image", "addresses", "power_state_name")


def steady(server):
    """Nothing in progress: deleted, or no task and not building."""
    return server is None or (server["task_state"] is None and server["vm_state"] != "building")


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
        "shutdown_timeout": {"type": "int"},
        **WAIT_ARGS,
    }
    module_kwargs = {"supports_check_mode": True}

    def run(self):
        from novakit import exceptions

        api, ctx, p = self.api(), self.context(), self.params
        try:
            server = api.get(ctx, p["name"])
        except exceptions.InstanceNotFound:
            server = None
        if server is not None and p["wait"] and not steady(server):
            # Busy (a build or action of an earlier task, say): decide once it has settled.
            server = wait_until(self, api, ctx, server, steady, "steady", changed=False)
        before = {k: server[k] for k in SHOWN} if server else None
        if p["state"] == "absent":
            return self._delete(api, ctx, server, before)
        if server is None:
            return self._create(api, ctx)
        self._check_same(server)
        # A server still building (wait: false) is on its way to active.
        now = "active" if server["vm_state"] == "building" else server["vm_state"]
        todo = PATHS.get(p["state"], {}).get(now, [])
        if server["vm_state"] == "error" or (server["task_state"] and todo):
            self.fail(
                f"server {server['name']} is {server['status']} (task: {server['task_state'] or 'none'}); "
                f"it cannot be brought to state {p['state']} now",
                server=server,
            )
        result = {"changed": bool(todo), "actions": todo, "id": server["id"]}
        if todo and not self.check_mode:
            started = self._act(api, ctx, todo[0], server["id"])
            result.update(self._carry_on(api, ctx, server["id"], started, todo[1:]))
            server = api.get(ctx, server["id"])
            if p["wait"]:
                server = self._wait(api, ctx, server, result.get("_proc"), result.get("worker_log"))
        result.pop("_proc", None)
        result["server"] = server
        return self.with_diff(result, before, {k: server[k] for k in SHOWN})

    def _act(self, api, ctx, action, uuid):
        """Start ``action`` (checks and the guarded write); the host's part is left to the worker."""
        if action == "stop":
            return api.stop(ctx, uuid, timeout=self.params["shutdown_timeout"], defer=True)
        return getattr(api, action)(ctx, uuid, defer=True)

    def _carry_on(self, api, ctx, uuid, started=None, then=(), build=()):
        from novakit.compute.messages import ComputeRequest

        request = started if isinstance(started, ComputeRequest) else None
        if request is None and not then and not build:
            return {}
        steps = [
            {"action": a, "options": {"timeout": self.params["shutdown_timeout"]} if a == "stop" else {}}
            for a in then
        ]
        proc, log = carry_on(self, ctx, uuid, build=list(build), request=request, then=steps)
        return {"_proc": proc, "worker_log": log}

    def _wait(self, api, ctx, server, proc, log):
        vm_state, status = ENDS[self.params["state"]]
        server = wait_until(
            self,
            api,
            ctx,
            server,
            lambda s: s is not None and s["task_state"] is None and s["vm_state"] in (vm_state, "error"),
            status,
            proc,
            log,
        )
        if server["vm_state"] == "error":
            fault = server.get("fault") or {}
            self.fail(
                f"server {server['name']} is ERROR: {fault.get('message', 'no fault recorded')}",
                server=server,
                id=server["id"],
                fault=fault,
                changed=True,
            )
        return server

    def _delete(self, api, ctx, server, before):
        if server is None:
            return self.with_diff({"changed": False, "actions": []}, None, None)
        result = {"changed": True, "actions": ["delete"], "id": server["id"]}
        if not self.check_mode:
            started = api.delete(ctx, server["id"], defer=True)
            result.update(self._carry_on(api, ctx, server["id"], started))
            if self.params["wait"]:
                gone = wait_until(
                    self,
                    api,
                    ctx,
                    server,
                    lambda s: s is None or (s["task_state"] is None and s["vm_state"] == "error"),
                    "deleted",
                    result.get("_proc"),
                    result.get("worker_log"),
                )
                if gone is not None:
                    fault = gone.get("fault") or {}
                    self.fail(
                        f"delete of server {gone['name']} failed: {fault.get('message', 'no fault recorded')}",
                        server=gone,
                        id=gone["id"],
                        changed=True,
                    )
        result.pop("_proc", None)
        return self.with_diff(result, before, None)

    def _create(self, api, ctx):
        from novakit.playflow import plan

        p = self.params
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
        (server,) = api.create(ctx, request, build=False)
        result = {"changed": True, "actions": todo, "id": server["id"]}
        result.update(self._carry_on(api, ctx, server["id"], then=todo[1:], build=[server["id"]]))
        if p["wait"]:
            server = self._wait(api, ctx, server, result.get("_proc"), result.get("worker_log"))
        result.pop("_proc", None)
        result["server"] = server
        return self.with_diff(result, None, {k: server[k] for k in SHOWN})

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
