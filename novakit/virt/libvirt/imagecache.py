"""The per-host image cache: one verified copy of each image, shared by its instances.

An image enters the cache once: it is read from the image store (the only
directory images may come from), copied while its sha256 is computed, checked
against ``ImageSpec.checksum`` and its declared format (``images.inspect_image``),
and only then renamed into place. A concurrent fetch of the same image waits on
a per-image ``flock`` and then finds it cached, so two builds never copy the
same image twice or see a half-written file. A sidecar ``<key>.json`` records
what was verified; an image file without it is not trusted.

Instances never write to cached files: each gets a qcow2 overlay on top.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from novakit import exceptions, files
from novakit.host.messages import ImageSpec
from novakit.virt.libvirt import images

_CHUNK = 1 << 20
_SAFE_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,120}$")
_SHA256 = re.compile(r"^(?:sha256:)?([0-9a-fA-F]{64})$")


@dataclass(frozen=True)
class CachedImage:
    image_id: str
    path: Path
    format: str
    virtual_size: int
    sha256: str


def cache_key(image_id: str) -> str:
    """A file name for an image id that cannot leave the cache directory."""
    if _SAFE_KEY.match(image_id):
        return image_id
    return "img-" + hashlib.sha256(image_id.encode()).hexdigest()[:32]


def expected_sha256(image: ImageSpec) -> str | None:
    if image.checksum is None or image.checksum == "":
        return None
    match = _SHA256.match(image.checksum.strip())
    if not match:
        raise exceptions.InvalidImage(
            image_id=image.id, reason="checksum must be a sha256 hex digest (optionally 'sha256:<hex>')"
        )
    return match.group(1).lower()


class ImageCache:
    """Images of one host, under ``cache_path``, fetched only from ``image_store``."""

    def __init__(self, cache_path: str | os.PathLike[str], image_store: str | os.PathLike[str]) -> None:
        self.cache_path = Path(cache_path)
        self.image_store = Path(image_store)

    # --- where an image may come from -----------------------------------------

    def source_path(self, image: ImageSpec) -> Path:
        """The image's file, resolved, and refused unless it lies inside the image store."""
        location = image.location
        if not location:
            raise exceptions.InvalidImage(image_id=image.id, reason="the image has no location")
        parsed = urllib.parse.urlparse(location)
        if parsed.scheme == "file":
            if parsed.netloc not in ("", "localhost"):
                raise exceptions.InvalidImage(
                    image_id=image.id, reason="a file:// location must name a local path (file:///...)"
                )
            raw_path = urllib.parse.unquote(parsed.path)
        elif parsed.scheme == "":
            raw_path = location
        else:
            raise exceptions.InvalidImage(
                image_id=image.id,
                reason=f"location scheme {parsed.scheme!r} is not supported; use a path or file:// URL",
            )
        store = self.image_store.resolve()
        # Relative locations are relative to the store; resolve() follows symlinks,
        # so a link inside the store pointing out of it is refused too.
        path = (store / raw_path).resolve()
        if not path.is_relative_to(store):
            raise exceptions.InvalidImage(
                image_id=image.id,
                reason=f"location {location!r} is outside the image store {store}",
            )
        if not path.is_file():
            raise exceptions.InvalidImage(
                image_id=image.id, reason=f"the image file {path} does not exist in the image store"
            )
        return path

    # --- the cache ----------------------------------------------------------------

    def _paths(self, image_id: str) -> tuple[Path, Path, Path]:
        key = cache_key(image_id)
        return self.cache_path / key, self.cache_path / f"{key}.json", self.cache_path / f".{key}.lock"

    @contextlib.contextmanager
    def _lock(self, image_id: str) -> Iterator[None]:
        # QEMU reads the cache, so its directory keeps the mode it is given; a lock is no one else's.
        self.cache_path.mkdir(parents=True, exist_ok=True)
        _, _, lock_path = self._paths(image_id)
        with files.open_private(lock_path, "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def lookup(self, image: ImageSpec) -> CachedImage | None:
        """The cached copy, if one exists that was verified for this image and checksum."""
        data_path, meta_path, _ = self._paths(image.id)
        try:
            meta = json.loads(meta_path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        if not data_path.is_file() or meta.get("image_id") != image.id:
            return None
        want = expected_sha256(image)
        if want is not None and meta.get("sha256") != want:
            return None  # the image id was reused for other content: fetch again
        if meta.get("format") != images.declared_format(image.id, image.disk_format):
            return None
        return CachedImage(image.id, data_path, meta["format"], int(meta["virtual_size"]), meta["sha256"])

    def fetch(self, image: ImageSpec) -> CachedImage:
        """Return the verified cached copy, copying and checking it first if needed."""
        cached = self.lookup(image)
        if cached is not None:
            return cached
        with self._lock(image.id):
            cached = self.lookup(image)  # another process may have filled it while we waited
            if cached is not None:
                return cached
            return self._fill(image)

    def _fill(self, image: ImageSpec) -> CachedImage:
        fmt = images.declared_format(image.id, image.disk_format)
        want = expected_sha256(image)
        source = self.source_path(image)
        data_path, meta_path, _ = self._paths(image.id)
        fd, tmp_name = tempfile.mkstemp(dir=self.cache_path, prefix=f".{data_path.name}.", suffix=".part")
        tmp = Path(tmp_name)
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            actual = digest.hexdigest()
            if want is not None and actual != want:
                raise exceptions.InvalidImage(
                    image_id=image.id, reason=f"checksum mismatch: expected sha256 {want}, got {actual}"
                )
            inspected = images.inspect_image(image.id, tmp, image.disk_format)
            # QEMU runs as its own user on qemu:///system and must read the base image.
            tmp.chmod(0o644)
            os.replace(tmp, data_path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        meta = {
            "image_id": image.id,
            "sha256": actual,
            "format": fmt,
            "virtual_size": inspected.virtual_size,
            "disk_format": image.disk_format,
        }
        fd, meta_tmp = tempfile.mkstemp(dir=self.cache_path, prefix=f".{meta_path.name}.", suffix=".part")
        with os.fdopen(fd, "w") as f:
            json.dump(meta, f)
        os.chmod(meta_tmp, 0o644)
        os.replace(meta_tmp, meta_path)
        return CachedImage(image.id, data_path, fmt, inspected.virtual_size, actual)

    def cached_image_ids(self) -> list[str]:
        """Ids of the images this host holds verified copies of (for the scheduler's weighing)."""
        ids = []
        try:
            entries = list(self.cache_path.glob("*.json"))
        except FileNotFoundError:
            return []
        for meta_path in entries:
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                continue
            if (self.cache_path / meta_path.stem).is_file() and isinstance(meta.get("image_id"), str):
                ids.append(meta["image_id"])
        return sorted(ids)
