"""What a testbed cloud knows before its first boot: flavors, the tiny image, a config making hosts small.

Every testbed host is this machine, so the libvirt driver reports the machine's whole RAM for each of
them. The config reserves all of it but ``HOST_ROOM_MB`` for the host itself (Nova's
``reserved_host_memory_mb``), so a host has room for a known, small number of guests and "no valid host"
can be reached with a handful of TCG boots.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from novakit.catalog import flavors, images
from novakit.context import RequestContext
from novakit.db.engine import Database
from tests.e2e.testbed.bed import Testbed

#: RAM each testbed host offers to guests, in MB.
HOST_ROOM_MB = 512
#: Fixed ids, so the root image can name its kernel and ramdisk (Glance's kernel_id/ramdisk_id).
KERNEL_ID = "6b1e3f0a-6f6e-4b8a-9a1d-0c0c0c0c0001"
RAMDISK_ID = "6b1e3f0a-6f6e-4b8a-9a1d-0c0c0c0c0002"
IMAGE_ID = "6b1e3f0a-6f6e-4b8a-9a1d-0c0c0c0c0003"
#: name -> (vcpus, memory_mb): tb.small fits 4 to a host, tb.large 1.
FLAVORS = {"tb.small": (1, 128), "tb.large": (1, 384)}


def host_memory_mb(bed: Testbed) -> int:
    """The RAM the libvirt driver reports for every testbed host (virNodeGetInfo, in MiB).

    Asked of a host's daemon rather than read from /proc/meminfo: libvirt may count only some NUMA
    nodes' memory, and the driver reports what libvirt says.
    """
    host = bed.hosts()[0]
    for line in bed.virsh(host, "nodeinfo").stdout.splitlines():
        if line.startswith("Memory size:"):
            return int(line.split()[2]) // 1024
    raise RuntimeError(f"virsh nodeinfo on {host.name} shows no memory size")


def config_toml(memory_mb: int, extra: str = "") -> str:
    """The config of a testbed cloud: each host keeps all but HOST_ROOM_MB of ``memory_mb`` for itself."""
    reserved = memory_mb - HOST_ROOM_MB
    # Whoever runs the testbed is its operator (README, "Trust model"): the admin.
    identity = '[identity]\nproject = "admin"\nuser = "admin"\nroles = ["admin"]\n'
    return f"{identity}[placement]\nreserved_host_memory_mb = {reserved}\n{extra}"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def register(db: Database, image_store: Path) -> None:
    """Create the flavors and the tiny image (with its kernel and ramdisk); existing ones are kept."""
    admin = RequestContext.admin()
    have_flavors = {f["name"] for f in flavors.list_flavors(db)}
    for name, (vcpus, ram) in FLAVORS.items():
        if name not in have_flavors:
            flavors.create(db, admin, {"name": name, "vcpus": vcpus, "memory_mb": ram, "root_gb": 0})
    have_images = {i["name"] for i in images.list_images(db)}
    wanted: list[dict[str, Any]] = [
        {
            "uuid": KERNEL_ID,
            "name": "tiny-kernel",
            "disk_format": "aki",
            "container_format": "aki",
            "location": str(image_store / "vmlinuz"),
            "checksum": _sha256(image_store / "vmlinuz"),
        },
        {
            "uuid": RAMDISK_ID,
            "name": "tiny-ramdisk",
            "disk_format": "ari",
            "container_format": "ari",
            "location": str(image_store / "initrd.img"),
            "checksum": _sha256(image_store / "initrd.img"),
        },
        {
            "uuid": IMAGE_ID,
            "name": "tiny",
            "disk_format": "qcow2",
            "location": str(image_store / "root.qcow2"),
            "checksum": _sha256(image_store / "root.qcow2"),
            "properties": {
                "kernel_id": KERNEL_ID,
                "ramdisk_id": RAMDISK_ID,
                "os_command_line": (image_store / "cmdline").read_text().strip(),
            },
        },
    ]
    for data in wanted:
        if data["name"] not in have_images:
            images.create(db, admin, data)
