"""An instance's own disks and console log: files in its directory, or volumes in the remote pool.

spawn makes them through one of two makers with the same methods, each returning the path the
daemon will see, so the domain definition (``guestconfig``) is the same in both modes:

* ``LocalDisks``: files in ``<instances_path>/<uuid>`` (local or shared storage);
* ``RemoteDisks``: volumes ``<uuid>.<file name>`` in the pool of a remote daemon
  (``storage.RemoteStorage``).

The file names below are the instance's whole footprint: destroy removes the directory, or every
volume named ``<uuid>.*``. Volumes (``volumes.VolumePool``) are not an instance's own disks:
they outlive it. Besides the disks, a few small files live there too: the definition a rescue or
a move will bring back (``UNRESCUE_XML``, ``RESIZE_SOURCE_XML``), read and written through the
same maker, so that every operation works alike on both kinds of host.

A move or a snapshot reads disks out (``copy_out``) and puts received ones in (``place``); which
of them exist is ``existing``, by file name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid as uuidlib
from pathlib import Path
from typing import Protocol

from novakit import files
from novakit.virt.libvirt import images
from novakit.virt.libvirt.configdrive import ConfigDrive
from novakit.virt.libvirt.imagecache import CachedImage
from novakit.virt.libvirt.storage import (
    CONSOLE_HEADER,
    RemoteStorage,
    StorageVolumeConfig,
    instance_volume_name,
)

# The file names of an instance's disks: in its directory, or after "<uuid>." in the remote pool.
ROOT_DISK, EPHEMERAL_DISK, SWAP_DISK, CONFIG_DRIVE = "disk", "disk.eph0", "disk.swap", "disk.config"
CONSOLE_LOG = "console.log"
#: the rescue image's overlay, and the definition ``unrescue`` restores (Nova's names)
RESCUE_DISK, UNRESCUE_XML = "disk.rescue", "unrescue.xml"
#: a moved guest's definition, kept on its source until the move is confirmed or reverted
RESIZE_SOURCE_XML = "resize-source.xml"
INSTANCE_FILES = (
    ROOT_DISK,
    EPHEMERAL_DISK,
    SWAP_DISK,
    CONFIG_DRIVE,
    CONSOLE_LOG,
    RESCUE_DISK,
    UNRESCUE_XML,
    RESIZE_SOURCE_XML,
)
#: get_console_output returns at most this much of the end of the log (Nova's limit)
MAX_CONSOLE_BYTES = 100 * 1024


def valid_uuid(value: str) -> str | None:
    """The canonical form of a uuid, or None: it becomes a path, so nothing else may pass."""
    try:
        return str(uuidlib.UUID(value))
    except (ValueError, TypeError, AttributeError):
        return None


class LocalDisks:
    """An instance's disks as files in its directory (local or shared storage)."""

    def __init__(self, inst_dir: Path) -> None:
        self.inst_dir = inst_dir

    def image_path(self, cached: CachedImage) -> str:
        return str(cached.path)

    def overlay(self, base: CachedImage, size: int, file_name: str = ROOT_DISK) -> str:
        path = self.inst_dir / file_name
        images.create_overlay(base.path, base.format, path, size)
        return str(path)

    def blank_qcow2(self, size: int) -> str:
        path = self.inst_dir / EPHEMERAL_DISK
        images.create_blank_qcow2(path, size)
        return str(path)

    def swap(self, size_mb: int) -> str:
        path = self.inst_dir / SWAP_DISK
        images.create_swap(path, size_mb)
        return str(path)

    def config_drive(self, drive: ConfigDrive) -> str:
        path = self.inst_dir / CONFIG_DRIVE
        drive.write_iso(path)
        return str(path)

    def console_log(self, carried: bytes = b"") -> str:
        """The log's path; ``carried``: what a moved guest printed before, which the log goes on from."""
        path = self.inst_dir / CONSOLE_LOG
        if carried:  # else virtlogd makes the file when the guest starts
            with files.open_private(path, "wb") as f:
                f.write(carried)
        return str(path)

    def place(self, src: Path, file_name: str, fmt: str) -> str:
        """Make ``src`` (a disk received or converted here) the instance's ``file_name``."""
        dest = self.inst_dir / file_name
        shutil.move(src, dest)
        return str(dest)

    def copy_out(self, file_name: str, dest: Path) -> None:
        """Copy the instance's ``file_name`` to the local file ``dest``."""
        shutil.copyfile(self.inst_dir / file_name, dest)

    def existing(self, file_names: tuple[str, ...]) -> dict[str, str]:
        """file name -> the name it has in the instance's pool (``handover``), for those that exist."""
        return {name: name for name in file_names if (self.inst_dir / name).is_file()}

    def write_file(self, file_name: str, data: bytes) -> None:
        with files.open_private(self.inst_dir / file_name, "wb") as f:
            f.write(data)

    def read_file(self, file_name: str) -> bytes | None:
        try:
            return (self.inst_dir / file_name).read_bytes()
        except FileNotFoundError:
            return None

    def remove_file(self, file_name: str) -> None:
        (self.inst_dir / file_name).unlink(missing_ok=True)

    def console_tail(self, max_bytes: int = MAX_CONSOLE_BYTES) -> bytes:
        """The end of the console log; b"" before the guest wrote any."""
        try:
            with open(self.inst_dir / CONSOLE_LOG, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - max_bytes))
                return f.read()
        except FileNotFoundError:
            return b""


