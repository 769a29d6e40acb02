"""The libvirt driver on a remote daemon: qemu+ssh:// to another user's session libvirtd.

"Remote" is made on this one machine: a Unix user of the test's own (nk-remote), an
sshd of its own on 127.0.0.1, and that user's session libvirtd. The daemon cannot
read root's files, so every disk must reach it through libvirt's storage API, as
on a real second host. Everything the fixture makes (user, daemons, files) goes
again at the end; processes are stopped by pid, and only those running as the
test's own user or started by it.

Skips, saying why, when a piece is missing (not root, no sshd, no libvirtd),
unless NOVAKIT_REQUIRE_REAL=1 is set: then it fails.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from novakit import exceptions
from novakit.compute.states import PowerState
from novakit.host.messages import ImageSpec, InstanceSpec
from novakit.virt import guest_ready_line
from novakit.virt.libvirt.driver import LibvirtDriver
from tests import processes
from tests.integration.virt.conftest import _unavailable, connect, tiny_instance

pytestmark = pytest.mark.libvirt
BOOT_DEADLINE = float(os.environ.get("NOVAKIT_BOOT_DEADLINE", "60"))
USER = os.environ.get("NOVAKIT_REMOTE_TEST_USER", "nk-remote")
#: the GECOS field that marks a user as this test's (and only such a user is ever removed)
MARKER = "novakit remote-driver integration test"
POOL = "novakit-test"


@dataclass
class RemoteHost:
    uri: str
    area: Path
    pool_path: Path
    uid: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
    return pids


def _remove_user(name: str, roots: list[int] | None = None) -> None:
    """Remove a user this test made: first what it started as that user (the session libvirtd, its
    virtlogd and QEMU by their pid files; ``roots`` and their descendants), as userdel refuses
    while they run."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return
    if entry.pw_gecos != MARKER:
        return
    runtime = Path(f"/run/user/{entry.pw_uid}")
    left = processes.end_started(entry.pw_uid, roots or [], runtime)
    if left:
        # Not ours to end: the account stays, and the next run says so.
        return
    subprocess.run(["userdel", name], capture_output=True)
    shutil.rmtree(runtime, ignore_errors=True)


def _written(path: Path) -> bool:
    """A file its writer finished: a daemon writes its pid file's line after creating it."""
    return path.exists() and path.read_text().endswith("\n")


