"""The image cache: only images from the store, only with the right checksum and format."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from novakit import exceptions
from novakit.host.messages import ImageSpec
from novakit.virt.libvirt import images
from novakit.virt.libvirt.imagecache import ImageCache

needs_qemu_img = pytest.mark.skipif(
    shutil.which("qemu-img") is None, reason="qemu-img (qemu-utils) not installed"
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def qemu_img(*args: str) -> None:
    subprocess.run(["qemu-img", *args], check=True, capture_output=True)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    d = tmp_path / "store"
    d.mkdir()
    (d / "raw.img").write_bytes(b"\0" * 65536)
    return d


@pytest.fixture
def cache(tmp_path: Path, store: Path) -> ImageCache:
    return ImageCache(tmp_path / "cache", store)


def raw_image(store: Path, **kw: str) -> ImageSpec:
    data = {
        "id": "img-raw",
        "disk_format": "raw",
        "location": "raw.img",
        "checksum": sha256(store / "raw.img"),
    }
    data.update(kw)
    return ImageSpec(**data)


@needs_qemu_img
def test_fetch_copies_verifies_and_reports_cached(cache: ImageCache, store: Path) -> None:
    image = raw_image(store)
    cached = cache.fetch(image)
    assert cached.path.read_bytes() == (store / "raw.img").read_bytes()
    assert (cached.format, cached.virtual_size, cached.sha256) == ("raw", 65536, image.checksum)
    assert cache.cached_image_ids() == ["img-raw"]
    # The second fetch uses the cached copy even if the store's file is gone.
    (store / "raw.img").unlink()
    assert cache.fetch(image).path == cached.path


@needs_qemu_img
def test_file_url_and_sha256_prefix_are_accepted(cache: ImageCache, store: Path) -> None:
    image = raw_image(
        store, location=f"file://{store}/raw.img", checksum="sha256:" + sha256(store / "raw.img")
    )
    assert cache.fetch(image).format == "raw"


@pytest.mark.parametrize("location", ["/etc/passwd", "../outside.img", "file:///etc/hostname"])
def test_locations_outside_the_store_are_refused(cache: ImageCache, store: Path, location: str) -> None:
    (store.parent / "outside.img").write_bytes(b"x")
    with pytest.raises(exceptions.InvalidImage, match="outside the image store"):
        cache.fetch(raw_image(store, location=location, checksum=""))
    assert cache.cached_image_ids() == []


def test_a_symlink_out_of_the_store_is_refused(cache: ImageCache, store: Path) -> None:
    (store / "link.img").symlink_to("/etc/hostname")
    with pytest.raises(exceptions.InvalidImage, match="outside the image store"):
        cache.fetch(raw_image(store, location="link.img", checksum=""))


def test_missing_image_and_unsupported_scheme(cache: ImageCache, store: Path) -> None:
    with pytest.raises(exceptions.InvalidImage, match="does not exist"):
        cache.fetch(raw_image(store, location="nope.img"))
    with pytest.raises(exceptions.InvalidImage, match="scheme 'http' is not supported"):
        cache.fetch(raw_image(store, location="http://192.0.2.1/x.img"))


def test_checksum_mismatch_leaves_no_cached_file(cache: ImageCache, store: Path) -> None:
    with pytest.raises(exceptions.InvalidImage, match="checksum mismatch: expected sha256 0{64}"):
        cache.fetch(raw_image(store, checksum="0" * 64))
    assert sorted(p.name for p in cache.cache_path.iterdir() if not p.name.endswith(".lock")) == []


def test_checksum_must_be_sha256(cache: ImageCache, store: Path) -> None:
    with pytest.raises(exceptions.InvalidImage, match="must be a sha256"):
        cache.fetch(raw_image(store, checksum="d41d8cd98f00b204e9800998ecf8427e"))


@needs_qemu_img
def test_qcow2_declared_as_raw_is_refused(cache: ImageCache, store: Path) -> None:
    qemu_img("create", "-q", "-f", "qcow2", str(store / "q.qcow2"), "1M")
    image = raw_image(store, location="q.qcow2", checksum=sha256(store / "q.qcow2"))
    with pytest.raises(exceptions.InvalidImage, match="declared disk_format 'raw' but the file is qcow2"):
        cache.fetch(image)
    assert cache.cached_image_ids() == []


def test_raw_declared_as_qcow2_is_refused(cache: ImageCache, store: Path) -> None:
    with pytest.raises(exceptions.InvalidImage, match="declared disk_format 'qcow2' but the file is raw"):
        cache.fetch(raw_image(store, disk_format="qcow2"))


def test_unsupported_formats_are_named(cache: ImageCache, store: Path) -> None:
    with pytest.raises(exceptions.InvalidImage, match="'vmdk' is not supported; use one of raw, qcow2"):
        cache.fetch(raw_image(store, disk_format="vmdk"))


@needs_qemu_img
def test_qcow2_with_a_backing_file_is_refused(cache: ImageCache, store: Path) -> None:
    qemu_img("create", "-q", "-f", "qcow2", "-F", "raw", "-b", "/etc/hostname", str(store / "b.qcow2"), "1M")
    image = ImageSpec(id="img-b", disk_format="qcow2", location="b.qcow2", checksum=sha256(store / "b.qcow2"))
    with pytest.raises(exceptions.InvalidImage, match="names a backing file"):
        cache.fetch(image)
    assert cache.cached_image_ids() == []


@needs_qemu_img
def test_qcow2_with_an_external_data_file_is_refused(cache: ImageCache, store: Path) -> None:
    path = store / "d.qcow2"
    qemu_img("create", "-q", "-f", "qcow2", "-o", f"data_file={store / 'd.data'}", str(path), "1M")
    image = ImageSpec(id="img-d", disk_format="qcow2", location="d.qcow2", checksum=sha256(path))
    with pytest.raises(exceptions.InvalidImage, match="external data file"):
        cache.fetch(image)


@needs_qemu_img
def test_concurrent_fetches_of_one_image_copy_it_once(cache: ImageCache, store: Path) -> None:
    image = raw_image(store)
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(cache.fetch(image).path)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and len(results) == 6
    leftovers = [p.name for p in cache.cache_path.iterdir() if p.name.endswith(".part")]
    assert leftovers == []


@needs_qemu_img
def test_a_reused_image_id_with_new_content_is_fetched_again(cache: ImageCache, store: Path) -> None:
    cache.fetch(raw_image(store))
    (store / "raw.img").write_bytes(b"\1" * 65536)
    fresh = cache.fetch(raw_image(store))
    assert fresh.path.read_bytes() == b"\1" * 65536


@needs_qemu_img
def test_unsafe_image_ids_cannot_leave_the_cache(cache: ImageCache, store: Path, tmp_path: Path) -> None:
    cached = cache.fetch(raw_image(store, id="../../evil"))
    assert cached.path.parent == cache.cache_path
    assert cache.cached_image_ids() == ["../../evil"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "store"]


def test_detect_format_by_magic(tmp_path: Path) -> None:
    cases = {b"QFI\xfb": "qcow2", b"KDMV": "vmdk", b"vhdxfile": "vhdx", b"LUKS\xba\xbe": "luks", b"\0": "raw"}
    for magic, fmt in cases.items():
        path = tmp_path / "x"
        path.write_bytes(magic + b"\0" * 1024)
        assert images.detect_format(path) == fmt


def test_swap_disk_has_a_linux_swap_signature(tmp_path: Path) -> None:
    path = tmp_path / "swap"
    images.create_swap(path, 16)
    data = path.read_bytes()
    assert len(data) == 16 * 1024 * 1024
    assert data[4096 - 10 : 4096] == b"SWAPSPACE2"
    assert int.from_bytes(data[1028:1032], "little") == 16 * 256 - 1
