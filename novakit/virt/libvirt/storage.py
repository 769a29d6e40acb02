"""Disks on a remote libvirt daemon, made through libvirt's storage API.

A remote daemon (``qemu+ssh://...``) cannot see the files novakit makes in
local paths, so for it every disk becomes a volume in one ``dir`` storage pool
on the remote host (``novakit`` by default), created and started here when it
is missing. Everything travels over the libvirt connection itself: the image
is uploaded with ``virStorageVolUpload`` through a ``virStream``, the qcow2
overlay is made by the remote daemon with ``virStorageVolCreateXML`` and a
``<backingStore>``, and the console log is read back with
``virStorageVolDownload``. No second channel (scp, a shared filesystem) is
needed, and the remote host needs nothing but libvirtd.

Volume names are file names in the pool directory:

``_base.<image key>.<sha256[:16]>``       the verified image (shared by instances)
``_base.<image key>.<sha256[:16]>.json``  written after a complete upload; its
                                         presence is what marks the base as usable
``<uuid>.disk`` ``<uuid>.disk.eph0`` ``<uuid>.disk.swap`` ``<uuid>.disk.config``
``<uuid>.console.log`` (and virtlogd's rotations ``<uuid>.console.log.N``)

so everything of one instance starts with ``<uuid>.``, and destroy removes it
by that prefix. A base volume is removed only by ``remove_base_image``, and
only while no overlay in the pool names it as its backing store.

As with the local image cache, formats are always stated, never probed: the
overlay's XML names its own format and its backing store's, and the domain's
disks name theirs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from novakit import exceptions, files
from novakit.virt.libvirt.config import sub_element
from novakit.virt.libvirt.imagecache import CachedImage, cache_key

DEFAULT_POOL = "novakit"
DEFAULT_SYSTEM_POOL_PATH = "/var/lib/novakit/pool"
BASE_PREFIX = "_base."
MARKER_SUFFIX = ".json"
_CHUNK = 1 << 20
#: instance volumes (config drive: user data; console: guest output) are the owner's only
PRIVATE_MODE = "0600"
#: base images are read by every guest, and on qemu:///system QEMU runs as its own user
SHARED_MODE = "0644"
# The console log volume starts with this line so that its first bytes are never the
# guest's: libvirt probes the format of every file in a pool on refresh, and a guest
# printing a qcow2 header first could otherwise make the log look like a disk image.
CONSOLE_HEADER = b"novakit console log\n"


def pool_xml(pool_type: str, name: str, path: str, source: ET.Element | None = None) -> str:
    """A storage pool's definition: its name, the ``source`` a pool type may have, its target."""
    pool = ET.Element("pool", type=pool_type)
    sub_element(pool, "name", name)
    if source is not None:
        pool.append(source)
    target = sub_element(pool, "target")
    sub_element(target, "path", path)
    return ET.tostring(pool, encoding="unicode")


def volume_element(volume_type: str, name: str, capacity: int, allocation: int) -> ET.Element:
    """A storage volume's definition as far as every type of volume shares it (sizes in bytes)."""
    vol = ET.Element("volume", type=volume_type)
    sub_element(vol, "name", name)
    sub_element(vol, "capacity", str(capacity), unit="bytes")
    sub_element(vol, "allocation", str(allocation), unit="bytes")
    return vol


@dataclass
class StoragePoolConfig:
    """A ``dir`` pool: a directory on the remote host whose files libvirt lists as volumes."""

    name: str
    path: str

    def to_xml(self) -> str:
        return pool_xml("dir", self.name, self.path)


@dataclass
class StorageVolumeConfig:
    """One volume; ``backing_path``/``backing_format`` make it a copy-on-write overlay.

    Both formats are always written out: libvirt would otherwise probe the
    backing file's format, which is exactly what novakit never allows.
    """

    name: str
    capacity: int
    format: str
    allocation: int = 0
    backing_path: str | None = None
    backing_format: str | None = None
    mode: str = PRIVATE_MODE

    def to_xml(self) -> str:
        if self.backing_path is not None and not self.backing_format:
            raise ValueError("an overlay must state its backing store's format")
        vol = volume_element("file", self.name, self.capacity, self.allocation)
        target = sub_element(vol, "target")
        sub_element(target, "format", type=self.format)
        perms = sub_element(target, "permissions")
        sub_element(perms, "mode", self.mode)
        if self.backing_path is not None:
            backing = sub_element(vol, "backingStore")
            sub_element(backing, "path", self.backing_path)
            sub_element(backing, "format", type=str(self.backing_format))
        return ET.tostring(vol, encoding="unicode")


