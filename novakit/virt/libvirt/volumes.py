"""Volumes in a libvirt storage pool (``dir``, or ``logical`` on a volume group), and their disks in guests.

Each host keeps its volumes in one pool (``novakit-volumes`` by default), a directory under the
driver's state directory (``volume_pool_path``), defined, built and started here when it is
missing, through the same storage API the remote disks use (``storage.RemoteStorage``), so that a
remote daemon works alike. A volume is the pool's volume ``volume-<id>`` (Cinder's name):

* empty: ``virStorageVolCreateXML`` with its capacity and format (qcow2 or raw);
* from an image: the cached image converted here with ``qemu-img convert`` to the volume's
  format, uploaded into a new volume (``virStorageVolUpload``), then grown to its size
  (``virStorageVolResize``). A failure deletes the half-made volume.

With the driver's ``volume_group`` option the pool is instead the ``logical`` pool of that
existing volume group (``lvm.LogicalStorage``: found or defined, never built nor deleted), and
a volume is a thick LV of its size, always ``raw`` whatever format was asked (a block device
holds no image format): from an image, the image is converted to raw here and uploaded into
the LV. A deleted LV is first overwritten with zeros (``virStorageVolWipe``, Cinder's
``volume_clear = zero``): a later LV on the same extents would otherwise show its data to
another guest. Its disk in a guest is ``<disk type='block'>`` on ``/dev/<vg>/volume-<id>``.

A volume's disk in a guest is a typed ``GuestDisk`` (``config.py``) of the volume's path;
attaching and detaching use ``attachDeviceFlags`` / ``detachDeviceFlags`` with
``AFFECT_CONFIG`` always and ``AFFECT_LIVE`` on a running guest, so the disk stays in the
definition across a stop/start. A live detach returns before the guest lets the disk go;
it is waited for, so that the volume is free for another guest when the call returns.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

from novakit import exceptions
from novakit.host.messages import VolumeSpec
from novakit.virt.libvirt import config as vconfig
from novakit.virt.libvirt.imagecache import CachedImage
from novakit.virt.libvirt.lvm import LogicalStorage, LogicalVolumeConfig
from novakit.virt.libvirt.storage import SHARED_MODE, RemoteStorage, StorageVolumeConfig

GiB = 1024**3
DEFAULT_VOLUME_POOL = "novakit-volumes"
VOLUME_PREFIX = "volume-"
#: how long a live detach may take the guest (it must release the PCI device)
DETACH_TIMEOUT = 30.0


def volume_name(volume: VolumeSpec) -> str:
    return f"{VOLUME_PREFIX}{volume.id}"


class VolumePool:
    """One host's volume pool and the disks of its volumes in guests.

    ``volume_group`` chooses the pool: None, the ``dir`` pool at ``path``; a name, the
    ``logical`` pool on that volume group (``path`` is then unused).
    """

    def __init__(
        self,
        libvirt: Any,
        get_connection: Callable[[], Any],
        name: str,
        path: Path,
        work_dir: Path,
        volume_group: str | None = None,
        host: str = "",
    ) -> None:
        self.libvirt = libvirt
        self.path = path
        self.work_dir = work_dir
        self.host = host
        self.storage: RemoteStorage
        if volume_group:
            self.storage = LogicalStorage(libvirt, get_connection, name, volume_group, host, work_dir)
        else:
            self.storage = RemoteStorage(libvirt, get_connection, name, str(path), lock_dir=work_dir)

    @property
    def logical(self) -> bool:
        """Whether the volumes are LVs of a volume group (raw block devices) rather than files."""
        return isinstance(self.storage, LogicalStorage)

    def format_of(self, volume: VolumeSpec) -> str:
        """The format the volume is stored in: as asked in a ``dir`` pool, raw in a logical one."""
        return "raw" if self.logical else volume.format

    def _error(self, volume: VolumeSpec, what: str, exc: Exception) -> exceptions.VolumeBackendError:
        text = exc.get_error_message() if isinstance(exc, self.libvirt.libvirtError) else str(exc)
        return exceptions.VolumeBackendError(volume=volume.id, reason=f"{what}: {text}")

    # --- the pool ------------------------------------------------------------------------

    def init_host(self) -> None:
        """A logical pool is found or defined and started now, so that a volume group that is
        not there fails at start-up (``ConfigError``); a ``dir`` pool is made on first use."""
        if not self.logical:
            return
        try:
            self.storage.pool()
        except self.libvirt.libvirtError as exc:
            raise exceptions.HypervisorUnavailable(
                host=self.host,
                reason=f"cannot prepare storage pool {self.storage.pool_name}: {exc.get_error_message()}",
            ) from None

    def space(self) -> tuple[int, int]:
        """A logical pool's (bytes in novakit's volumes, bytes free in the volume group): the
        volume group's other LVs are not novakit's, so they count as neither."""
        pool = self.storage.pool()
        used = sum(
            int(vol.info()[1]) for vol in pool.listAllVolumes(0) if str(vol.name()).startswith(VOLUME_PREFIX)
        )
        return used, int(pool.info()[3])

    # --- the pool's volumes -------------------------------------------------------------

    def create(self, volume: VolumeSpec, base: Callable[[], CachedImage] | None) -> None:
        """Make the volume (see the module docstring); idempotent for one of the same size.

        ``base`` fetches the image the volume is made from; it is called only once the pool is
        there and the volume is not, so a pool that cannot be had fetches nothing.
        """
        name = volume_name(volume)
        size = volume.size_gb * GiB
        try:
            existing = self.storage.lookup(name)
            if existing is not None:
                if int(existing.info()[1]) != size:
                    raise exceptions.VolumeBackendError(
                        volume=volume.id,
                        reason=f"{name} exists with another size ({existing.info()[1]} bytes)",
                    )
                return
            if base is None and self.logical:
                self.storage.create(LogicalVolumeConfig(name, size))
            elif base is None:
                self.storage.create(StorageVolumeConfig(name, size, volume.format, mode=SHARED_MODE))
            else:
                self._from_image(volume, name, size, base())
        except exceptions.NovakitError:
            raise
        except (self.libvirt.libvirtError, OSError, subprocess.CalledProcessError) as exc:
            raise self._error(volume, f"creating {name} in pool {self.storage.pool_name}", exc) from None

    def _from_image(self, volume: VolumeSpec, name: str, size: int, base: CachedImage) -> None:
        if base.virtual_size > size:
            raise exceptions.VolumeBackendError(
                volume=volume.id,
                reason=f"image {base.image_id} ({base.virtual_size} bytes) is larger than {size}",
            )
        fmt = self.format_of(volume)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.work_dir) as tmp:
            converted = Path(tmp) / name
            subprocess.run(
                ["qemu-img", "convert", "-f", base.format, "-O", fmt, str(base.path), str(converted)],
                check=True,
                capture_output=True,
            )
            if self.logical:
                # The LV has its full size from the start; the raw image fills its beginning.
                vol = self.storage.create(LogicalVolumeConfig(name, size))
                try:
                    self.storage.write_file(vol, converted)
                except BaseException:
                    # Not wiped: it holds the image's bytes and what the extents held before it.
                    with contextlib.suppress(self.libvirt.libvirtError):
                        vol.delete(0)
                    raise
                return
            vol = self.storage.upload_file(name, converted, fmt, mode=SHARED_MODE)
        try:
            vol.resize(size, 0)
        except BaseException:
            with contextlib.suppress(self.libvirt.libvirtError):
                vol.delete(0)
            raise

    def delete(self, volume: VolumeSpec) -> None:
        try:
            vol = self.storage.lookup(volume_name(volume))
            if vol is None:
                return
            if self.logical:
                try:
                    vol.wipe(0)  # zeros over the LV (see the module docstring); kept if it fails
                except self.libvirt.libvirtError as exc:
                    raise self._error(volume, "clearing its data before it is removed (kept)", exc) from None
            vol.delete(0)
        except self.libvirt.libvirtError as exc:
            raise self._error(volume, "deleting it", exc) from None

    def disk(self, volume: VolumeSpec) -> vconfig.GuestDisk:
        """The volume as a guest's disk, at its device."""
        vol = self.storage.lookup(volume_name(volume))
        if vol is None:
            raise exceptions.VolumeBackendError(
                volume=volume.id, reason=f"not in pool {self.storage.pool_name} of this host"
            )
        return vconfig.GuestDisk(
            vol.path(),
            volume.device_name or "vdb",
            driver_type=self.format_of(volume),
            serial=volume.id[:20],
            source_type="block" if self.logical else "file",
        )

    # --- guests -------------------------------------------------------------------------

    def attach(self, domain: Any, volume: VolumeSpec) -> None:
        lv = self.libvirt
        disk = self.disk(volume)
        if _disk_target(domain, disk.source_path, lv.VIR_DOMAIN_XML_INACTIVE) == disk.target_dev:
            return  # attached already (a repeated request)
        flags = lv.VIR_DOMAIN_AFFECT_CONFIG
        if domain.isActive():
            flags |= lv.VIR_DOMAIN_AFFECT_LIVE
        try:
            domain.attachDeviceFlags(ET.tostring(disk.to_element(), encoding="unicode"), flags)
        except lv.libvirtError as exc:
            raise self._error(volume, f"attaching it as {disk.target_dev}", exc) from None

    def detach(self, domain: Any, volume: VolumeSpec) -> None:
        lv = self.libvirt
        disk = self.disk(volume)
        for state, flag in (
            (lv.VIR_DOMAIN_XML_INACTIVE, lv.VIR_DOMAIN_AFFECT_CONFIG),
            (0, lv.VIR_DOMAIN_AFFECT_LIVE),
        ):
            if flag == lv.VIR_DOMAIN_AFFECT_LIVE and not domain.isActive():
                continue
            target = _disk_target(domain, disk.source_path, state)
            if target is None:
                continue  # not there (idempotent)
            disk.target_dev = target
            try:
                domain.detachDeviceFlags(ET.tostring(disk.to_element(), encoding="unicode"), flag)
            except lv.libvirtError as exc:
                raise self._error(volume, f"detaching {target}", exc) from None
            if flag == lv.VIR_DOMAIN_AFFECT_LIVE:
                self._wait_gone(domain, disk.source_path, volume)

    def volume_ids(self, domain: Any) -> tuple[str, ...]:
        """The ids of the volumes in the domain's definition (its persistent XML, which a stop
        keeps): its disks whose source is a pool's volume (``volume-<id>``)."""
        root = ET.fromstring(domain.XMLDesc(self.libvirt.VIR_DOMAIN_XML_INACTIVE))
        names = (
            (s.get("file") or s.get("dev") or "").rsplit("/", 1)[-1]
            for s in root.iterfind("./devices/disk/source")
        )
        return tuple(sorted({n.removeprefix("volume-") for n in names if n.startswith("volume-")}))

    def _wait_gone(self, domain: Any, path: str, volume: VolumeSpec) -> None:
        deadline = time.monotonic() + DETACH_TIMEOUT
        while _disk_target(domain, path, 0) is not None:
            if time.monotonic() > deadline:
                raise exceptions.VolumeBackendError(
                    volume=volume.id,
                    reason=f"the guest did not release the disk within {DETACH_TIMEOUT:.0f} s",
                )
            time.sleep(0.2)


def _disk_target(domain: Any, path: str, flags: int) -> str | None:
    """The target device of the domain's disk whose source is ``path``, or None."""
    root = ET.fromstring(domain.XMLDesc(flags))
    for disk in root.iter("disk"):
        source = disk.find("source")
        target = disk.find("target")
        if source is not None and target is not None and (source.get("file") or source.get("dev")) == path:
            return target.get("dev")
    return None
