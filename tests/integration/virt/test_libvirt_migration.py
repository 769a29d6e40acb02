"""Moves of the tiny guest between two real hosts on this machine: cold (with a resize), revert,
confirm, and live, with TCG guests.

The two hosts are two daemons that cannot read each other's files: ``host-a`` is qemu:///system
with local files; ``host-b`` is the session daemon of a Unix user of the test's own (nk-move),
reached by its socket, whose disks are volumes of its own pool (``shared_storage: false``), as a
remote host's are. Both drivers run in this process, one libvirt URI per host, as the libvirt
URI transport runs them; every file passes from one daemon to the other through libvirt's
storage API and QEMU's migration stream, on 127.0.0.1 only.

Everything the fixture makes (the user, its daemon and guests, files) goes at the end; processes
are ended by the pids they recorded, never by name or user. Skips, saying why, when not root or
libvirtd is missing, unless NOVAKIT_REQUIRE_REAL=1: then it fails.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from novakit import exceptions
from novakit.compute.states import PowerState
from novakit.host.messages import FlavorSpec, ImageSpec, InstanceSpec
from novakit.virt import guest_ready_line
from novakit.virt.libvirt.driver import LibvirtDriver
from tests import processes
from tests.integration.virt.conftest import _unavailable, connect

pytestmark = pytest.mark.libvirt
DEADLINE = float(os.environ.get("NOVAKIT_BOOT_DEADLINE", "60"))
USER = os.environ.get("NOVAKIT_MOVE_TEST_USER", "nk-move")
#: the GECOS field that marks a user as this test's (and only such a user is ever removed)
MARKER = "novakit libvirt migration integration test"
POOL = "novakit-move-test"
IMAGE_FILES = ("vmlinuz", "initrd.img", "root.qcow2")


@dataclass
class Hosts:
    a: LibvirtDriver
    b: LibvirtDriver
    b_conn: Any


def _remove_user(name: str) -> None:
    """Remove the test's user after what it started (its libvirtd, virtlogd, QEMU: by pid files)."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return
    if entry.pw_gecos != MARKER:
        return
    runtime = Path(f"/run/user/{entry.pw_uid}")
    if processes.end_started(entry.pw_uid, [], runtime):
        return  # not ours to end: the account stays, and the next run says so
    subprocess.run(["userdel", name], capture_output=True)
    shutil.rmtree(runtime, ignore_errors=True)


def _session_daemon(area: Path) -> tuple[str, Path]:
    """Start ``USER``'s session libvirtd; its URI (by socket) and its pool's directory."""
    for tool in ("libvirtd", "useradd", "userdel", "runuser"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} is not installed (libvirt-daemon, passwd, util-linux)")
    with contextlib.suppress(KeyError):
        if pwd.getpwnam(USER).pw_gecos != MARKER:
            _unavailable(f"user {USER} exists and is not this test's; set NOVAKIT_MOVE_TEST_USER")
    _remove_user(USER)  # a crashed earlier run's
    home = area / "home"
    subprocess.run(["useradd", "-M", "-d", str(home), "-s", "/bin/sh", "-c", MARKER, USER], check=True)
    entry = pwd.getpwnam(USER)
    home.mkdir()
    os.chown(home, entry.pw_uid, entry.pw_gid)
    runtime = Path(f"/run/user/{entry.pw_uid}")
    runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chown(runtime, entry.pw_uid, entry.pw_gid)
    env = f"HOME={home} XDG_RUNTIME_DIR={runtime} PATH=/usr/sbin:/usr/bin:/sbin:/bin".split()
    subprocess.run(["runuser", "-u", USER, "--", "env", "-i", *env, "libvirtd", "--daemon"], check=True)
    sock = runtime / "libvirt" / "libvirt-sock"
    deadline = time.monotonic() + 20
    while not sock.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the session libvirtd's socket did not appear at {sock}")
        time.sleep(0.1)
    return f"qemu+unix:///session?socket={sock}", home / "pool"


@pytest.fixture(scope="module")
def hosts(system_conn: Any, tiny_image: Path) -> Iterator[Hosts]:
    if os.geteuid() != 0:
        _unavailable("the migration test needs root (it creates a Unix user for its second host)")
    area = Path(tempfile.mkdtemp(prefix="novakit-move-", dir=os.environ.get("NOVAKIT_TEST_AREA", "/var/tmp")))
    area.chmod(0o755)
    store = area / "images"
    store.mkdir()
    for name in IMAGE_FILES:
        shutil.copy(tiny_image / name, store / name)
    drivers: list[LibvirtDriver] = []
    try:
        uri_b, pool_path = _session_daemon(area)
        b_conn = connect(uri_b)
        a = LibvirtDriver(
            "host-a",
            {"uri": "qemu:///system", "instances_path": str(area / "a"), "image_store": str(store)},
        )
        b = LibvirtDriver(
            "host-b",
            {
                "uri": uri_b,
                "shared_storage": False,
                "remote_pool": POOL,
                "remote_pool_path": str(pool_path),
                "instances_path": str(area / "b"),
                "image_store": str(store),
            },
        )
        drivers = [a, b]
        for drv in drivers:
            drv.init_host()
        yield Hosts(a, b, b_conn)
    finally:
        for drv in drivers:
            for uuid in drv.list_instances():
                drv.destroy(InstanceSpec.model_construct(uuid=uuid))
        # A move cut short by a failure leaves its transient pool on qemu:///system: this area's only.
        for pool in system_conn.listAllStoragePools(0):
            if pool.name().startswith("novakit-move-") and str(area) in pool.XMLDesc(0):
                pool.destroy()
        _remove_user(USER)
        shutil.rmtree(area, ignore_errors=True)


