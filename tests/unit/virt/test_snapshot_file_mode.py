"""A snapshot's image file is a server's disk: never world-readable. The fake driver's is private to
the operator (0600, as the state's files); libvirt's is read by the hosts that share the image store,
so it is the store's group's, 0640."""

from __future__ import annotations

import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from novakit.host.messages import InstanceSpec
from novakit.virt.fake import FakeDriver


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(Path(path).stat().st_mode)


def test_the_fake_drivers_snapshot_file_is_0600(
    tmp_path: Path, make_instance: Callable[..., InstanceSpec]
) -> None:
    drv = FakeDriver("compute-1", {"state_dir": str(tmp_path / "fake")})
    drv.init_host()
    inst = make_instance()
    drv.spawn(inst)
    written = drv.snapshot(inst, "snap-1")
    assert _mode(written["location"]) == 0o600
    assert _mode(drv.state_file) == 0o600


@pytest.mark.skipif(shutil.which("qemu-img") is None, reason="qemu-img is not installed")
def test_the_libvirt_snapshot_file_is_the_stores_groups_only(tmp_path: Path) -> None:
    from novakit.virt.libvirt.snapshots import _write_image

    overlay = tmp_path / "disk"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(overlay), "1M"], check=True)
    store = tmp_path / "store"
    store.mkdir(mode=0o755)
    written = _write_image(overlay, store, store / "snap.qcow2")
    assert written["location"] == str(store / "snap.qcow2")
    assert _mode(written["location"]) == 0o640
    assert Path(written["location"]).stat().st_gid == store.stat().st_gid
