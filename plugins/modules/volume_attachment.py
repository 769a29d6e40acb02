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
extends_documentation_fragment: [ansible.builtin.action_common_attributes, novakit.cloud.common, novakit.cloud.catalog]
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
    description: The device in the guest (C(vdb) .. C(vdz)); default the next free one.
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
    argument_spec = {
        "server": {"type": "str", "required": True},
        "volume": {"type": "str", "required": True},
        "device": {"type": "str"},
        "state": STATE_ARG,
    }

    def run(self):
        from novakit.compute import volume_attach
        from novakit.volume import volumes

        api, ctx, p = self.api(), self.context(), self.params
        server = api.get(ctx, p["server"])
        vol = volumes.show(api.conductor, ctx, p["volume"])
        attached = [a for a in vol["attachments"] if a["server_id"] == server["id"]]
        if p["state"] == "absent":
            if not attached:
                return {"changed": False, "volume": vol}
            vol = volume_attach.detach(api, ctx, server["id"], vol["id"], dry_run=self.check_mode)
            return {"changed": True, "volume": vol}
        if attached:
            if p["device"] and attached[0]["device"].rsplit("/", 1)[-1] != p["device"].rsplit("/", 1)[-1]:
                self.fail(f"volume {p['volume']} is attached to {p['server']} as {attached[0]['device']}")
            return {"changed": False, "volume": vol}
        vol = volume_attach.attach(api, ctx, server["id"], vol["id"], p["device"], dry_run=self.check_mode)
        return {"changed": True, "volume": vol}


def main():
    VolumeAttachmentModule()()


if __name__ == "__main__":
    main()