class VolumeConfig(Protocol):
    """A volume's typed definition: ``StorageVolumeConfig`` here, ``lvm.LogicalVolumeConfig``."""

    def to_xml(self) -> str: ...


def base_volume_name(image: CachedImage) -> str:
    """Keyed by image id and content, so a reused image id never overwrites a base in use."""
    return f"{BASE_PREFIX}{cache_key(image.image_id)}.{image.sha256[:16]}"


def instance_volume_name(uuid: str, suffix: str) -> str:
    return f"{uuid}.{suffix}"


class RemoteStorage:
    """The novakit pool on one (remote) daemon and the volumes novakit keeps in it."""

    def __init__(
        self,
        libvirt: Any,
        get_connection: Callable[[], Any],
        pool_name: str,
        pool_path: str | None,
        lock_dir: Path,
    ) -> None:
        self.libvirt = libvirt
        self._conn = get_connection
        self.pool_name = pool_name
        self.pool_path = pool_path
        self.lock_dir = lock_dir

    # --- the pool -----------------------------------------------------------------

    def pool(self) -> Any:
        """The pool, defined, built and started first if it is not there (safe to repeat)."""
        lv = self.libvirt
        conn = self._conn()
        try:
            pool = conn.storagePoolLookupByName(self.pool_name)
        except lv.libvirtError as exc:
            if exc.get_error_code() != lv.VIR_ERR_NO_STORAGE_POOL:
                raise
            pool = self._define_pool(conn)
        if not pool.isActive():
            with contextlib.suppress(lv.libvirtError):
                pool.build(0)  # the directory may have gone; a no-op when it exists
            try:
                pool.create(0)
            except lv.libvirtError:
                if not pool.isActive():  # someone else started it meanwhile
                    raise
        return pool

    def _define_pool(self, conn: Any) -> Any:
        lv = self.libvirt
        if not self.pool_path:
            raise exceptions.ConfigError(
                option="remote_pool_path",
                reason=(
                    f"storage pool {self.pool_name!r} does not exist on the session daemon, and its "
                    "directory lies in the remote user's home, which novakit cannot see from here; "
                    "set remote_pool_path (e.g. /home/<user>/.local/share/novakit/pool)"
                ),
            )
        try:
            pool = conn.storagePoolDefineXML(StoragePoolConfig(self.pool_name, self.pool_path).to_xml(), 0)
        except lv.libvirtError:
            # A concurrent spawn may have defined it first.
            return conn.storagePoolLookupByName(self.pool_name)
        pool.build(0)  # mkdir -p on the remote host
        pool.setAutostart(1)
        return pool

    def refresh(self, attempts: int = 5) -> None:
        """Make libvirt see files it did not create (virtlogd's rotated console logs).

        libvirt refuses a refresh while another volume of the pool is being
        built, so it is retried briefly.
        """
        lv = self.libvirt
        for attempt in range(attempts):
            try:
                self.pool().refresh(0)
                return
            except lv.libvirtError:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def lookup(self, name: str) -> Any | None:
        lv = self.libvirt
        try:
            return self.pool().storageVolLookupByName(name)
        except lv.libvirtError as exc:
            if exc.get_error_code() == lv.VIR_ERR_NO_STORAGE_VOL:
                return None
            raise

    def volume_names(self) -> list[str]:
        return list(self.pool().listVolumes())

    def capacity(self) -> tuple[int, int]:
        """(capacity, allocation) of the filesystem under the pool, in bytes."""
        info = self.pool().info()
        return int(info[1]), int(info[2])

    # --- making volumes -------------------------------------------------------------

    def create(self, config: VolumeConfig) -> Any:
        return self.pool().createXML(config.to_xml(), 0)

    def upload_file(
        self, name: str, path: Path, fmt: str, mode: str = PRIVATE_MODE, sha256: str | None = None
    ) -> Any:
        """A new volume holding ``path``'s bytes; with ``sha256``, the bytes sent must have that digest.

        The digest is computed from exactly the bytes that go over the wire, so a
        cached file that changed since it was verified is never sent as verified.
        A failed upload deletes its volume again.
        """
        size = path.stat().st_size
        vol = self.create(StorageVolumeConfig(name, size, fmt, mode=mode))
        try:
            digest = hashlib.sha256()
            with open(path, "rb") as src:
                self._send(vol, size, src, digest)
            if sha256 is not None and digest.hexdigest() != sha256:
                raise exceptions.InvalidImage(
                    image_id=name,
                    reason=f"the cached copy changed since it was verified (sha256 {digest.hexdigest()})",
                )
        except BaseException:
            with contextlib.suppress(self.libvirt.libvirtError):
                vol.delete(0)
            raise
        return vol

    def write_bytes(self, vol: Any, data: bytes, offset: int = 0) -> None:
        """Write ``data`` into an existing volume at ``offset`` (a swap header, a log header)."""
        self._send(vol, len(data), io.BytesIO(data), hashlib.sha256(), offset)

    def write_file(self, vol: Any, path: Path) -> None:
        """Write ``path``'s bytes at the start of an existing volume (an image into an LV)."""
        with open(path, "rb") as src:
            self._send(vol, path.stat().st_size, src, hashlib.sha256())

    def _send(self, vol: Any, length: int, src: Any, digest: Any, offset: int = 0) -> None:
        stream = self._conn().newStream(0)
        vol.upload(stream, offset, length, 0)

        def reader(_stream: Any, nbytes: int, _opaque: Any) -> bytes:
            chunk: bytes = src.read(min(nbytes, _CHUNK))
            digest.update(chunk)
            return chunk

        with finishing(self.libvirt, stream):
            stream.sendAll(reader, None)

    def download_file(self, name: str, dest: Path) -> bool:
        """Copy a volume's whole file into the local file ``dest`` (0600); False if there is no
        such volume."""
        vol = self.lookup(name)
        if vol is None:
            return False
        download(self.libvirt, self._conn(), vol, dest)
        return True

    def read_tail(self, name: str, max_bytes: int) -> bytes:
        """The last ``max_bytes`` of a volume's file, or b"" when it does not exist."""
        vol = self.lookup(name)
        if vol is None:
            return b""
        # PHYSICAL: the file's real size. A dir pool reports a probed "capacity",
        # which for a log must not be trusted.
        size = int(vol.infoFlags(self.libvirt.VIR_STORAGE_VOL_GET_PHYSICAL)[2])
        offset = max(0, size - max_bytes)
        if size <= offset:
            return b""
        chunks: list[bytes] = []
        stream = self._conn().newStream(0)
        vol.download(stream, offset, size - offset, 0)

        def writer(_stream: Any, data: bytes, _opaque: Any) -> int:
            chunks.append(data)
            return len(data)

        with finishing(self.libvirt, stream):
            stream.recvAll(writer, None)
        return b"".join(chunks)

    # --- base images ------------------------------------------------------------------

    @contextlib.contextmanager
    def _upload_lock(self, image: CachedImage) -> Iterator[None]:
        """One uploader per image among the processes of this controller."""
        # The directory is the image cache, which QEMU reads: made as it always was; the lock is private.
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        with files.open_private(self.lock_dir / f".remote-{cache_key(image.image_id)}.lock", "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def ensure_base(self, image: CachedImage) -> Any:
        """The remote copy of a verified cached image, uploaded first if it is not complete there."""
        name = base_volume_name(image)
        with self._upload_lock(image):
            vol = self.lookup(name)
            if vol is not None and self._marker_matches(name, image):
                return vol
            if vol is not None:
                # Data without its marker: an upload that died half way. Start again.
                vol.delete(0)
            vol = self.upload_file(name, image.path, image.format, SHARED_MODE, sha256=image.sha256)
            marker = json.dumps(
                {
                    "image_id": image.image_id,
                    "sha256": image.sha256,
                    "format": image.format,
                    "virtual_size": image.virtual_size,
                    "bytes": image.path.stat().st_size,
                }
            ).encode()
            try:
                self._put_marker(name + MARKER_SUFFIX, marker)
            except BaseException:
                with contextlib.suppress(self.libvirt.libvirtError):
                    vol.delete(0)
                raise
            return vol

    def _put_marker(self, name: str, data: bytes) -> None:
        old = self.lookup(name)
        if old is not None:
            old.delete(0)
        vol = self.create(StorageVolumeConfig(name, len(data), "raw", mode=SHARED_MODE))
        try:
            self.write_bytes(vol, data)
        except BaseException:
            with contextlib.suppress(self.libvirt.libvirtError):
                vol.delete(0)
            raise

    def _read_marker(self, name: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self.read_tail(name + MARKER_SUFFIX, 64 * 1024) or b"null")
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def _marker_matches(self, name: str, image: CachedImage) -> bool:
        meta = self._read_marker(name)
        if meta is None or meta.get("sha256") != image.sha256 or meta.get("image_id") != image.image_id:
            return False
        vol = self.lookup(name)
        physical = int(vol.infoFlags(self.libvirt.VIR_STORAGE_VOL_GET_PHYSICAL)[2]) if vol else -1
        return physical == meta.get("bytes")

    def cached_image_ids(self) -> list[str]:
        ids = []
        for name in self.volume_names():
            if name.startswith(BASE_PREFIX) and name.endswith(MARKER_SUFFIX):
                meta = self._read_marker(name.removesuffix(MARKER_SUFFIX))
                if meta and isinstance(meta.get("image_id"), str):
                    ids.append(meta["image_id"])
        return sorted(set(ids))

    def backing_users(self, base_path: str) -> list[str]:
        """Names of the volumes in the pool whose backing store is ``base_path``."""
        users = []
        for name in self.volume_names():
            vol = self.lookup(name)
            if vol is None or name.startswith(BASE_PREFIX):
                continue
            backing = ET.fromstring(vol.XMLDesc(0)).findtext("backingStore/path")
            if backing == base_path:
                users.append(name)
        return users

    def remove_base_image(self, image_id: str) -> list[str]:
        """Image-cache cleanup: delete every remote base of ``image_id`` that no overlay uses.

        Returns the names of the bases kept because instances still use them.
        """
        self.refresh()
        prefix = f"{BASE_PREFIX}{cache_key(image_id)}."
        kept = []
        for name in self.volume_names():
            if not name.startswith(prefix) or name.endswith(MARKER_SUFFIX):
                continue
            vol = self.lookup(name)
            if vol is None:
                continue
            if self.backing_users(vol.path()):
                kept.append(name)
                continue
            marker = self.lookup(name + MARKER_SUFFIX)
            if marker is not None:
                marker.delete(0)  # first, so that a half-deleted base is never taken as complete
            vol.delete(0)
        return kept

    # --- one instance's volumes ---------------------------------------------------------

    def delete_instance_volumes(self, uuid: str, known_suffixes: tuple[str, ...]) -> list[str]:
        """Delete every ``<uuid>.*`` volume; returns what could not be deleted (as messages)."""
        lv = self.libvirt
        errors: list[str] = []
        names = {instance_volume_name(uuid, s) for s in known_suffixes}
        try:
            # Files libvirt did not make (rotated logs) appear only after a refresh.
            self.refresh()
            names.update(n for n in self.volume_names() if n.startswith(f"{uuid}."))
        except (lv.libvirtError, exceptions.NovakitError) as exc:
            errors.append(f"cannot list pool {self.pool_name}: {_message(exc)}")
        for name in sorted(names):
            try:
                vol = self.lookup(name)
                if vol is not None:
                    vol.delete(0)
            except lv.libvirtError as exc:
                if exc.get_error_code() != lv.VIR_ERR_NO_STORAGE_VOL:
                    errors.append(f"cannot delete volume {name}: {exc.get_error_message()}")
        return errors


@contextlib.contextmanager
def finishing(libvirt: Any, stream: Any) -> Iterator[None]:
    """Around a stream's transfer: finish the stream after it, or on any failure abort it (the
    daemon then drops its end) and raise."""
    try:
        yield
        stream.finish()
    except BaseException:
        with contextlib.suppress(libvirt.libvirtError):
            stream.abort()
        raise


def download(libvirt: Any, conn: Any, vol: Any, dest: Path) -> None:
    """Stream a volume's bytes over ``conn`` (the daemon that has the volume) into ``dest``."""
    stream = conn.newStream(0)
    vol.download(stream, 0, 0, 0)  # length 0: up to the end of the file
    with files.open_private(dest, "wb") as out:

        def writer(_stream: Any, data: bytes, _opaque: Any) -> int:
            return out.write(data)

        with finishing(libvirt, stream):
            stream.recvAll(writer, None)


def upload_bytes(libvirt: Any, conn: Any, vol: Any, data: bytes, offset: int = 0) -> None:
    """Write ``data`` into a volume at ``offset``, over ``conn`` (the daemon that has the volume)."""
    stream = conn.newStream(0)
    vol.upload(stream, offset, len(data), 0)
    src = io.BytesIO(data)
    with finishing(libvirt, stream):
        stream.sendAll(lambda _s, nbytes, _o: src.read(min(nbytes, _CHUNK)), None)


def _message(exc: Exception) -> str:
    if hasattr(exc, "get_error_message"):
        return str(exc.get_error_message())
    if isinstance(exc, exceptions.NovakitError):
        return exc.format_message()
    return str(exc)


def default_pool_path(session: bool, configured: str | None) -> str | None:
    """Where the pool goes when novakit creates it: None means "ask the operator" (session URIs)."""
    if configured:
        return os.fspath(configured)
    return None if session else DEFAULT_SYSTEM_POOL_PATH
