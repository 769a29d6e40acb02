#!/usr/bin/python
"""One-off operations on a server, in direct mode."""

from __future__ import annotations

DOCUMENTATION = r"""
module: server_action
short_description: Reboot, rebuild, lock, unlock or rename a novakit server
description:
  - Runs one operation on an existing server, in direct mode (the conductor reaches the server's
    compute host from this process), and waits until it has finished on the host.
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
"""

EXAMPLES = r"""
- name: Hard reboot
  novakit.cloud.server_action:
    server: web-1
    action: reboot
    reboot_type: hard

- name: Lock it against changes by others
  novakit.cloud.server_action:
    server: web-1
    action: lock
    lock_reason: maintenance window
"""

RETURN = r"""
server:
  description: The server after the operation.
  returned: always
  type: dict
"""

import base64  # noqa: E402

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


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
    }
    module_kwargs = {
        "supports_check_mode": True,
        "required_if": [("action", "rebuild", ["image"]), ("action", "rename", ["new_name"])],
    }

    def run(self):
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
            server = api.reboot(ctx, server["id"], p["reboot_type"].upper())
        elif action == "rebuild":
            data = {
                "image": p["image"],
                "name": p["new_name"],
                "metadata": p["metadata"],
                "admin_password": p["admin_password"],
            }
            if p["user_data"] is not None:
                data["user_data"] = base64.b64encode(p["user_data"].encode()).decode()
            server = api.rebuild(ctx, server["id"], {k: v for k, v in data.items() if v is not None})
        elif action == "lock":
            server = api.lock(ctx, server["id"], p["lock_reason"])
        elif action == "unlock":
            server = api.unlock(ctx, server["id"])
        else:
            server = api.rename(ctx, server["id"], p["new_name"])
        if server["vm_state"] == "error":
            self.fail(
                f"{action} of server {server['name']} failed: "
                f"{(server.get('fault') or {}).get('message', 'see its instance actions')}",
                server=server,
            )
        return self.with_diff(
            {"changed": True, "server": server},
            before,
            {k: server[k] for k in ("name", "status", "locked", "image")},
        )


def main():
    ServerActionModule()()


if __name__ == "__main__":
    main()
