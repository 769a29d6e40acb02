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
  - Power states (started, stopped, paused, suspended) and deleting belong to M(novakit.cloud.server)
    O(novakit.cloud.server#module:state); together the two modules offer every action of novakit's
    state table.
  - For many servers across inventory hosts, use the C(novakit.cloud.server_action) playbook.
version_added: 0.1.0
author: novakit developers (@novakit)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - novakit.cloud.attributes
  - novakit.cloud.common
  - novakit.cloud.wait
attributes:
  check_mode:
    details:
      - The API's dry run of the action - the options, the lock, the state table and the action's own
        look-ups (a rebuild's image, a rename's name) are checked as a real run checks them, and
        nothing is done. A refusal is the real run's, word for word.
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
    description:
      - New password for the guest's root user, for O(action=rebuild). Never logged, never stored in
        clear (a SHA-512 crypt hash); the rebuilt guest gets it from its config drive. Without it
        a rebuild keeps the password the server had.
      - Refused for a server without a config drive, or on a host whose driver cannot set it.
    type: str
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
  description:
    - The server after the operation (with O(wait=false), as the operation started), with the keys
      of RV(novakit.cloud.server#module:server).
  returned: always
  type: dict
  contains:
    id:
      description: The server's uuid.
      type: str
    name:
      description: Its name (the new one after a rename).
      type: str
    status:
      description: The status a user sees - V(ACTIVE), V(REBOOT), V(HARD_REBOOT), V(REBUILD), V(SHUTOFF), V(ERROR)...
      type: str
    vm_state:
      description: Nova's vm_state.
      type: str
    task_state:
      description: The task in progress, or null when none.
      type: str
    host:
      description: The compute host it runs on.
      type: str
    image:
      description: The uuid of the image it runs (the new one after a rebuild).
      type: str
    locked:
      description: Whether it is locked.
      type: bool
    locked_reason:
      description: Why it was locked.
      type: str
    fault:
      description: In ERROR, its last fault (C(code), C(message), C(created), C(host)).
      type: dict
      returned: when the server is in ERROR
  sample:
    id: 0b3f6a51-4a5e-4ab3-9a55-2f0f1ce7c2a4
    name: web-1
    status: ACTIVE
    vm_state: active
    task_state: null
    host: compute-large
    locked: true
    locked_reason: maintenance window
id:
  description: The server's uuid.
  returned: always
  type: str
  sample: 0b3f6a51-4a5e-4ab3-9a55-2f0f1ce7c2a4
actions:
  description: The operation, when it ran (or, in check mode, would run); empty when it was in effect already.
  returned: always
  type: list
  elements: str
  sample: [lock]
worker_log:
  description: The log of the background process that has the host run the operation; it holds no secrets.
  returned: when a reboot or rebuild was started on a compute host
  type: str
  sample: /root/.local/state/novakit/workers/req-7c1d...-0b3f....log
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import (  # noqa: E402
    WAIT_ARGS,
    NovakitModule,
    background,
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
        from novakit import desired

        p = self.params
        # The options of every action, by the state table's names; each action takes its own.
        options = {
            "reboot_type": p["reboot_type"],
            "image": p["image"],
            "name": p["new_name"],
            "reason": p["lock_reason"],
            "metadata": p["metadata"],
            "user_data": desired.encode_user_data(p["user_data"]),
            "admin_password": p["admin_password"],
        }
        out = desired.perform(
            self.api(),
            self.context(),
            p["server"],
            p["action"],
            options,
            dry_run=self.check_mode,
            background=background(self),
        )
        return self.with_diff(out.result(), *out.diff())


def main():
    ServerActionModule()()


if __name__ == "__main__":
    main()
