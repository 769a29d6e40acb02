"""Snapshot, rescue and unrescue of the tiny guest on qemu:///system (TCG).

The tiny guest shows what it sees of its disks on the console: ``NOVAKIT-DISK <dev> <sectors>``
and the text at each disk's start (``NOVAKIT-DISK-DATA``); with ``novakit.diskmark=WORD`` on its
command line it writes WORD onto every writable disk after the first. So a rescued guest (booted
from the rescue image, its own root disk as vdb) marks its own root disk; the guest unrescued
reads the mark back from its root; and a second guest booted from a snapshot of that root finds
the mark too: the snapshot holds the disk as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from novakit import exceptions
from novakit.compute.states import PowerState
from novakit.host.messages import ImageSpec, InstanceSpec
from novakit.virt import guest_ready_line
from novakit.virt.libvirt.driver import LibvirtDriver
from tests.integration.virt.conftest import _unavailable, sha256

pytestmark = pytest.mark.libvirt
DEADLINE = float(os.environ.get("NOVAKIT_BOOT_DEADLINE", "60"))
IMAGE_FILES = ("vmlinuz", "initrd.img", "root.qcow2")


@pytest.fixture(scope="module")
def area() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="novakit-snap-", dir=os.environ.get("NOVAKIT_TEST_AREA", "/var/tmp")))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def drv(system_conn: object, tiny_image: Path, area: Path) -> Iterator[LibvirtDriver]:
    """A host whose image store is its own (snapshots are written into it), holding the tiny guest."""
    store = area / "images"
    store.mkdir()
    for name in IMAGE_FILES:
        shutil.copy(tiny_image / name, store / name)
    driver = LibvirtDriver(
        "snap-host",
        {"uri": "qemu:///system", "instances_path": str(area / "instances"), "image_store": str(store)},
    )
    driver.init_host()
    yield driver
    for uuid in driver.list_instances():
        if (area / "instances" / uuid).exists():
            driver.destroy(InstanceSpec.model_construct(uuid=uuid))


def wait_for(drv: LibvirtDriver, inst: InstanceSpec, text: str, count: int = 1) -> str:
    deadline = time.monotonic() + DEADLINE
    console = ""
    while time.monotonic() < deadline:
        console = drv.get_console_output(inst)
        if console.count(text) >= count:
            return console
        time.sleep(0.5)
    raise AssertionError(f"{text!r} x{count} not on the console of {inst.hostname}:\n{console[-3000:]}")


def disk_sources(drv: LibvirtDriver, inst: InstanceSpec) -> dict[str, str]:
    xml = ET.fromstring(drv._guest(inst).domain.XMLDesc(0))
    return {
        d.find("target").get("dev"): d.find("source").get("file")  # type: ignore[union-attr]
        for d in xml.findall("devices/disk")
    }


def test_rescue_marks_the_root_as_vdb_unrescue_keeps_it_and_a_snapshot_boots_with_it(
    drv: LibvirtDriver, make_tiny: Callable[..., InstanceSpec]
) -> None:
    inst = make_tiny(hostname="rescue-1")
    ready = guest_ready_line("rescue-1", inst.uuid)
    drv.spawn(inst)
    wait_for(drv, inst, ready)

    cmdline = inst.image.properties["os_command_line"]
    rescue_image = inst.image.model_copy(
        update={"id": "tiny-rescue", "properties": {"os_command_line": f"{cmdline} novakit.diskmark=rescued"}}
    )
    inst_dir = drv.instances_path / inst.uuid
    # A rescue image that fails its check leaves the guest as it was: running, nothing made.
    with pytest.raises(exceptions.InvalidImage, match="checksum mismatch"):
        drv.rescue(inst, rescue_image.model_copy(update={"id": "tiny-bad", "checksum": "0" * 64}))
    assert drv.get_info(inst).state is PowerState.RUNNING
    assert sorted(p.name for p in inst_dir.iterdir() if "rescue" in p.name) == []

    drv.rescue(inst, rescue_image)
    console = wait_for(drv, inst, "NOVAKIT-DISK-MARKED vdb rescued")
    assert console.count(ready) == 2  # booted again, from the rescue disk
    assert "NOVAKIT-DISK vdb 2097152" in console  # its own 1 GiB root, as the second disk
    with pytest.raises(exceptions.ComputeError, match="in rescue already"):
        drv.rescue(inst, rescue_image)
    assert disk_sources(drv, inst)["vda"] == str(inst_dir / "disk.rescue")
    assert disk_sources(drv, inst)["vdb"] == str(inst_dir / "disk")

    drv.unrescue(inst)
    wait_for(drv, inst, ready, count=3)
    assert disk_sources(drv, inst)["vda"] == str(inst_dir / "disk")
    assert not (inst_dir / "disk.rescue").exists() and not (inst_dir / "unrescue.xml").exists()
    # Its own root is vda again, and what the rescue wrote onto it stayed.
    console = wait_for(drv, inst, "NOVAKIT-DISK-DATA vda rescued")
    assert "NOVAKIT-DISK vda 2097152" in console.rsplit(ready, 1)[1]
    drv.unrescue(inst)  # not rescued: nothing to do
    assert drv.get_info(inst).state is PowerState.RUNNING

    image_id = str(uuidlib.uuid4())
    written = drv.snapshot(inst, image_id)
    assert drv.get_info(inst).state is PowerState.RUNNING  # paused for the copy only
    path = Path(written["location"])
    assert path.parent == drv.image_store and written["disk_format"] == "qcow2"
    assert written["checksum"] == sha256(path) and written["size"] == path.stat().st_size

    # Another guest boots from the new image, fetched from the store and checked by its sha256.
    snap = ImageSpec(
        id=image_id,
        disk_format=written["disk_format"],
        location=written["location"],
        checksum=written["checksum"],
        properties={"os_command_line": cmdline},
    )
    second = make_tiny(hostname="from-snapshot", image=snap)
    drv.spawn(second)
    wait_for(drv, second, guest_ready_line("from-snapshot", second.uuid))
    wait_for(drv, second, "NOVAKIT-DISK-DATA vda rescued")
    drv.destroy(second)
    drv.destroy(inst)
    assert not inst_dir.exists()

    drv.delete_image(snap)
    assert not path.exists()
    drv.delete_image(snap)  # idempotent
    # Only a snapshot's own file is ever removed: not another image of the store.
    drv.delete_image(ImageSpec(id="tiny-root", location=str(drv.image_store / "root.qcow2")))
    assert (drv.image_store / "root.qcow2").exists()


@pytest.fixture
def full_store(area: Path) -> Iterator[Path]:
    """An image store with room for no image: a 64 KiB tmpfs."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        _unavailable("the full-store test mounts a tmpfs (needs root and mount)")
    path = Path(tempfile.mkdtemp(prefix="full-store-", dir=area))
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)], capture_output=True)
    if proc.returncode != 0:
        _unavailable(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], capture_output=True)
        with contextlib.suppress(OSError):
            path.rmdir()


def test_a_snapshot_that_cannot_be_written_leaves_no_file_and_the_guest_running(
    drv: LibvirtDriver, make_tiny: Callable[..., InstanceSpec], full_store: Path
) -> None:
    inst = make_tiny(hostname="snap-full")
    drv.spawn(inst)
    try:
        full = LibvirtDriver("snap-host", {**drv.options, "image_store": str(full_store)})
        with pytest.raises(exceptions.ComputeError, match="qemu-img convert failed"):
            full.snapshot(inst, str(uuidlib.uuid4()))
        assert list(full_store.iterdir()) == []
        assert drv.get_info(inst).state is PowerState.RUNNING
    finally:
        drv.destroy(inst)
