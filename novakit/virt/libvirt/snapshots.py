"""Images of a server's root disk (Nova's ``snapshot``; shelve is a power-off and then this).

The root disk is a qcow2 overlay on a cached image; the snapshot is that overlay flattened
with its image into one standalone qcow2 file in the host's image store, named for the new
image's id, so that any host whose image store holds it boots from it through its image cache
(which checks its sha256, as for every image).

A running guest is paused only while its overlay is copied (QEMU flushes on pause, so the copy
is consistent): a copy of the overlay is a small file, the flattening runs afterwards on the
copy, and the guest is resumed whatever happens. On remote storage the overlay is downloaded
instead, and pointed at this host's cached copy of its image before it is flattened.

The image file appears only once it is complete (written under a temporary name in the store,
then renamed): a snapshot that fails leaves no file, and no half-written image is ever booted.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from novakit import exceptions
from novakit.host.messages import ImageSpec, InstanceSpec
from novakit.host.power import PowerState
from novakit.virt.libvirt import images
from novakit.virt.libvirt.disks import ROOT_DISK
from novakit.virt.libvirt.imagecache import cache_key

if TYPE_CHECKING:
    from novakit.virt.libvirt.driver import LibvirtDriver

SNAPSHOT_FORMAT = "qcow2"
_CHUNK = 1 << 20


def snapshot_file_name(image_id: str) -> str:
    """The store's file of a snapshot: the only files ``delete_image`` removes."""
    return f"{cache_key(image_id)}.{SNAPSHOT_FORMAT}"


def snapshot(drv: LibvirtDriver, instance: InstanceSpec, image_id: str) -> dict[str, Any]:
    guest = drv._guest(instance)
    disks = drv._maker(guest.uuid)
    store = drv.image_store
    final = store / snapshot_file_name(image_id)
    drv.image_cache_path.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix=".snapshot-", dir=drv.image_cache_path) as work:
            overlay = Path(work) / ROOT_DISK
            paused = guest.get_power_state() == PowerState.RUNNING
            if paused:
                guest.domain.suspend()
            try:
                disks.copy_out(ROOT_DISK, overlay)
            except FileNotFoundError:
                raise exceptions.ComputeError(
                    reason=f"cannot snapshot instance {instance.uuid}: it has no root disk of its own "
                    f"on {drv.host} (booted from a volume?)"
                ) from None
            finally:
                if paused:
                    guest.domain.resume()
            if drv.remote is not None:
                # Its backing file is the remote pool's copy of the image: use this host's cached one.
                base = drv.image_cache.fetch(instance.image)
                images.rebase_unsafe(overlay, base.path, base.format)
            return _write_image(overlay, store, final)
    except drv.libvirt.libvirtError as exc:
        raise drv._compute_error("snapshot", instance.uuid, exc) from None
    except OSError as exc:
        raise exceptions.ComputeError(
            reason=f"cannot write the snapshot of instance {instance.uuid} into image store {store}: {exc}"
        ) from None


def _write_image(overlay: Path, store: Path, final: Path) -> dict[str, Any]:
    """Flatten ``overlay`` into ``final``, which exists only once it is whole; its description."""
    if not store.is_dir():
        raise exceptions.ComputeError(reason=f"the image store {store} is not a directory on this host")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".part", dir=store)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        images.convert_to_qcow2(overlay, "qcow2", tmp)
        digest = hashlib.sha256()
        with open(tmp, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
            os.fsync(f.fileno())
        # A server's disk is its project's: not world-readable (it was 0644). The hosts that share
        # the store read it into their image caches (an unshelve or a boot from the snapshot on
        # another host), so it goes to the store's group, 0640: those hosts, nobody else.
        with contextlib.suppress(PermissionError):
            os.chown(tmp, -1, store.stat().st_gid)
        tmp.chmod(0o640)
        size = tmp.stat().st_size
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return {
        "location": str(final),
        "checksum": digest.hexdigest(),
        "size": size,
        "disk_format": SNAPSHOT_FORMAT,
    }


def delete_image(drv: LibvirtDriver, image: ImageSpec) -> None:
    """Remove the file of a snapshot this host wrote; anything else in the store is left alone."""
    store = drv.image_store.resolve()
    path = store / snapshot_file_name(image.id)
    location = Path(image.location) if image.location else path
    if not location.is_absolute():
        location = store / location
    if location.parent.resolve() != store or location.name != path.name:
        return  # not a file this driver wrote for this image
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise exceptions.ComputeError(reason=f"cannot remove image file {path}: {exc}") from None
