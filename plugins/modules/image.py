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
version_added: 0.1.0
author: novakit developers (@novakit)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - novakit.cloud.attributes
  - novakit.cloud.common
attributes:
  diff_mode:
    support: none
options:
  name:
    description: Image name.
    type: str
    required: true
  state:
    description: Whether the image should be registered.
    type: str
    choices: [present, absent]
    default: present
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
      description: Where the file is on the compute hosts.
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
  sample: {id: 9d8bbd3c-5a69-4f4e-b6b4-0d2f3a1c9e11, name: tiny, disk_format: qcow2, location: /var/lib/novakit/images/tiny.qcow2, status: active}
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


class ImageModule(NovakitModule):
    argument_spec = {
        "name": {"type": "str", "required": True},
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "location": {"type": "str", "default": ""},
        "disk_format": {"type": "str", "choices": ["qcow2", "raw", "aki", "ari", "ami"], "default": "qcow2"},
        "checksum": {"type": "str"},
        "properties": {"type": "dict", "default": {}},
    }
    module_kwargs = {"supports_check_mode": True}

    def run(self):
        from novakit.compute import images

        db, ctx, p = self.database(), self.context(), self.params
        existing = next((i for i in images.list_images(db) if i["name"] == p["name"]), None)
        if p["state"] == "absent":
            if existing and not self.check_mode:
                images.delete(db, ctx, p["name"])
            return {"changed": existing is not None}
        props = {k: str(v) for k, v in p["properties"].items()}
        if existing:
            same = (
                existing["location"] == p["location"]
                and existing["disk_format"] == p["disk_format"]
                and existing["checksum"] == p["checksum"]
                and existing["properties"] == props
            )
            if same:
                return {"changed": False, "image": existing}
            self.ansible.fail_json(
                msg=f"image {p['name']} is registered with other values; "
                "register the new file under a new name"
            )
        if self.check_mode:
            return {"changed": True}
        image = images.create(
            db,
            ctx,
            {
                "name": p["name"],
                "location": p["location"],
                "disk_format": p["disk_format"],
                "checksum": p["checksum"],
                "properties": props,
            },
        )
        return {"changed": True, "image": image}


def main():
    ImageModule()()


if __name__ == "__main__":
    main()
