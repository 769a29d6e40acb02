#!/usr/bin/python
"""Images, declaratively."""

from __future__ import annotations

DOCUMENTATION = r"""
module: image
short_description: Register or remove a novakit image
description:
  - Records an image (its location on the compute hosts, format, sha256 checksum and properties)
    so that servers can boot from it. The bytes stay where they are; each compute host copies them
    into its image cache on first use and checks the checksum.
  - The image of O(name) is the one the caller sees and may change (its project's; an admin's, any). An image of that
    name the caller sees but may not change (another project's public image) fails the task, saying so; one it does
    not see (another project's private image) is not in the way.
  - Deleting an image also removes what the image store holds of it (an image uploaded through the Image API).
version_added: 0.1.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - novakit.cloud.common
  - novakit.cloud.cloud
  - novakit.cloud.catalog
  - novakit.cloud.catalog.name
options:
  location:
    description: Path or C(file://) URL of the image file on the compute hosts.
    type: str
    default: ""
  disk_format:
    description: Disk format; checked against the file on the host.
    type: str
    choices: [qcow2, raw, aki, ari, ami]
    default: qcow2
  checksum:
    description: sha256 of the file.
    type: str
  properties:
    description: Image properties (C(architecture), C(hypervisor_type), C(kernel_id), C(ramdisk_id), C(os_command_line), C(hw_*)).
    type: dict
    default: {}
  visibility:
    description:
      - Who sees and boots the image (Glance's visibility). C(public) every project; C(private) its owner
        project only; C(shared) its owner and the projects it is shared with that accepted; C(community)
        any project that names it (listed only on request).
      - Unset, a new image is C(public) and an existing one keeps its visibility. Changing it is done in place;
        making an image C(public) takes the admin role.
    type: str
    choices: [public, private, shared, community]
"""

EXAMPLES = r"""
- name: The tiny test image
  novakit.cloud.image:
    name: tiny
    location: /var/lib/novakit/images/tiny.qcow2
    checksum: "{{ lookup('file', 'tiny.qcow2.sha256') }}"
"""

RETURN = r"""
image:
  description: The image, when it exists (not in check mode for a new one).
  returned: when state is present
  type: dict
  contains:
    id:
      description: The image's uuid.
      type: str
    name:
      description: Its name.
      type: str
    disk_format:
      description: Its disk format.
      type: str
    container_format:
      description: Its container format.
      type: str
    checksum:
      description: sha256 of the file.
      type: str
    size:
      description: Size of the file in bytes, when known.
      type: int
    location:
      description: Where the file is on the compute hosts (for a caller who may see hosts, an admin, only).
      type: str
    min_disk:
      description: Smallest root disk (GB) a flavor needs to boot it.
      type: int
    min_ram:
      description: Smallest RAM (MB) a flavor needs to boot it.
      type: int
    properties:
      description: Its properties.
      type: dict
    status:
      description: C(active) once registered.
      type: str
    visibility:
      description: C(public), C(private), C(shared) or C(community).
      type: str
    owner:
      description: The project that owns it.
      type: str
  sample: {id: 9d8bbd3c-5a69-4f4e-b6b4-0d2f3a1c9e11, name: tiny, disk_format: qcow2, location: /var/lib/novakit/images/tiny.qcow2, status: active}
"""

from ansible_collections.novakit.cloud.plugins.module_utils.catalog import CatalogModule, lookup  # noqa: E402


class ImageModule(CatalogModule):
    takes_cloud = True
    resource = "image"
    unset_is_wanted = True
    cannot_change = "register the new file under a new name"
    argument_spec = {
        "location": {"type": "str", "default": ""},
        "disk_format": {"type": "str", "choices": ["qcow2", "raw", "aki", "ari", "ami"], "default": "qcow2"},
        "checksum": {"type": "str"},
        "properties": {"type": "dict", "default": {}},
        "visibility": {"type": "str", "choices": ["public", "private", "shared", "community"]},
    }

    def library(self):
        from novakit.catalog import images

        return images

    def find(self):
        # The image of that name the caller may change; one it sees but may not (another project's
        # public image) is refused, one it may not see is none: create checks names in that scope.
        return lookup(self.call, self.library().show_owned, self.params["name"])

    def wanted(self):
        p = self.params
        props = {k: str(v) for k, v in p["properties"].items()}
        return {
            "location": p["location"],
            "disk_format": p["disk_format"],
            "checksum": p["checksum"],
            "properties": props,
            **({"visibility": p["visibility"]} if p["visibility"] else {}),
        }

    def update(self, current, changes, dry_run):
        if set(changes) != {"visibility"}:  # only who sees it changes in place
            return super().update(current, changes, dry_run)
        return self.call(
            self.library().set_visibility, current["id"], self.params["visibility"], dry_run=dry_run
        )

    def delete(self, current, dry_run):
        # The image and what the image store holds of it, as the Image API deletes one.
        self.call(self.library().remove, current["id"], dry_run=dry_run)


def main():
    ImageModule()()


if __name__ == "__main__":
    main()
