"""Disk image files: format checks and the per-instance disks made from them.

Image files come from users, so novakit never lets QEMU guess their format:
probing would let a "raw" image that happens to start with a qcow2 header
point QEMU at any file on the host through a backing file (CVE-2008-2004 and
the later qemu-img probing issues). Instead:

* the format is read from the file's magic bytes here, and must equal the
  format the image declares (``ImageSpec.disk_format``);
* ``qemu-img`` always gets that format with ``-f``/``-F``, and runs under
  memory and CPU limits (``prlimit``), as Nova does, because a crafted image
  header can make it allocate or loop a lot;
* an image that names a backing file or an external data file of its own is
  refused: only novakit's own overlays have backing files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from novakit import exceptions

#: formats novakit boots from. Glance's kernel/ramdisk/machine types are raw files.
SUPPORTED_DISK_FORMATS = ("raw", "qcow2")
RAW_ALIASES = {"raw": "raw", "aki": "raw", "ari": "raw", "ami": "raw"}

# Magic bytes at offset 0 of formats QEMU would otherwise detect on its own.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"QFI\xfb", "qcow2"),
    (b"QFI\xfe", "qed"),
    (b"KDMV", "vmdk"),
    (b"# Disk DescriptorFile", "vmdk"),
    (b"COWD", "vmdk"),
    (b"<<< ", "vdi"),
    (b"vhdxfile", "vhdx"),
    (b"conectix", "vpc"),
    (b"LUKS\xba\xbe", "luks"),
    (b"WithoutFreeSpace", "parallels"),
    (b"WithouFreSpacExt", "parallels"),
    (b"cloop", "cloop"),
    (b"bochs", "bochs"),
    (b"QEVM", "qemu-savevm"),
)

# Nova's QEMU_IMG_LIMITS: 1 GiB of address space, 30 s of CPU.
_QEMU_IMG_AS = 1 << 30
_QEMU_IMG_CPU = 30


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format a file's header says it has ("raw" when nothing matches)."""
    with open(path, "rb") as f:
        head = f.read(512)
    for magic, fmt in _MAGIC:
        if head.startswith(magic):
            return fmt
    # VHD keeps its footer at the end; a fixed VHD is otherwise raw-looking.
    size = os.path.getsize(path)
    if size >= 512:
        with open(path, "rb") as f:
            f.seek(size - 512)
            if f.read(8) == b"conectix":
                return "vpc"
    return "raw"


def declared_format(image_id: str, disk_format: str) -> str:
    """The qemu format name for a declared disk_format, or InvalidImage if unsupported."""
    fmt = RAW_ALIASES.get(disk_format, disk_format)
    if fmt not in SUPPORTED_DISK_FORMATS:
        raise exceptions.InvalidImage(
            image_id=image_id,
            reason=(
                f"disk_format {disk_format!r} is not supported; use one of "
                f"{', '.join(SUPPORTED_DISK_FORMATS)} (kernel/ramdisk images: aki, ari)"
            ),
        )
    return fmt


def _qemu_img(*args: str, limited: bool = True) -> subprocess.CompletedProcess[str]:
    """qemu-img under Nova's limits, which guard the reading of an image's header. ``limited``
    False: a copy of a whole disk (convert), run without them as Nova runs its convert: it may
    take longer than 30 s, and the stacks of its I/O threads alone can pass 1 GiB of address
    space under load (``qemu_thread_create: Resource temporarily unavailable``, seen)."""
    cmd = ["qemu-img", *args]
    if limited and shutil.which("prlimit"):
        cmd = ["prlimit", f"--as={_QEMU_IMG_AS}", f"--cpu={_QEMU_IMG_CPU}", "--", *cmd]
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, env=_c_locale())
    except FileNotFoundError:
        raise exceptions.MissingDependency(
            feature="the libvirt driver's image handling",
            package="qemu-utils (qemu-img)",
            hint="apt-get install qemu-utils",
        ) from None
    except subprocess.CalledProcessError as exc:
        raise exceptions.ComputeError(
            reason=f"qemu-img {args[0]} failed: {exc.stderr.strip() or exc.returncode}"
        ) from None


def _c_locale() -> dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    return env


def qemu_img_info(path: str | os.PathLike[str], fmt: str) -> dict[str, Any]:
    """``qemu-img info`` with the format given, so qemu-img never probes."""
    out = _qemu_img("info", "--output=json", "-f", fmt, os.fspath(path)).stdout
    info: dict[str, Any] = json.loads(out)
    return info


@dataclass(frozen=True)
class InspectedImage:
    format: str
    virtual_size: int


