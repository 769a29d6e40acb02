#!/usr/bin/python
"""A volume attached to a server, declaratively."""

from __future__ import annotations

DOCUMENTATION = r"""
module: volume_attachment
short_description: Attach a novakit volume to a server, or detach it
description:
  - Makes sure a volume is attached to a server (O(state=present)) or is not (O(state=absent)),
    as openstack.cloud's server_volume. Attaching and detaching are instance actions of the
    server (C(attach_volume), C(detach_volume)) with their events in its audit trail.
  - A volume attaches only to a server on its own host, and only when it is available; a server's
    root volume is never detached. Each refusal names the rule and changes nothing.
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - novakit.cloud.common
  - novakit.cloud.cloud
  - novakit.cloud.catalog
options:
  server:
    description: Server name or id.
    type: str
    required: true
  volume:
    description: Volume name or id.
    type: str
    required: true
  device:
    description:
      - The device in the guest (C(vdb) .. C(vdz)); default the next free one.
      - A volume already attached to the server as another device is an error that says so (a device
        does not change while attached).
    type: str
  state:
    description: Whether the volume should be attached to the server (V(absent) detaches it).
"""

EXAMPLES = r"""
- name: The data disk on the database server
  novakit.cloud.volume_attachment:
    server: db-1
    volume: db-data
"""

RETURN = r"""
volume:
  description: The volume afterwards (in check mode, as it is now).
  returned: always
  type: dict
"""

from ansible_collections.novakit.cloud.plugins.module_utils.catalog import STATE_ARG  # noqa: E402
from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


class VolumeAttachmentModule(NovakitModule):
    takes_cloud = True
    argument_spec = {
        "server": {"type": "str", "required": True},
        "volume": {"type": "str", "required": True},
        "device": {"type": "str"},
        "state": STATE_ARG,
    }

    def run(self):
        from novakit.compute import volume_attach

        p = self.params
        attached = p["state"] == "present"
        return self.call(
            volume_attach.ensure,
            p["server"],
            p["volume"],
            p["device"],
            attached=attached,
            dry_run=self.check_mode,
        )


def main():
    VolumeAttachmentModule()()


if __name__ == "__main__":
    main()