class RemoteDisks:
    """The same disks as volumes in the remote pool; each returns the path the remote daemon sees.

    Disks stay ``type='file'`` in the domain with the volume's remote path, so
    the domain XML is the same in both modes and formats stay explicit.
    """

    def __init__(self, remote: RemoteStorage, uuid: str) -> None:
        self.remote = remote
        self.uuid = uuid

    def _name(self, suffix: str) -> str:
        return instance_volume_name(self.uuid, suffix)

    def image_path(self, cached: CachedImage) -> str:
        return str(self.remote.ensure_base(cached).path())

    def overlay(self, base: CachedImage, size: int, file_name: str = ROOT_DISK) -> str:
        base_path = self.image_path(base)
        config = StorageVolumeConfig(
            self._name(file_name), size, "qcow2", backing_path=base_path, backing_format=base.format
        )
        return str(self.remote.create(config).path())

    def blank_qcow2(self, size: int) -> str:
        return str(self.remote.create(StorageVolumeConfig(self._name(EPHEMERAL_DISK), size, "qcow2")).path())

    def swap(self, size_mb: int) -> str:
        header = images.swap_header(size_mb)
        vol = self.remote.create(StorageVolumeConfig(self._name(SWAP_DISK), size_mb * 1024 * 1024, "raw"))
        self.remote.write_bytes(vol, header)
        return str(vol.path())

    def config_drive(self, drive: ConfigDrive) -> str:
        # Written locally (mode 0600, it holds user data) only for as long as the upload takes.
        with tempfile.TemporaryDirectory(prefix="novakit-cd-") as tmp:
            iso = Path(tmp) / CONFIG_DRIVE
            drive.write_iso(iso)
            return str(self.remote.upload_file(self._name(CONFIG_DRIVE), iso, "raw").path())

    def console_log(self, carried: bytes = b"") -> str:
        """A volume virtlogd appends the serial console to (append='on' in the domain).

        Chosen over virDomainOpenConsole: a log keeps the whole boot, whoever
        reads it and whenever, survives reboots, and leaves the console itself
        free for ``virsh console``; a console stream sees only what the guest
        prints while it is connected, and one client at a time. ``carried``: what
        a moved guest printed before, after the header.
        """
        data = CONSOLE_HEADER + carried
        vol = self.remote.create(StorageVolumeConfig(self._name(CONSOLE_LOG), len(data), "raw"))
        self.remote.write_bytes(vol, data)
        return str(vol.path())

    def place(self, src: Path, file_name: str, fmt: str) -> str:
        return str(self.remote.upload_file(self._name(file_name), src, fmt).path())

    def copy_out(self, file_name: str, dest: Path) -> None:
        if not self.remote.download_file(self._name(file_name), dest):
            raise FileNotFoundError(f"no volume {self._name(file_name)} in pool {self.remote.pool_name}")

    def existing(self, file_names: tuple[str, ...]) -> dict[str, str]:
        found = {name: self._name(name) for name in file_names}
        return {name: vol for name, vol in found.items() if self.remote.lookup(vol) is not None}

    def write_file(self, file_name: str, data: bytes) -> None:
        self.remove_file(file_name)
        vol = self.remote.create(StorageVolumeConfig(self._name(file_name), len(data), "raw"))
        self.remote.write_bytes(vol, data)

    def read_file(self, file_name: str) -> bytes | None:
        if self.remote.lookup(self._name(file_name)) is None:
            return None
        return self.remote.read_tail(self._name(file_name), 1 << 24)

    def remove_file(self, file_name: str) -> None:
        vol = self.remote.lookup(self._name(file_name))
        if vol is not None:
            with contextlib.suppress(self.remote.libvirt.libvirtError):
                vol.delete(0)

    def console_tail(self, max_bytes: int = MAX_CONSOLE_BYTES) -> bytes:
        """The end of the log volume, read over the connection; the header novakit wrote
        before the guest's first byte is not console."""
        data = self.remote.read_tail(self._name(CONSOLE_LOG), max_bytes)
        return bytes(data).removeprefix(CONSOLE_HEADER)


class InstanceDisks(Protocol):
    """What ``LocalDisks`` and ``RemoteDisks`` both do (and a move's wrapper of either):
    each method makes one disk and returns the path the daemon will see."""

    def image_path(self, cached: CachedImage) -> str: ...
    def overlay(self, base: CachedImage, size: int, file_name: str = ROOT_DISK) -> str: ...
    def blank_qcow2(self, size: int) -> str: ...
    def swap(self, size_mb: int) -> str: ...
    def config_drive(self, drive: ConfigDrive) -> str: ...
    def console_log(self, carried: bytes = b"") -> str: ...


#: whichever of the two makers an instance's host uses
HostDisks = LocalDisks | RemoteDisks