def inspect_image(image_id: str, path: str | os.PathLike[str], disk_format: str) -> InspectedImage:
    """Check an image file against its declared format; refuse anything that points elsewhere."""
    fmt = declared_format(image_id, disk_format)
    detected = detect_format(path)
    if detected != fmt:
        raise exceptions.InvalidImage(
            image_id=image_id,
            reason=f"declared disk_format {disk_format!r} but the file is {detected}",
        )
    info = qemu_img_info(path, fmt)
    if info.get("backing-filename") or info.get("full-backing-filename"):
        raise exceptions.InvalidImage(
            image_id=image_id, reason="the image names a backing file; only standalone images are accepted"
        )
    specific = (info.get("format-specific") or {}).get("data") or {}
    if specific.get("data-file"):
        raise exceptions.InvalidImage(
            image_id=image_id,
            reason="the image names an external data file; only standalone images are accepted",
        )
    return InspectedImage(format=fmt, virtual_size=int(info.get("virtual-size", 0)))


# --- per-instance disks -------------------------------------------------------


def create_overlay(base: str | os.PathLike[str], base_format: str, dest: Path, size_bytes: int) -> None:
    """A qcow2 copy-on-write disk on top of a cached image, at least ``size_bytes`` large."""
    _qemu_img(
        "create",
        "-q",
        "-f",
        "qcow2",
        "-F",
        base_format,
        "-b",
        os.fspath(base),
        os.fspath(dest),
        str(size_bytes),
    )


def create_blank_qcow2(dest: Path, size_bytes: int) -> None:
    """An empty disk (the flavor's ephemeral disk); the guest formats it, as cloud-init does."""
    _qemu_img("create", "-q", "-f", "qcow2", os.fspath(dest), str(size_bytes))


def create_swap(dest: Path, size_mb: int) -> None:
    """A raw sparse swap disk with a Linux swap signature, so the guest can swapon at once.

    Written here rather than with mkswap, so a compute host needs no
    util-linux tools and the file stays sparse. The layout is mkswap's
    version-1 header: info at byte 1024 of the first page, "SWAPSPACE2" at
    the end of it.
    """
    header = swap_header(size_mb)
    size = size_mb * 1024 * 1024
    with open(dest, "wb") as f:
        f.write(header)
        f.truncate(size)


def swap_header(size_mb: int) -> bytes:
    """The first page of a swap disk of ``size_mb`` MiB (the rest is zeros)."""
    page = 4096
    size = size_mb * 1024 * 1024
    pages = size // page
    if pages < 10:
        raise exceptions.ComputeError(reason=f"swap of {size_mb} MiB is too small to use")
    header = bytearray(page)
    header[1024:1028] = (1).to_bytes(4, "little")  # version
    header[1028:1032] = (pages - 1).to_bytes(4, "little")  # last usable page
    header[1032:1036] = (0).to_bytes(4, "little")  # bad pages
    header[1036:1052] = uuidlib.uuid4().bytes
    header[1052:1068] = b"novakit-swap".ljust(16, b"\0")
    header[page - 10 : page] = b"SWAPSPACE2"
    return bytes(header)


# --- an instance's own disks, moved or copied (snapshot, migration) -------------------------


def inspect_overlay(path: str | os.PathLike[str]) -> int:
    """The virtual size of a qcow2 root or ephemeral disk of novakit's that came over the wire.

    Its backing file (if any) is set again by the receiver (``rebase_unsafe``); its header must
    be qcow2 and name no external data file, so that it cannot point QEMU at another file.
    """
    detected = detect_format(path)
    if detected != "qcow2":
        raise exceptions.ComputeError(
            reason=f"the disk {os.fspath(path)} handed over is {detected}, not qcow2"
        )
    info = qemu_img_info(path, "qcow2")
    if ((info.get("format-specific") or {}).get("data") or {}).get("data-file"):
        raise exceptions.ComputeError(reason=f"the disk {os.fspath(path)} handed over names a data file")
    return int(info.get("virtual-size", 0))


def rebase_unsafe(path: str | os.PathLike[str], backing: str | os.PathLike[str], backing_format: str) -> None:
    """Point a qcow2 overlay at ``backing`` (the same image's copy on this host) without reading
    either: the contents are the same image, only its path differs from host to host."""
    _qemu_img(
        "rebase", "-q", "-u", "-f", "qcow2", "-F", backing_format, "-b", os.fspath(backing), os.fspath(path)
    )


def grow(path: str | os.PathLike[str], fmt: str, size_bytes: int) -> None:
    """Make a disk ``size_bytes`` large if it is smaller (a resize to a larger flavor); never shrinks."""
    if int(qemu_img_info(path, fmt).get("virtual-size", 0)) < size_bytes:
        _qemu_img("resize", "-q", "-f", fmt, os.fspath(path), str(size_bytes))


def convert_to_qcow2(src: str | os.PathLike[str], src_format: str, dest: str | os.PathLike[str]) -> None:
    """A standalone qcow2 copy of ``src`` with its backing chain flattened in (a snapshot image)."""
    _qemu_img(
        "convert", "-q", "-f", src_format, "-O", "qcow2", os.fspath(src), os.fspath(dest), limited=False
    )