def wait_for(drv: LibvirtDriver, inst: InstanceSpec, text: str, count: int = 1) -> str:
    deadline = time.monotonic() + DEADLINE
    console = ""
    while time.monotonic() < deadline:
        console = drv.get_console_output(inst)
        if console.count(text) >= count:
            return console
        time.sleep(0.5)
    raise AssertionError(f"{text!r} x{count} not on the console of {inst.hostname}:\n{console[-3000:]}")


def b_volumes(hosts: Hosts, uuid: str) -> list[str]:
    pool = hosts.b_conn.storagePoolLookupByName(POOL)
    pool.refresh(0)
    return [name for name in pool.listVolumes() if name.startswith(uuid)]


def files_of(domain_xml: str) -> list[str]:
    """The files a domain uses directly: its disks, its console log, its kernel and ramdisk."""
    dom = ET.fromstring(domain_xml)
    disks = [str(s.get("file")) for s in dom.findall("devices/disk/source")]
    logs = [str(log.get("file")) for log in dom.findall("devices/serial/log")]
    boot = [str(e.text) for e in (dom.find("os/kernel"), dom.find("os/initrd")) if e is not None]
    return disks + logs + boot


def move_pools(drv: LibvirtDriver) -> list[str]:
    return [p.name() for p in drv._conn().listAllStoragePools(0) if p.name().startswith("novakit-move-")]


