"""An instance's own disks and console log: files in its directory, or volumes in the remote pool.

spawn makes them through one of two makers with the same methods, each returning the path the
daemon will see, so the domain definition (``guestconfig``) is the same in both modes:

* ``LocalDisks``: files in ``<instances_path>/<uuid>`` (local or shared storage);
* ``RemoteDisks``: volumes ``<uuid>.<file name>`` in the pool of a remote daemon
  (``storage.RemoteStorage``).

The file names below are the instance's whole footprint: destroy removes the directory, or every
volume named ``<uuid>.*``. Volumes (``volumes.VolumePool``) are not an instance's own disks:
they outlive it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

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
INSTANCE_FILES = (ROOT_DISK, EPHEMERAL_DISK, SWAP_DISK, CONFIG_DRIVE, CONSOLE_LOG)
#: get_console_output returns at most this much of the end of the log (Nova's limit)
MAX_CONSOLE_BYTES = 100 * 1024


class LocalDisks:
    """An instance's disks as files in its directory (local or shared storage)."""

    def __init__(self, inst_dir: Path) -> None:
        self.inst_dir = inst_dir

    def image_path(self, cached: CachedImage) -> str:
        return str(cached.path)

    def overlay(self, base: CachedImage, size: int) -> str:
        path = self.inst_dir / ROOT_DISK
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

    def console_log(self) -> str:
        return str(self.inst_dir / CONSOLE_LOG)

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

    def overlay(self, base: CachedImage, size: int) -> str:
        base_path = self.image_path(base)
        config = StorageVolumeConfig(
            self._name(ROOT_DISK), size, "qcow2", backing_path=base_path, backing_format=base.format
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

    def console_log(self) -> str:
        """A volume virtlogd appends the serial console to (append='on' in the domain).

        Chosen over virDomainOpenConsole: a log keeps the whole boot, whoever
        reads it and whenever, survives reboots, and leaves the console itself
        free for ``virsh console``; a console stream sees only what the guest
        prints while it is connected, and one client at a time.
        """
        vol = self.remote.create(StorageVolumeConfig(self._name(CONSOLE_LOG), len(CONSOLE_HEADER), "raw"))
        self.remote.write_bytes(vol, CONSOLE_HEADER)
        return str(vol.path())

    def console_tail(self, max_bytes: int = MAX_CONSOLE_BYTES) -> bytes:
        """The end of the log volume, read over the connection; the header novakit wrote
        before the guest's first byte is not console."""
        data = self.remote.read_tail(self._name(CONSOLE_LOG), max_bytes)
        return bytes(data).removeprefix(CONSOLE_HEADER)


#: whichever of the two makers an instance's host uses
InstanceDisks = LocalDisks | RemoteDisks
