"""Fixtures for the libvirt integration tests: a reachable daemon, the tiny guest image, file areas.

A test marked ``libvirt`` skips, saying why, when libvirtd cannot be reached,
unless NOVAKIT_REQUIRE_REAL=1 is set: then it fails, so that a CI job that is
meant to exercise real hypervisors cannot pass by skipping everything.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from novakit.host.messages import FlavorSpec, ImageSpec, InstanceSpec

REPO = Path(__file__).resolve().parents[3]
TINY_IMAGE_DIR = Path(os.environ.get("NOVAKIT_TINY_IMAGE_DIR", REPO / ".state" / "tiny-image"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "libvirt: needs a reachable libvirtd (NOVAKIT_REQUIRE_REAL=1: fail, not skip)"
    )


def _unavailable(reason: str) -> None:
    if os.environ.get("NOVAKIT_REQUIRE_REAL"):
        pytest.fail(f"NOVAKIT_REQUIRE_REAL is set but {reason}")
    pytest.skip(reason)


def connect(uri: str) -> Any:
    try:
        import libvirt
    except ImportError:
        _unavailable("libvirt-python is not installed (pip install 'novakit[libvirt]')")
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    try:
        return libvirt.open(uri)
    except libvirt.libvirtError as exc:
        _unavailable(
            f"libvirtd is not reachable at {uri} ({exc.get_error_message()}); "
            "start it with tests/services/libvirt.sh start"
        )


@pytest.fixture(scope="session")
def test_conn() -> Any:
    """The libvirt test driver inside the daemon: real RPC, no guests."""
    return connect("test+unix:///default")


@pytest.fixture(scope="session")
def system_conn() -> Any:
    return connect("qemu:///system")


@pytest.fixture
def host_area() -> Iterator[Path]:
    """A directory QEMU (running as libvirt-qemu on qemu:///system) can traverse; pytest's tmp is 0700."""
    base = Path(os.environ.get("NOVAKIT_TEST_AREA", "/var/tmp"))
    area = Path(tempfile.mkdtemp(prefix="novakit-virt-", dir=base))
    area.chmod(0o755)
    yield area
    shutil.rmtree(area, ignore_errors=True)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def tiny_image() -> Path:
    """The tiny guest, built by tests/images/build-tiny-image.sh unless it is there and up to date.

    The script is idempotent and checks its outputs and the /init they were built from
    (``init.sha256``), so an image built from an older tests/images/tiny-init.sh is rebuilt.
    """
    script = REPO / "tests" / "images" / "build-tiny-image.sh"
    proc = subprocess.run([str(script), str(TINY_IMAGE_DIR)], capture_output=True, text=True)
    if proc.returncode != 0:
        _unavailable(f"the tiny guest image could not be built: {proc.stderr.strip()[-500:]}")
    return TINY_IMAGE_DIR


def tiny_instance(image_dir: Path, **overrides: Any) -> InstanceSpec:
    """An instance of the tiny guest: direct kernel boot, a qcow2 root disk, a config drive."""
    data: dict[str, Any] = {
        "uuid": str(uuidlib.uuid4()),
        "name": "tiny",
        "hostname": "tiny-1",
        "project_id": "p-test",
        "user_id": "u-test",
        "flavor": FlavorSpec(name="m1.nano", vcpus=1, memory_mb=192, root_gb=1),
        "image": ImageSpec(
            id="tiny-root",
            disk_format="qcow2",
            location="root.qcow2",
            checksum=sha256(image_dir / "root.qcow2"),
            properties={"os_command_line": (image_dir / "cmdline").read_text().strip()},
        ),
        "kernel": ImageSpec(
            id="tiny-kernel", disk_format="aki", location="vmlinuz", checksum=sha256(image_dir / "vmlinuz")
        ),
        "ramdisk": ImageSpec(
            id="tiny-initrd",
            disk_format="ari",
            location="initrd.img",
            checksum=sha256(image_dir / "initrd.img"),
        ),
    }
    data.update(overrides)
    return InstanceSpec(**data)


@pytest.fixture
def make_tiny(tiny_image: Path) -> Callable[..., InstanceSpec]:
    return lambda **kw: tiny_instance(tiny_image, **kw)