def test_cold_migration_resizes_on_the_other_host_confirm_cleans_up_and_revert_brings_it_back(
    hosts: Hosts, make_tiny: Callable[..., InstanceSpec]
) -> None:
    """host-a -> host-b with a larger flavor, confirmed; then host-b -> host-a, reverted."""
    a, b = hosts.a, hosts.b
    small = FlavorSpec(name="m1.eph", vcpus=1, memory_mb=192, root_gb=1, ephemeral_gb=1)
    inst = make_tiny(hostname="cold-1", flavor=small)
    cmdline = inst.image.properties["os_command_line"]
    # The guest writes "moved" onto its ephemeral disk (vdb): its data must travel with it.
    inst.image = inst.image.model_copy(
        update={"properties": {"os_command_line": f"{cmdline} novakit.diskmark=moved"}}
    )
    ready = guest_ready_line("cold-1", inst.uuid)
    a.spawn(inst)
    wait_for(a, inst, "NOVAKIT-DISK-MARKED vdb moved")

    larger = FlavorSpec(name="m1.larger", vcpus=2, memory_mb=256, root_gb=2, ephemeral_gb=1)
    disk_info = a.migrate_disk_and_power_off(inst, "host-b", larger)
    assert inst.uuid not in a.list_instances()  # not this host's any more; kept for a revert
    assert (a.instances_path / inst.uuid / "disk").exists()
    resized = inst.model_copy(update={"flavor": larger})
    # A destination whose QEMU cannot start keeps nothing; the source still has it all.
    broken = LibvirtDriver("host-b", {**b.options, "emulator": "/nonexistent/qemu-system-x86_64"})
    with pytest.raises(exceptions.ComputeError, match="nonexistent"):
        broken.finish_migration(resized, disk_info, power_on=True)
    assert b_volumes(hosts, inst.uuid) == [] and inst.uuid not in b.list_instances()
    b.finish_migration(resized, disk_info, power_on=True)
    console = wait_for(b, resized, ready, count=2)  # the first boot (carried over) and this one
    console = wait_for(b, resized, "NOVAKIT-DISK-DATA vdb moved")
    after = console.rsplit(ready, 1)[1]
    assert "NOVAKIT-DISK vda 4194304" in after  # the root grown to the new flavor's 2 GiB
    info = b._guest(resized).domain.info()
    assert (info[1] // 1024, info[3]) == (256, 2)  # the new flavor's memory (MiB) and vCPUs

    a.confirm_migration(inst)
    assert not (a.instances_path / inst.uuid).exists() and move_pools(a) == []
    a.confirm_migration(inst)  # idempotent

    # Not back to the smaller flavor: a disk does not shrink, and the guest runs on.
    with pytest.raises(exceptions.ComputeError, match="does not shrink"):
        b.migrate_disk_and_power_off(resized, "host-a", small)
    assert b.get_info(resized).state is PowerState.RUNNING

    # Back to host-a, then reverted: the guest runs on host-b again, host-a keeps nothing.
    disk_info = b.migrate_disk_and_power_off(resized, "host-a", larger)
    assert resized.uuid not in b.list_instances()
    a.finish_migration(resized, disk_info, power_on=True)
    wait_for(a, resized, ready, count=3)
    a.destroy(resized)  # the destination's part of a revert
    b.finish_revert_migration(resized, power_on=True)
    b.finish_revert_migration(resized, power_on=True)  # idempotent
    assert b.list_instances()[resized.uuid] is PowerState.RUNNING
    wait_for(b, resized, ready, count=3)  # host-b's log: its two boots and this one
    assert not (a.instances_path / inst.uuid).exists() and move_pools(a) == []
    assert not any(name.endswith(".resize-source.xml") for name in b_volumes(hosts, inst.uuid))
    b.destroy(resized)
    assert b_volumes(hosts, inst.uuid) == []


def test_live_migration_keeps_the_guest_running_and_a_failed_one_leaves_it_on_the_source(
    hosts: Hosts, make_tiny: Callable[..., InstanceSpec]
) -> None:
    """host-a -> host-b (after a failed try) -> host-a; the guest boots once and answers on host-a."""
    a, b = hosts.a, hosts.b
    inst = make_tiny(hostname="live-1")
    ready = guest_ready_line("live-1", inst.uuid)
    a.spawn(inst)
    wait_for(a, inst, ready)

    # QEMU on host-b cannot listen on an address this machine does not have: the move fails.
    dest_info = b.pre_live_migration(inst)
    assert b_volumes(hosts, inst.uuid)
    with pytest.raises(exceptions.ComputeError, match="live migration .* failed, the guest runs on host-a"):
        a.live_migration(inst, "host-b", {**dest_info, "address": "192.0.2.1"})
    assert a.get_info(inst).state is PowerState.RUNNING
    b.rollback_live_migration_at_destination(inst)
    assert b_volumes(hosts, inst.uuid) == [] and inst.uuid not in b.list_instances()

    for source, dest, name in ((a, b, "host-b"), (b, a, "host-a")):
        dest_info = dest.pre_live_migration(inst)
        handed = source.live_migration(inst, name, dest_info)
        dest.post_live_migration_at_destination(inst, handed)
        assert inst.uuid not in source.list_instances()
        assert dest.list_instances()[inst.uuid] is PowerState.RUNNING
        domain = dest._guest(inst).domain
        assert domain.isPersistent()
        # Every file it uses is one the destination made, down to its kernel.
        assert sorted(files_of(domain.XMLDesc(0))) == sorted(
            [*dest_info["disks"].values(), dest_info["console_log"], *dest_info["boot_files"].values()]
        )
    assert b_volumes(hosts, inst.uuid) == [] and move_pools(a) == []

    # Still the first boot's guest, alive: it answers the power button on host-a.
    a.power_off(inst, timeout=30, retry_interval=5)
    console = a.get_console_output(inst)
    assert "reboot: Power down" in console
    assert console.count(ready) == 1
    a.destroy(inst)


def test_rescue_and_snapshot_on_remote_storage_and_the_snapshot_boots_on_the_other_host(
    hosts: Hosts, make_tiny: Callable[..., InstanceSpec]
) -> None:
    """host-b keeps every file as a volume: the rescue disk and the kept definition too. Its
    snapshot, written into the image store both hosts read, boots on host-a."""
    a, b = hosts.a, hosts.b
    inst = make_tiny(hostname="remote-rescue")
    ready = guest_ready_line("remote-rescue", inst.uuid)
    b.spawn(inst)
    wait_for(b, inst, ready)

    cmdline = inst.image.properties["os_command_line"]
    marking = {"os_command_line": f"{cmdline} novakit.diskmark=rescued"}
    b.rescue(inst, inst.image.model_copy(update={"id": "tiny-rescue", "properties": marking}))
    console = wait_for(b, inst, "NOVAKIT-DISK-MARKED vdb rescued")
    assert "NOVAKIT-DISK vdb 2097152" in console
    kept = {f"{inst.uuid}.disk.rescue", f"{inst.uuid}.unrescue.xml"}
    assert kept <= set(b_volumes(hosts, inst.uuid))
    b.unrescue(inst)
    wait_for(b, inst, ready, count=3)
    wait_for(b, inst, "NOVAKIT-DISK-DATA vda rescued")
    assert not kept & set(b_volumes(hosts, inst.uuid))

    image_id = str(uuidlib.uuid4())
    written = b.snapshot(inst, image_id)
    b.destroy(inst)
    snap = ImageSpec(
        id=image_id,
        disk_format=written["disk_format"],
        location=written["location"],
        checksum=written["checksum"],
        properties={"os_command_line": cmdline},
    )
    other = make_tiny(hostname="snap-on-a", image=snap)
    a.spawn(other)
    wait_for(a, other, guest_ready_line("snap-on-a", other.uuid))
    wait_for(a, other, "NOVAKIT-DISK-DATA vda rescued")
    a.destroy(other)
    b.delete_image(snap)
    assert not Path(written["location"]).exists()
