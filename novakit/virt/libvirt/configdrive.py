"""The config drive: a NoCloud ISO (volume label ``cidata``) that cloud-init reads at boot.

Built in Python with pycdlib, so a compute host needs neither genisoimage nor
xorriso. Rock Ridge and Joliet names are written next to the ISO 9660 8.3
names so that ``meta-data`` keeps its real name on every reader (Linux uses
Rock Ridge, Windows Joliet).

User data arrives base64-encoded from the API and goes into the ISO as it was
given: it is decoded here and never logged, and its bytes never appear in an
exception message.

The admin password. Nova writes ``admin_pass`` in clear into the OpenStack
format's ``meta_data.json``; cloud-init's NoCloud source reads no password from
``meta-data``, and novakit never has the clear text past the API. What the
guest gets is the SHA-512 crypt hash, as cloud-config in ``user-data``: the
hashed password of root in ``chpasswd.users``, merged into the user's
``#cloud-config`` when there is one, else in a MIME multi-part archive next to
the user's data, which stays as it was (``novakit.virt.userdata`` says how for
each format). Root, because Nova's guest agents set the admin (root) password
too. Needs cloud-init 22.2 or later in the guest.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pycdlib

from novakit import exceptions
from novakit.compute.messages import InstanceSpec
from novakit.virt.userdata import with_admin_password

VOLUME_LABEL = "cidata"

_PLAIN_YAML = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


def guest_mac(instance_uuid: str, index: int) -> str:
    """A stable MAC for NIC ``index`` in QEMU's locally administered range 52:54:00."""
    digest = hashlib.sha256(f"{instance_uuid}/nic{index}".encode()).digest()
    return "52:54:00:{:02x}:{:02x}:{:02x}".format(*digest[:3])


def _yaml_scalar(value: str) -> str:
    # A JSON string is a valid YAML double-quoted scalar; plain values stay
    # plain so the tiny guest's sed parser (and people) can read them.
    return value if _PLAIN_YAML.match(value) else json.dumps(value)


@dataclass
class ConfigDrive:
    """The files of one instance's config drive."""

    instance_id: str
    local_hostname: str
    user_data: bytes | None = field(default=None, repr=False)
    macs: list[str] = field(default_factory=list)
    admin_password_hash: str | None = field(default=None, repr=False)

    @classmethod
    def from_instance(cls, instance: InstanceSpec, macs: list[str]) -> ConfigDrive:
        user_data = None
        if instance.user_data is not None:
            try:
                user_data = base64.b64decode(instance.user_data.get_secret_value(), validate=True)
            except (binascii.Error, ValueError):
                # No detail from the decoder: it could quote the secret.
                raise exceptions.BuildAbortError(
                    instance_uuid=instance.uuid, reason="user_data is not valid base64"
                ) from None
        password_hash = instance.admin_password_hash
        return cls(
            instance_id=instance.uuid,
            local_hostname=instance.hostname,
            user_data=user_data,
            macs=macs,
            admin_password_hash=password_hash.get_secret_value() if password_hash is not None else None,
        )

    def user_data_file(self) -> bytes:
        """``user-data``: the user's data, with the admin password merged in if there is one."""
        if self.admin_password_hash is not None:
            return with_admin_password(self.user_data, self.admin_password_hash)
        return self.user_data if self.user_data is not None else b""

    def meta_data(self) -> bytes:
        lines = [
            f"instance-id: {_yaml_scalar(self.instance_id)}",
            f"local-hostname: {_yaml_scalar(self.local_hostname)}",
        ]
        return ("\n".join(lines) + "\n").encode()

    def network_config(self) -> bytes:
        """Network config version 1: DHCP on every NIC, matched by MAC."""
        config = {
            "version": 1,
            "config": [
                {
                    "type": "physical",
                    "name": f"eth{i}",
                    "mac_address": mac,
                    "subnets": [{"type": "dhcp"}],
                }
                for i, mac in enumerate(self.macs)
            ],
        }
        # JSON is YAML, and json.dumps cannot produce anything a YAML parser misreads.
        return (json.dumps(config, indent=2) + "\n").encode()

    def files(self) -> dict[str, bytes]:
        return {
            "meta-data": self.meta_data(),
            "user-data": self.user_data_file(),
            "network-config": self.network_config(),
        }

    def write_iso(self, dest: Path) -> None:
        """Write the ISO to ``dest`` (created with mode 0600: it holds user data)."""
        iso = pycdlib.PyCdlib()
        iso.new(interchange_level=3, vol_ident=VOLUME_LABEL, joliet=3, rock_ridge="1.09")
        try:
            for name, data in self.files().items():
                short = re.sub(r"[^A-Z0-9_]", "_", name.upper())[:8]
                iso.add_fp(
                    io.BytesIO(data),
                    len(data),
                    iso_path=f"/{short}.;1",
                    rr_name=name,
                    joliet_path=f"/{name}",
                )
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                iso.write_fp(out)
        finally:
            iso.close()
