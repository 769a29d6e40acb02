#!/usr/bin/python
"""One-off operations on a server, in direct mode."""

from __future__ import annotations

DOCUMENTATION = r"""
module: server_action
short_description: Reboot, rebuild, resize, migrate, shelve, snapshot, rescue, lock or rename a novakit server
description:
  - Runs one operation on an existing server, in direct mode - the API checks and starts it in this
    process, and a background process of its own (C(python -m novakit.worker)) has the server's
    compute host run it and records the result. O(wait) and O(timeout) say whether and how long the
    task waits for that, as for C(openstack.cloud.server).
  - O(action=lock), O(action=unlock) and O(action=rename) are declarative - when already in effect
    they report no change. The other actions always act.
  - "Moves take more than one host or the scheduler: O(action=resize) and O(action=migrate) (cold) end
    in status V(VERIFY_RESIZE) on the new host, answered by O(action=confirm_resize) or
    O(action=revert_resize); O(action=live_migrate) keeps the guest running; O(action=evacuate)
    rebuilds a server whose host is down on another host; O(action=shelve), O(action=shelve_offload)
    and O(action=unshelve) as Nova's; O(action=create_image) snapshots the root disk into a new image.
    These run to their end in the module's own process, whatever O(wait) says."
  - A move that fails on a host is rolled back - the server is where it was, as it was, and the
    action's error and fault are in its audit trail (C(novakit server events)).
  - Migrating and evacuating are admin only.
  - Power states (started, stopped, paused, suspended) and deleting belong to M(novakit.cloud.server)
    O(novakit.cloud.server#module:state); together the two modules offer every action of novakit's
    state table.
  - For many servers across inventory hosts, use the C(novakit.cloud.server_action) playbook.
version_added: 0.1.0
extends_documentation_fragment: [ansible.builtin.action_common_attributes, novakit.cloud.common, novakit.cloud.cloud, novakit.cloud.wait]
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
    choices: [reboot, rebuild, resize, migrate, confirm_resize, revert_resize, live_migrate, evacuate, create_image,
              shelve, shelve_offload, unshelve, rescue, unrescue, lock, unlock, rename]
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
  key_name:
    description:
      - A key pair of the caller (M(novakit.cloud.keypair)) whose public key the rebuilt guest gets,
        for O(action=rebuild); without it a rebuild keeps the key the server had.
    type: str
    version_added: 0.2.0
  flavor:
    description: The new flavor (name or id), for O(action=resize) (required).
    type: str
  host:
    description:
      - The destination host, for O(action=migrate), O(action=live_migrate) and O(action=evacuate).
        Without it the scheduler chooses, as for a boot.
    type: str
  image_name:
    description: The new image's name, for O(action=create_image) (required; unique among images).
    type: str
  image_metadata:
    description: Properties of the new image, for O(action=create_image).
    type: dict
  rescue_image:
    description: The image to boot from (name or id), for O(action=rescue). Default the server's own.
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

- name: Resize to a bigger flavor
  novakit.cloud.server_action:
    server: db
    action: resize
    flavor: m1.large

- name: Keep the new size
  novakit.cloud.server_action:
    server: db
    action: confirm_resize

- name: Move a running server to another host, without a reboot
  novakit.cloud.server_action:
    server: web-2
    action: live_migrate
    host: kvm-03

- name: Snapshot a server into a new image
  novakit.cloud.server_action:
    server: web-1
    action: create_image
    image_name: web-1-before-upgrade
    image_metadata:
      purpose: backup
"""

RETURN = r"""
server:
  description:
    - The server after the operation (with O(wait=false), as the operation started), with the keys
      of RV(novakit.cloud.server#module:server) - the new C(name) after a rename, the new C(host) after
      a move (none once offloaded), the new C(image) after a rebuild; C(status) V(VERIFY_RESIZE) after a
      resize or cold migration until it is confirmed or reverted.
  returned: always
  type: dict
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
  returned: when an operation of one host (a reboot, rebuild, rescue, unrescue) was started on it
  type: str
  sample: /root/.local/state/novakit/workers/req-7c1d...-0b3f....log
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import (  # noqa: E402
    MODULE_ACTIONS,
    WAIT_ARGS,
    NovakitModule,
    desired_result,
)

#: each module option by the state table's name for it; an action takes its own of them
#: (``desired.options_for``)
OPTION_NAMES = {
    "reboot_type": "reboot_type",
    "image": "image",
    "new_name": "name",
    "lock_reason": "reason",
    "metadata": "metadata",
    "user_data": "user_data",
    "admin_password": "admin_password",
    "key_name": "key_name",
    "flavor": "flavor",
    "host": "host",
}
#: actions whose options have the names of other actions' in the state table (a snapshot's
#: ``name`` is not a rename's), so the module gives them options of their own
OWN_OPTION_NAMES = {
    "create_image": {"image_name": "name", "image_metadata": "metadata"},
    "rescue": {"rescue_image": "image"},
}


class ServerActionModule(NovakitModule):
    takes_cloud = True
    argument_spec = {
        "server": {"type": "str", "required": True, "aliases": ["name"]},
        "action": {
            "type": "str",
            "required": True,
            "choices": MODULE_ACTIONS,
        },
        "reboot_type": {"type": "str", "choices": ["soft", "hard"], "default": "soft"},
        "image": {"type": "str"},
        "new_name": {"type": "str"},
        "lock_reason": {"type": "str"},
        "metadata": {"type": "dict"},
        "user_data": {"type": "str", "no_log": True},
        "admin_password": {"type": "str", "no_log": True},
        "key_name": {"type": "str", "no_log": False},
        "flavor": {"type": "str"},
        "host": {"type": "str"},
        "image_name": {"type": "str"},
        "image_metadata": {"type": "dict"},
        "rescue_image": {"type": "str"},
        **WAIT_ARGS,
    }
    module_kwargs = {
        "required_if": [
            ("action", "rebuild", ["image"]),
            ("action", "rename", ["new_name"]),
            ("action", "resize", ["flavor"]),
            ("action", "create_image", ["image_name"]),
        ],
    }

    def run(self):
        from novakit import desired

        p = self.params
        names = OWN_OPTION_NAMES.get(p["action"], OPTION_NAMES)
        options = {table_name: p[option] for option, table_name in names.items()}
        if "user_data" in options:
            options["user_data"] = desired.encode_user_data(options["user_data"])
        return desired_result(self, desired.perform, p["server"], p["action"], options)


def main():
    ServerActionModule()()


if __name__ == "__main__":
    main()
