#!/usr/bin/python
"""One-off operations on a server, in direct mode."""

from __future__ import annotations

DOCUMENTATION = r"""
module: server_action
short_description: Reboot, rebuild, lock, unlock or rename a novakit server
description:
  - Runs one operation on an existing server, in direct mode - the API checks and starts it in this
    process, and a background process of its own (C(python -m novakit.worker)) has the server's
    compute host run it and records the result. O(wait) and O(timeout) say whether and how long the
    task waits for that, as for C(openstack.cloud.server).
  - O(action=lock), O(action=unlock) and O(action=rename) are declarative - when already in effect
    they report no change. O(action=reboot) and O(action=rebuild) always act.
  - Power states (started, stopped, paused, suspended) belong to M(novakit.cloud.server) O(novakit.cloud.server#module:state).
  - In check mode the lock and the state table are checked as a real run would, and nothing is done.
  - For many servers across inventory hosts, use the C(novakit.cloud.server_action) playbook.
version_added: 0.1.0
author: novakit developers (@novakit)
extends_documentation_fragment: [novakit.cloud.common]
options:
  server:
    description: Server name or uuid.
    type: str
    required: true
    aliases: [name]
  action:
    description: The operation.
    type: str
    required: true
    choices: [reboot, rebuild, lock, unlock, rename]
  reboot_type:
    description: V(soft) asks the guest; V(hard) resets it (and also works from stopped, paused or error).
    type: str
    choices: [soft, hard]
    default: soft
  image:
    description: Image to rebuild with (name or id); required for O(action=rebuild).
    type: str
  new_name:
    description: New name, for O(action=rename) (required) or O(action=rebuild).
    type: str
  lock_reason:
    description: Why the server is locked, for O(action=lock).
    type: str
  metadata:
    description: New metadata, for O(action=rebuild).
    type: dict
  user_data:
    description: New user data as plain text, for O(action=rebuild). Never logged.
    type: str
  admin_password:
    description: New administrator password, for O(action=rebuild). Never logged.
    type: str
  wait:
    description:
      - V(true) returns once the host has finished a reboot or rebuild and the server is steady
        again (ACTIVE, SHUTOFF for a rebuild of a stopped server, PAUSED, SUSPENDED, or ERROR when
        the operation failed).
      - V(false) returns as soon as the operation is accepted and started (the server is REBOOT,
        HARD_REBOOT or REBUILD) and leaves the host's part to a background process that outlives the
        task, logging to RV(worker_log).
      - Lock, unlock and rename are done on the spot either way.
    type: bool
    default: true
  timeout:
    description:
      - Seconds O(wait) waits. When they pass first the task fails with the server's status and
        task state, and the operation goes on in the background.
    type: int
    default: 180
"""

EXAMPLES = r"""
- name: Hard reboot
  novakit.cloud.server_action:
    server: web-1
    action: reboot
    reboot_type: hard

- name: Rebuild without waiting for the host
  novakit.cloud.server_action:
    server: web-2
    action: rebuild
    image: tiny
    wait: false

- name: Reboot, waiting at most two minutes
  novakit.cloud.server_action:
    server: web-3
    action: reboot
    timeout: 120

- name: Lock it against changes by others
  novakit.cloud.server_action:
    server: web-1
    action: lock
    lock_reason: maintenance window
"""

RETURN = r"""
server:
  description: The server after the operation (with O(wait=false), as the operation started).
  returned: always
  type: dict
worker_log:
  description: The log of the background process that has the host run the operation; it holds no secrets.
  returned: when a reboot or rebuild was started on a compute host
  type: str
"""

import base64  # noqa: E402

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import (  # noqa: E402
    WAIT_ARGS,
    NovakitModule,
    carry_on,
    wait_until,
)


class ServerActionModule(NovakitModule):
    argument_spec = {
        "server": {"type": "str", "required": True, "aliases": ["name"]},
        "action": {
            "type": "str",
            "required": True,
            "choices": ["reboot", "rebuild", "lock", "unlock", "rename"],
        },
        "reboot_type": {"type": "str", "choices": ["soft", "hard"], "default": "soft"},
        "image": {"type": "str"},
        "new_name": {"type": "str"},
        "lock_reason": {"type": "str"},
        "metadata": {"type": "dict"},
        "user_data": {"type": "str", "no_log": True},
        "admin_password": {"type": "str", "no_log": True},
        **WAIT_ARGS,
    }
    module_kwargs = {
        "supports_check_mode": True,
        "required_if": [("action", "rebuild", ["image"]), ("action", "rename", ["new_name"])],
    }

    def run(self):
        from novakit.compute.messages import ComputeRequest
        from novakit.playflow import already_done, check_action

        api, ctx, p = self.api(), self.context(), self.params
        server, action = api.get(ctx, p["server"]), p["action"]
        options = {"name": p["new_name"], "reason": p["lock_reason"]}
        before = {k: server[k] for k in ("name", "status", "locked", "image")}
        if already_done(server, action, options):
            return {"changed": False, "server": server}
        if self.check_mode:
            check_action(api, ctx, {**server, "_hard": p["reboot_type"] == "hard"}, action)
            return {"changed": True, "server": server}
        if action == "reboot":
            started = api.reboot(ctx, server["id"], p["reboot_type"].upper(), defer=True)
        elif action == "rebuild":
            data = {
                "image": p["image"],
                "name": p["new_name"],
                "metadata": p["metadata"],
                "admin_password": p["admin_password"],
            }
            if p["user_data"] is not None:
                data["user_data"] = base64.b64encode(p["user_data"].encode()).decode()
            started = api.rebuild(
                ctx, server["id"], {k: v for k, v in data.items() if v is not None}, defer=True
            )
        elif action == "lock":
            started = api.lock(ctx, server["id"], p["lock_reason"])
        elif action == "unlock":
            started = api.unlock(ctx, server["id"])
        else:
            started = api.rename(ctx, server["id"], p["new_name"])
        result = {"changed": True}
        if isinstance(started, ComputeRequest):
            proc, result["worker_log"] = carry_on(self, ctx, server["id"], request=started)
            server = api.get(ctx, server["id"])
            if p["wait"]:
                server = wait_until(
                    self,
                    api,
                    ctx,
                    server,
                    lambda s: s is not None and s["task_state"] is None,
                    f"finished with its {action}",
                    proc,
                    result["worker_log"],
                )
        else:
            server = started
        if server["vm_state"] == "error":
            self.fail(
                f"{action} of server {server['name']} failed: "
                f"{(server.get('fault') or {}).get('message', 'see its instance actions')}",
                server=server,
                changed=True,
            )
        result["server"] = server
        return self.with_diff(
            result,
            before,
            {k: server[k] for k in ("name", "status", "locked", "image")},
        )


def main():
    ServerActionModule()()


if __name__ == "__main__":
    main()
