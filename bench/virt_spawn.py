"""Spawn-to-marker time of the tiny guest on QEMU/TCG: novakit's spawn against a raw libvirt boot.

Both sides boot the same kernel and initramfs with the same domain definition
and wait for the same line on the serial console log
(``NOVAKIT-GUEST-READY hostname=... instance-id=...``). The raw side has its
overlay, config drive and XML made before its clock starts and only calls
defineXML + create; novakit's side starts its clock before ``spawn``, so the
difference is what novakit adds (image cache lookup, qcow2 overlay, config
drive, XML, libvirt calls). Goal: under 0.5 s. Runs alternate, one guest at a time.

    python bench/virt_spawn.py [--runs 5] [--image-dir .state/tiny-image]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tempfile
import time
import uuid as uuidlib
from pathlib import Path

import libvirt

from novakit.host.messages import FlavorSpec, ImageSpec, InstanceSpec
from novakit.virt import guest_ready_line
from novakit.virt.libvirt.driver import LibvirtDriver

URI = "qemu:///system"
POLL = 0.02
DEADLINE = 120.0


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tiny(image_dir: Path) -> InstanceSpec:
    return InstanceSpec(
        uuid=str(uuidlib.uuid4()),
        name="bench",
        hostname="bench-tiny",
        project_id="p-bench",
        user_id="u-bench",
        flavor=FlavorSpec(name="m1.nano", vcpus=1, memory_mb=192, root_gb=1),
        image=ImageSpec(
            id="tiny-root",
            disk_format="qcow2",
            location="root.qcow2",
            checksum=sha256(image_dir / "root.qcow2"),
            properties={"os_command_line": (image_dir / "cmdline").read_text().strip()},
        ),
        kernel=ImageSpec(
            id="tiny-kernel", disk_format="aki", location="vmlinuz", checksum=sha256(image_dir / "vmlinuz")
        ),
        ramdisk=ImageSpec(
            id="tiny-initrd",
            disk_format="ari",
            location="initrd.img",
            checksum=sha256(image_dir / "initrd.img"),
        ),
    )


def bench_driver(area: Path, image_dir: Path) -> LibvirtDriver:
    """A libvirt driver on ``URI`` (TCG) with its instances under ``area`` and the tiny image's store."""
    driver = LibvirtDriver(
        "bench",
        {
            "uri": URI,
            "domain_type": "qemu",
            "instances_path": str(area / "inst"),
            "image_store": str(image_dir),
        },
    )
    driver.init_host()
    return driver


def wait_for(path: Path, line: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            if line in path.read_text(errors="replace"):
                return
        except FileNotFoundError:
            pass
        time.sleep(POLL)
    raise SystemExit(f"no marker in {path} after {DEADLINE} s")


CALL_TIMES: dict[str, list[float]] = {"novakit": [], "raw": []}


def novakit_run(driver: LibvirtDriver, image_dir: Path) -> float:
    inst = tiny(image_dir)
    start = time.perf_counter()
    driver.spawn(inst)
    CALL_TIMES["novakit"].append(time.perf_counter() - start)
    wait_for(driver.instances_path / inst.uuid / "console.log", guest_ready_line(inst.hostname, inst.uuid))
    elapsed = time.perf_counter() - start
    driver.destroy(inst)
    return elapsed


def raw_run(driver: LibvirtDriver, conn: libvirt.virConnect, image_dir: Path, area: Path) -> float:
    """Everything prepared by novakit beforehand, then only the libvirt calls are timed."""
    inst = tiny(image_dir)
    inst_dir = driver.instances_path / inst.uuid
    inst_dir.mkdir(parents=True)
    config = driver._prepare_guest(inst, inst_dir)
    config.name = f"raw-{inst.uuid}"
    xml = config.to_xml()
    start = time.perf_counter()
    dom = conn.defineXML(xml)
    dom.create()
    CALL_TIMES["raw"].append(time.perf_counter() - start)
    wait_for(inst_dir / "console.log", guest_ready_line(inst.hostname, inst.uuid))
    elapsed = time.perf_counter() - start
    dom.destroy()
    dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE)
    shutil.rmtree(inst_dir)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--image-dir", type=Path, default=Path(".state/tiny-image"))
    args = parser.parse_args()
    image_dir = args.image_dir.resolve()
    libvirt.registerErrorHandler(lambda _c, _e: None, None)
    area = Path(tempfile.mkdtemp(prefix="novakit-bench-spawn-", dir="/var/tmp"))
    area.chmod(0o755)
    try:
        driver = bench_driver(area, image_dir)
        conn = libvirt.open(URI)
        cold = novakit_run(driver, image_dir)  # fills the image cache
        nk, raw = [], []
        for _ in range(args.runs):
            raw.append(raw_run(driver, conn, image_dir, area))
            nk.append(novakit_run(driver, image_dir))
    finally:
        shutil.rmtree(area, ignore_errors=True)

    def fmt(xs: list[float]) -> str:
        spread = statistics.pstdev(xs) if len(xs) > 1 else 0.0
        return (
            f"median {statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f}, stdev {spread:.2f})"
        )

    print(f"spawn-to-marker of the tiny guest on {URI} (TCG), {args.runs} runs each, cpus={os.cpu_count()}")
    print(f"  raw libvirt (define + create, disks made beforehand): {fmt(raw)}")
    print(f"  novakit spawn (warm image cache)                    : {fmt(nk)}")
    print(f"  novakit spawn, first run (cold image cache)         : {cold:.2f} s")
    med = statistics.median
    print(f"  novakit adds (difference of medians): {med(nk) - med(raw):+.2f} s (goal < 0.5 s)")
    # The boot itself is noisy under TCG; the time until the call returns is not.
    nk_call, raw_call = med(CALL_TIMES["novakit"][1:]), med(CALL_TIMES["raw"])
    print(f"  until the call returns: spawn() {nk_call:.3f} s vs defineXML+create {raw_call:.3f} s")
    print(f"  novakit adds before QEMU starts: {nk_call - raw_call:+.3f} s")


if __name__ == "__main__":
    main()
