"""An instance's files passed between two daemons through libvirt's storage API alone.

The two hosts of a move may be any two daemons novakit reaches (``qemu:///system`` and a session
daemon of another user on one machine, or two hosts over ``qemu+ssh://``): neither can read the
other's files, and no second channel (scp, a shared filesystem) is assumed. So whatever one host
hands over is a volume in a storage pool of its own daemon, which the other host's driver reads
or writes over a connection to that daemon (``virStorageVolDownload`` / ``virStorageVolUpload``):

* a host with remote storage (``storage.RemoteStorage``) keeps every file of an instance in its
  pool already;
* a host with local files exposes the instance's directory as a transient ``dir`` pool,
  ``novakit-move-<uuid>``, for as long as the move needs it (``expose_dir`` / ``close_dir``).
  Transient, so that it ends with the daemon at the latest and never outlives the directory.

Only the address travels through the controller: a ``Handover`` (the daemon's URI, the pool,
the volume of each file by the instance's file name).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from novakit import exceptions
from novakit.virt.libvirt.storage import StoragePoolConfig, download, upload_bytes

MOVE_POOL_PREFIX = "novakit-move-"


def move_pool_name(uuid: str) -> str:
    return f"{MOVE_POOL_PREFIX}{uuid}"


@dataclass(frozen=True)
class Handover:
    """Where another host's driver finds an instance's files: ``uri``'s pool ``pool``,
    file name (``disks.ROOT_DISK``...) -> volume name."""

    uri: str
    pool: str
    volumes: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "pool": self.pool, "volumes": dict(self.volumes)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], what: str) -> Handover:
        """Read back what the other host returned; ``what`` names it in the error."""
        try:
            return cls(
                str(data["uri"]), str(data["pool"]), {str(k): str(v) for k, v in data["volumes"].items()}
            )
        except (KeyError, TypeError, AttributeError):
            raise exceptions.ComputeError(
                reason=f"{what}: the other host's answer has no uri, pool and volumes; "
                "is it running an older novakit?"
            ) from None


def expose_dir(libvirt: Any, conn: Any, uuid: str, path: Path) -> str:
    """The transient pool over an instance's directory, started (again) now; its name."""
    name = move_pool_name(uuid)
    try:
        pool = conn.storagePoolLookupByName(name)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() != libvirt.VIR_ERR_NO_STORAGE_POOL:
            raise
        conn.storagePoolCreateXML(StoragePoolConfig(name, str(path)).to_xml(), 0)
        return name
    if pool.isActive():
        pool.refresh(0)  # files made since it started
    else:
        pool.create(0)
    return name


def close_dir(libvirt: Any, conn: Any, uuid: str) -> None:
    """Remove the transient pool of ``expose_dir`` (its files stay). Idempotent."""
    try:
        pool = conn.storagePoolLookupByName(move_pool_name(uuid))
    except libvirt.libvirtError as exc:
        # A daemon without storage pools (no storage driver) has no move's pool either.
        if exc.get_error_code() in (libvirt.VIR_ERR_NO_STORAGE_POOL, libvirt.VIR_ERR_NO_SUPPORT):
            return
        raise
    with contextlib.suppress(libvirt.libvirtError):
        if pool.isActive():
            pool.destroy()
    with contextlib.suppress(libvirt.libvirtError):
        pool.undefine()  # only if someone made it persistent


@contextlib.contextmanager
def peer(libvirt: Any, uri: str, own_uri: str, own_conn: Any) -> Iterator[Any]:
    """A connection to the other host's daemon (this host's own one when it is the same)."""
    if uri == own_uri:
        yield own_conn
        return
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError as exc:
        raise exceptions.ComputeError(
            reason=f"cannot reach the other host of the move at {uri}: {exc.get_error_message()}"
        ) from None
    try:
        yield conn
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()


def _volume(libvirt: Any, conn: Any, pool_name: str, volume: str) -> Any:
    pool = conn.storagePoolLookupByName(pool_name)
    try:
        return pool.storageVolLookupByName(volume)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() != libvirt.VIR_ERR_NO_STORAGE_VOL:
            raise
    pool.refresh(0)  # a file made after the pool last looked
    return pool.storageVolLookupByName(volume)


def fetch(libvirt: Any, conn: Any, handover: Handover, file_name: str, dest: Path) -> bool:
    """Copy the handed-over ``file_name`` into the local file ``dest``; False if it was not handed over."""
    volume = handover.volumes.get(file_name)
    if volume is None:
        return False
    download(libvirt, conn, _volume(libvirt, conn, handover.pool, volume), dest)
    return True


def write_into(libvirt: Any, conn: Any, pool: str, volume: str, data: bytes, offset: int) -> None:
    """Write ``data`` at ``offset`` of a volume of the other host (a console log carried over)."""
    upload_bytes(libvirt, conn, _volume(libvirt, conn, pool, volume), data, offset)
