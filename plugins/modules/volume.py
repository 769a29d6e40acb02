#!/usr/bin/python
"""Volumes, declaratively."""

from __future__ import annotations

DOCUMENTATION = r"""
module: volume
short_description: Create or delete a novakit volume
description:
  - Makes sure a volume (a disk in one compute host's storage pool, Cinder-shaped) exists in the
    caller's project (O(state=present)) or does not (O(state=absent)).
  - A new volume's size is claimed on its host's disk (DISK_GB) and counted against the
    C(volumes) and C(gigabytes) quotas; a size beyond the host's free space is refused, nothing made.
  - A volume's size, image and host do not change once it exists; other values for an existing
    name are an error that says so. An attached volume is not deleted (detach it first with
    M(novakit.cloud.volume_attachment)).
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - novakit.cloud.common
  - novakit.cloud.cloud
  - novakit.cloud.catalog
  - novakit.cloud.catalog.name
options:
  name:
    description: Volume name, unique among the project's live volumes (or the volume's uuid).
  size:
    description: Size in GiB (at least 1); required to create the volume.
    type: int
  image:
    description: Make a bootable volume from this image (name or id); O(size) must hold it.
    type: str
  host:
    description:
      - The compute host whose pool holds it; default the up, enabled host with most free disk.
      - An existing volume's host is compared with it only for a caller who may see hosts (an admin); to
        anyone else a volume shows no host.
    type: str
  description:
    description: Free text shown with the volume.
    type: str
"""

EXAMPLES = r"""
- name: A data disk next to the database server
  novakit.cloud.volume:
    name: db-data
    size: 20
    host: compute-1
"""

RETURN = r"""
volume:
  description: The volume, when it exists (in check mode, what would be created).
  returned: when state is present
  type: dict
  contains:
    id: {description: Its uuid (absent in check mode for a new volume)., type: str}
    name: {description: Its name., type: str}
    size: {description: Its size in GiB., type: int}
    status: {description: "available, in-use, error (with status_reason), ...", type: str}
    host: {description: "The host whose pool holds it (null unless the caller may see hosts: an admin).", type: str}
    attachments:
      description: The servers it is attached to, with their devices.
      type: list
      elements: dict
"""

from ansible_collections.novakit.cloud.plugins.module_utils.catalog import CatalogModule, lookup  # noqa: E402


class VolumeModule(CatalogModule):
    resource = "volume"
    takes_cloud = True
    cannot_change = "a volume's size and host do not change here: delete it or use another name"
    plan_in_result = True
    argument_spec = {
        "size": {"type": "int"},
        "image": {"type": "str"},
        "host": {"type": "str"},
        "description": {"type": "str"},
    }
    module_kwargs = {"required_if": [("state", "present", ["size"])]}

    def find(self):
        from novakit.volume import volumes

        return lookup(self.call, volumes.show, self.params["name"])

    def wanted(self):
        return {"size": self.params["size"], "host": self.params["host"]}  # no host: any host will do

    def compare(self, current, wanted):
        # A volume shows its host only to a caller who may see hosts: to anyone else there is none to compare.
        if current.get("host") is None:
            wanted = {k: v for k, v in wanted.items() if k != "host"}
        return super().compare(current, wanted)

    def create(self, dry_run):
        from novakit.volume import volumes

        p = self.params
        made = self.call(
            volumes.create,
            p["name"],
            p["size"],
            image=p["image"],
            host=p["host"],
            description=p["description"],
            dry_run=dry_run,
        )
        if made["status"] == "error":
            self.fail(f"volume {p['name']} ended in error: {made['status_reason']}", volume=made)
        return made

    def delete(self, current, dry_run):
        from novakit.volume import volumes

        gone = self.call(volumes.delete, current["id"], dry_run=dry_run)
        if gone["status"] != "deleted":
            self.fail(f"volume {self.params['name']} not deleted: {gone['status']}: {gone['status_reason']}")


def main():
    VolumeModule()()


if __name__ == "__main__":
    main()
