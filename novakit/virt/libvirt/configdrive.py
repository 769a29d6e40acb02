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

The key pair (Nova's ``key_name``/``key_data``): its public key is in ``meta_data.json`` as
Nova's config drive has it (``public_keys`` by name, and ``keys``), in ``meta-data`` as
NoCloud's ``public-keys``, and in ``user-data`` as cloud-config's ``ssh_authorized_keys``
merged with the user's data (``novakit.virt.userdata``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import ipaddress
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pycdlib

from novakit import exceptions
from novakit.host.messages import FixedIp, InstanceSpec
from novakit.virt.userdata import with_additions

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
    # Per NIC (same order as ``macs``): the port's fixed IPs; an empty list keeps DHCP.
    fixed_ips: list[list[FixedIp]] = field(default_factory=list)
    # The instance's metadata (key -> value), for ``meta_data.json`` as Nova's config drive has it.
    metadata: dict[str, str] = field(default_factory=dict)
    # The server's key pair: its name and OpenSSH public key (None: booted without one).
    key_name: str | None = None
    key_data: str | None = None

    @classmethod
    def from_instance(cls, instance: InstanceSpec, macs: list[str]) -> ConfigDrive:
        """The drive of ``instance`` whose NICs have ``macs``, in the order of ``instance.networks``.

        NICs beyond the instance's own networks (the host's default networks) have no port,
        so no fixed IPs: they keep DHCP.
        """
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
            fixed_ips=[
                list(instance.networks[i].fixed_ips) if i < len(instance.networks) else []
                for i in range(len(macs))
            ],
            metadata=dict(instance.metadata),
            key_name=instance.key_name if instance.key_data else None,
            key_data=instance.key_data or None,
        )

    def user_data_file(self) -> bytes:
        """``user-data``: the user's data, with the admin password and the key merged in."""
        return with_additions(
            self.user_data,
            password_hash=self.admin_password_hash,
            authorized_keys=[self.key_data] if self.key_data else None,
        )

    def meta_data(self) -> bytes:
        lines = [
            f"instance-id: {_yaml_scalar(self.instance_id)}",
            f"local-hostname: {_yaml_scalar(self.local_hostname)}",
        ]
        if self.key_data:
            # NoCloud's public-keys (cloud-init reads a list); JSON strings are YAML scalars.
            lines.append(f"public-keys: [{json.dumps(self.key_data)}]")
        return ("\n".join(lines) + "\n").encode()

    def network_config(self) -> bytes:
        """Network config version 2, each NIC matched by MAC and named eth0, eth1, ...

        A NIC whose port has fixed IPs gets them statically (Neutron's addresses, known
        before the guest boots), with its subnet's DNS servers; the first such NIC with a
        gateway carries the default route, one per address family, as a guest has one
        default route. A NIC without fixed IPs keeps DHCP.

        The tiny test guest reads this file with awk (``tests/images/tiny-init.sh``): it
        relies on json.dumps with indent putting each address, ``macaddress`` and ``via``
        on a line of its own.
        """
        ethernets: dict[str, dict[str, object]] = {}
        routed: set[int] = set()
        for i, mac in enumerate(self.macs):
            nic: dict[str, object] = {"match": {"macaddress": mac}, "set-name": f"eth{i}"}
            ips = self.fixed_ips[i] if i < len(self.fixed_ips) else []
            if not ips:
                nic["dhcp4"] = True
                ethernets[f"eth{i}"] = nic
                continue
            addresses: list[str] = []
            routes: list[dict[str, str]] = []
            nameservers: list[str] = []
            for fixed in ips:
                try:
                    network = ipaddress.ip_network(fixed.cidr, strict=False)
                    address = ipaddress.ip_address(fixed.address)
                    gateway = ipaddress.ip_address(fixed.gateway) if fixed.gateway else None
                    dns = [str(ipaddress.ip_address(ns)) for ns in fixed.dns_nameservers]
                except ValueError as exc:
                    raise exceptions.BuildAbortError(
                        instance_uuid=self.instance_id,
                        reason=f"networks[{i}].fixed_ips: {exc} (the controller sent a bad address)",
                    ) from None
                addresses.append(f"{address}/{network.prefixlen}")
                if gateway is not None and network.version not in routed:
                    routed.add(network.version)
                    default = "0.0.0.0/0" if network.version == 4 else "::/0"
                    routes.append({"to": default, "via": str(gateway)})
                nameservers.extend(ns for ns in dns if ns not in nameservers)
            nic["addresses"] = addresses
            if routes:
                nic["routes"] = routes
            if nameservers:
                nic["nameservers"] = {"addresses": nameservers}
            ethernets[f"eth{i}"] = nic
        config = {"version": 2, "ethernets": ethernets}
        # JSON is YAML, and json.dumps cannot produce anything a YAML parser misreads.
        return (json.dumps(config, indent=2) + "\n").encode()

    def meta_data_json(self) -> bytes:
        """``meta_data.json``: the instance's metadata under ``meta`` and its key pair under
        ``public_keys`` and ``keys``, as Nova's config drive has them.

        cloud-init's NoCloud source does not read it; it is how an image's own tools (and
        the tiny test guest) learn the metadata a user gave the server.
        """
        data: dict[str, object] = {
            "uuid": self.instance_id,
            "hostname": self.local_hostname,
            "meta": self.metadata,
        }
        if self.key_data:
            # Nova's: the key by its name, and the same as a list of keys with their type.
            name = self.key_name or "default"
            data["public_keys"] = {name: self.key_data}
            data["keys"] = [{"name": name, "type": "ssh", "data": self.key_data}]
        return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()

    def files(self) -> dict[str, bytes]:
        return {
            "meta-data": self.meta_data(),
            "user-data": self.user_data_file(),
            "network-config": self.network_config(),
            "meta_data.json": self.meta_data_json(),
        }

    def write_iso(self, dest: Path) -> None:
        """Write the ISO to ``dest`` (created with mode 0600: it holds user data)."""
        iso = pycdlib.PyCdlib()
        iso.new(interchange_level=3, vol_ident=VOLUME_LABEL, joliet=3, rock_ridge="1.09")
        try:
            shorts: set[str] = set()
            for name, data in self.files().items():
                short = re.sub(r"[^A-Z0-9_]", "_", name.upper())[:8]
                if short in shorts:
                    # meta-data and meta_data.json share their first 8 characters.
                    short = f"{short[:6]}_{len(shorts)}"
                shorts.add(short)
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