def _wait_for(path: Path, what: str, seconds: float = 20, *, line: bool = False) -> None:
    deadline = time.monotonic() + seconds
    while not (_written(path) if line else path.exists()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not appear at {path}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def remote_host() -> Iterator[RemoteHost]:
    if os.geteuid() != 0:
        _unavailable("the remote-daemon test needs root (it creates a Unix user and an sshd)")
    for tool in ("/usr/sbin/sshd", "ssh", "ssh-keygen", "libvirtd", "useradd", "userdel", "runuser"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} is not installed (openssh-server/-client, libvirt-daemon, passwd)")
    if shutil.which("virt-ssh-helper") is None and shutil.which("nc") is None:
        _unavailable("neither virt-ssh-helper nor nc is installed for libvirt's ssh transport")
    with contextlib.suppress(KeyError):
        if pwd.getpwnam(USER).pw_gecos != MARKER:
            _unavailable(f"user {USER} exists and is not this test's; set NOVAKIT_REMOTE_TEST_USER")
    _remove_user(USER)  # a crashed earlier run's

    area = Path(
        tempfile.mkdtemp(prefix="novakit-remote-", dir=os.environ.get("NOVAKIT_TEST_AREA", "/var/tmp"))
    )
    area.chmod(0o755)
    home = area / "home"
    sshd_pid: int | None = None
    try:
        _run("useradd", "-M", "-d", str(home), "-s", "/bin/sh", "-c", MARKER, USER)
        _run("usermod", "-p", "*", USER)  # no password, but not "locked": sshd refuses locked accounts
        entry = pwd.getpwnam(USER)
        uid, gid = entry.pw_uid, entry.pw_gid
        if _pids_of_uid(uid):
            # A uid freed by a deleted user may still have processes; they are not ours to stop.
            subprocess.run(["userdel", USER], capture_output=True)
            _unavailable(f"uid {uid} given to {USER} still has processes of a former user")
        (home / ".ssh").mkdir(parents=True)
        keys = area / "keys"
        keys.mkdir(mode=0o700)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "client"))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "host"))
        shutil.copy(keys / "client.pub", home / ".ssh" / "authorized_keys")
        for path in (home, home / ".ssh", home / ".ssh" / "authorized_keys"):
            os.chown(path, uid, gid)
        runtime = Path(f"/run/user/{uid}")
        runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chown(runtime, uid, gid)

        port = _free_port()
        config = keys / "sshd_config"
        config.write_text(
            f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {keys / 'host'}\nPidFile {keys / 'sshd.pid'}\n"
            f"AllowUsers {USER}\nAuthorizedKeysFile .ssh/authorized_keys\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        _run("/usr/sbin/sshd", "-f", str(config), "-E", str(keys / "sshd.log"))
        _wait_for(keys / "sshd.pid", "sshd's pid file", line=True)
        sshd_pid = int((keys / "sshd.pid").read_text())

        env = f"HOME={home} XDG_RUNTIME_DIR={runtime} PATH=/usr/sbin:/usr/bin:/sbin:/bin".split()
        _run("runuser", "-u", USER, "--", "env", "-i", *env, "libvirtd", "--daemon")
        sock = runtime / "libvirt" / "libvirt-sock"
        _wait_for(sock, "the session libvirtd's socket")

        uri = (
            f"qemu+ssh://{USER}@127.0.0.1:{port}/session?keyfile={keys / 'client'}&no_verify=1"
            f"&known_hosts={keys / 'known_hosts'}&socket={sock}"
        )
        connect(uri).close()
        yield RemoteHost(uri, area, home / "pool", uid)
    finally:
        # The SSH sessions (nc, virt-ssh-helper) descend from sshd; note them before it goes.
        sessions = processes.with_descendants([sshd_pid], processes.process_table())[1:] if sshd_pid else []
        if sshd_pid is not None:
            processes.terminate([sshd_pid])
        _remove_user(USER, sessions)  # its libvirtd, virtlogd and QEMU, then the account
        shutil.rmtree(area, ignore_errors=True)


@pytest.fixture(scope="module")
def remote_conn(remote_host: RemoteHost) -> Iterator[Any]:
    conn = connect(remote_host.uri)
    yield conn
    with contextlib.suppress(Exception):
        conn.close()


@pytest.fixture(scope="module")
def remote_driver(remote_host: RemoteHost, tiny_image: Path) -> LibvirtDriver:
    drv = LibvirtDriver(
        "remote-host",
        {
            "uri": remote_host.uri,
            "domain_type": "qemu",
            "instances_path": str(remote_host.area / "local" / "instances"),
            "image_store": str(tiny_image),
            "remote_pool": POOL,
            "remote_pool_path": str(remote_host.pool_path),
        },
    )
    drv.init_host()
    return drv


def instance_volumes(conn: Any, uuid: str) -> list[str]:
    pool = conn.storagePoolLookupByName(POOL)
    pool.refresh(0)
    return [name for name in pool.listVolumes() if name.startswith(uuid)]


def domain_names(conn: Any) -> list[str]:
    return [d.name() for d in conn.listAllDomains(0)]


def wait_for_markers(driver: LibvirtDriver, instance: InstanceSpec, count: int) -> str:
    line = guest_ready_line(instance.hostname, instance.uuid)
    deadline = time.monotonic() + BOOT_DEADLINE
    console = ""
    while time.monotonic() < deadline:
        console = driver.get_console_output(instance)
        if console.count(line) >= count:
            break
        time.sleep(0.5)
    return console


def test_remote_guest_boots_from_pool_volumes_and_destroy_leaves_no_volume(
    remote_driver: LibvirtDriver, remote_conn: Any, remote_host: RemoteHost, tiny_image: Path
) -> None:
    drv = remote_driver
    inst = tiny_instance(tiny_image, hostname="remote-tiny-1")
    drv.spawn(inst)
    marker = guest_ready_line("remote-tiny-1", inst.uuid)
    assert marker in wait_for_markers(drv, inst, 1)
    assert drv.list_instances()[inst.uuid] is PowerState.RUNNING

    # Every disk is a pool volume on the remote side; the overlay states both formats.
    dom = ET.fromstring(remote_conn.lookupByName(f"novakit-{inst.uuid}").XMLDesc(0))
    sources = [d.get("file", "") for d in dom.findall("devices/disk/source")]
    assert sources and all(s.startswith(f"{remote_host.pool_path}/{inst.uuid}.") for s in sources)
    pool = remote_conn.storagePoolLookupByName(POOL)
    overlay = ET.fromstring(pool.storageVolLookupByName(f"{inst.uuid}.disk").XMLDesc(0))
    assert overlay.find("target/format").get("type") == "qcow2"
    assert overlay.findtext("backingStore/path", "").startswith(f"{remote_host.pool_path}/_base.tiny-root.")
    assert overlay.find("backingStore/format").get("type") == "qcow2"
    assert "tiny-root" in drv.get_available_resource().cached_images

    drv.power_off(inst, timeout=30, retry_interval=5)
    assert drv.get_info(inst).state is PowerState.SHUTDOWN
    drv.power_on(inst)
    assert drv.get_info(inst).state is PowerState.RUNNING
    assert wait_for_markers(drv, inst, 2).count(marker) == 2  # the log volume keeps the first boot

    drv.destroy(inst)
    assert f"novakit-{inst.uuid}" not in domain_names(remote_conn)
    assert instance_volumes(remote_conn, inst.uuid) == []
    assert not list(remote_host.pool_path.glob(f"{inst.uuid}*"))
    drv.destroy(inst)  # idempotent

    # The shared base stays for the next instance; only image-cache cleanup removes it.
    assert any(n.startswith("_base.tiny-root.") for n in pool.listVolumes())
    assert drv.remove_cached_image("tiny-root") == []
    pool.refresh(0)
    assert not any(n.startswith("_base.tiny-root.") for n in pool.listVolumes())


def test_a_checksum_mismatch_leaves_nothing_remote(
    remote_driver: LibvirtDriver, remote_conn: Any, tiny_image: Path
) -> None:
    good = tiny_instance(tiny_image)
    inst = tiny_instance(
        tiny_image, image=good.image.model_copy(update={"id": "tiny-bad", "checksum": "0" * 64})
    )
    with pytest.raises(exceptions.BuildAbortError, match="checksum mismatch"):
        remote_driver.spawn(inst)
    assert instance_volumes(remote_conn, inst.uuid) == []
    assert f"novakit-{inst.uuid}" not in domain_names(remote_conn)
    assert not any("tiny-bad" in n for n in remote_conn.storagePoolLookupByName(POOL).listVolumes())


def test_a_spawn_failing_after_its_volumes_exist_leaves_nothing_remote(
    remote_driver: LibvirtDriver, remote_conn: Any, tiny_image: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The overlay, swap, config drive and log volumes exist, then QEMU cannot start."""
    broken = LibvirtDriver(
        "remote-host", {**remote_driver.options, "emulator": "/nonexistent/qemu-system-x86_64"}
    )
    inst = tiny_instance(tiny_image)
    inst = inst.model_copy(update={"flavor": inst.flavor.model_copy(update={"swap": 64, "ephemeral_gb": 1})})
    seen: list[str] = []
    original: Callable[[Any], Any] = broken._define_and_start

    def define_and_start(config: Any) -> Any:
        seen.extend(instance_volumes(remote_conn, inst.uuid))
        return original(config)

    monkeypatch.setattr(broken, "_define_and_start", define_and_start)
    with pytest.raises(exceptions.RescheduledError, match="nonexistent"):
        broken.spawn(inst)
    suffixes = sorted(name.removeprefix(f"{inst.uuid}.") for name in seen)
    assert suffixes == ["console.log", "disk", "disk.config", "disk.eph0", "disk.swap"]
    assert instance_volumes(remote_conn, inst.uuid) == []
    assert f"novakit-{inst.uuid}" not in domain_names(remote_conn)


def test_kernel_images_must_be_raw_before_anything_is_uploaded(
    remote_driver: LibvirtDriver, remote_conn: Any, tiny_image: Path
) -> None:
    inst = tiny_instance(tiny_image, kernel=ImageSpec(id="k-qcow", disk_format="qcow2", location="vmlinuz"))
    with pytest.raises(exceptions.BuildAbortError, match="raw file"):
        remote_driver.spawn(inst)
    assert instance_volumes(remote_conn, inst.uuid) == []
