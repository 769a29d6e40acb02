"""Stop, start and delete of several real guests on one host: novakit against raw libvirt calls.

Five tiny TCG guests (tests/images/build-tiny-image.sh) run on one libvirt host. Each round
times, for all of them at once:

* raw: the libvirt calls alone, issued for every guest and then waited for (stop:
  ``shutdown`` of each, then until every domain is off; start: ``create`` of each; delete:
  ``destroy`` + ``undefine`` of each, guests booted for it beforehand);
* novakit: the batch a host's compute task gets from a lifecycle playbook (one request per
  server) through ``ComputeManager.handle_all``: instance locks, events, the driver's graceful
  shutdown, the power state read back, the files removed on delete.

Runs alternate raw and novakit. Goal (issue 15): novakit within 1.5x of raw for each operation.

    python bench/lifecycle_host.py [--guests 5] [--rounds 3] [--image-dir .state/tiny-image]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import libvirt
from virt_spawn import URI, bench_driver, tiny, wait_for  # type: ignore[import-not-found]

from novakit.host.manager import ComputeManager
from novakit.host.messages import ComputeRequest, InstanceSpec
from novakit.virt import guest_ready_line
from novakit.virt.libvirt import config as vconfig
from novakit.virt.libvirt.driver import LibvirtDriver

POLL = 0.02
GOAL = 1.5


def boot(manager: ComputeManager, driver: LibvirtDriver, guests: list[InstanceSpec]) -> None:
    result = manager.handle(request("build", guests))
    failed = [r.fault.message for r in result.results if not r.ok and r.fault]
    if failed:
        raise SystemExit(f"build failed: {failed}")
    for g in guests:
        wait_for(driver.instances_path / g.uuid / "console.log", guest_ready_line(g.hostname, g.uuid))


def request(op: str, guests: list[InstanceSpec]) -> ComputeRequest:
    return ComputeRequest(
        request_id="req-bench",
        host="bench",
        operation=op,  # type: ignore[arg-type]
        action=op if op != "build" else None,
        instances=guests,
        issued_at=dt.datetime.now(dt.UTC) if op != "build" else None,
    )


def novakit_op(manager: ComputeManager, op: str, guests: list[InstanceSpec]) -> float:
    options = {"timeout": 60} if op == "stop" else {}
    batch = [request(op, [g]).model_copy(update={"options": options}) for g in guests]
    start = time.perf_counter()
    results = manager.handle_all(batch)
    elapsed = time.perf_counter() - start
    bad = [r.results[0].fault.message for r in results if not r.results[0].ok and r.results[0].fault]
    if bad:
        raise SystemExit(f"novakit {op} failed: {bad}")
    return elapsed


def domains(conn: libvirt.virConnect, guests: list[InstanceSpec]) -> list[libvirt.virDomain]:
    return [conn.lookupByName(vconfig.domain_name(g.uuid)) for g in guests]


def raw_op(conn: libvirt.virConnect, op: str, guests: list[InstanceSpec]) -> float:
    doms = domains(conn, guests)
    start = time.perf_counter()
    if op == "stop":
        for d in doms:
            d.shutdown()
        while any(d.isActive() for d in doms):
            time.sleep(POLL)
    elif op == "start":
        for d in doms:
            d.create()
    elif op == "destroy":
        for d in doms:
            d.destroy()
            d.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--guests", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--image-dir", type=Path, default=Path(".state/tiny-image"))
    args = parser.parse_args()
    image_dir = args.image_dir.resolve()
    libvirt.registerErrorHandler(lambda _c, _e: None, None)
    # A timeout's SIGTERM still removes the guests (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    area = Path(tempfile.mkdtemp(prefix="novakit-bench-lifecycle-", dir="/var/tmp"))
    area.chmod(0o755)
    times: dict[tuple[str, str], list[float]] = {}
    load_before = os.getloadavg()
    driver = bench_driver(area, image_dir)
    conn = libvirt.open(URI)
    all_guests: list[InstanceSpec] = []
    try:
        manager = ComputeManager("bench", driver)
        guests = [tiny(image_dir) for _ in range(args.guests)]
        all_guests += guests
        boot(manager, driver, guests)
        for _ in range(args.rounds):
            for side in ("raw", "novakit"):
                for op in ("stop", "start"):
                    fn = raw_op(conn, op, guests) if side == "raw" else novakit_op(manager, op, guests)
                    times.setdefault((side, op), []).append(fn)
                    print(f"  ({side} {op}: {fn:.2f} s)", file=sys.stderr, flush=True)
                    logs = [driver.instances_path / g.uuid / "console.log" for g in guests]
                    if op == "stop":  # a fresh log, to see the next boot's marker in
                        for log in logs:
                            log.write_text("")
                    else:  # the next stop needs guests that listen for the power button
                        for g, log in zip(guests, logs, strict=True):
                            wait_for(log, guest_ready_line(g.hostname, g.uuid))
        for side in ("raw", "novakit"):
            doomed = [tiny(image_dir) for _ in range(args.guests)]
            all_guests += doomed
            boot(manager, driver, doomed)
            fn = raw_op(conn, "destroy", doomed) if side == "raw" else novakit_op(manager, "destroy", doomed)
            times.setdefault((side, "delete"), []).append(fn)
    finally:
        for g in all_guests:
            driver.destroy(g)
        shutil.rmtree(area, ignore_errors=True)
    load_after = os.getloadavg()

    def fmt(xs: list[float]) -> str:
        return f"median {statistics.median(xs):6.2f} s [{min(xs):.2f}..{max(xs):.2f}]"

    print(
        f"{args.guests} tiny guests on one host ({URI}, TCG), {args.rounds} rounds of stop/start, "
        f"1 of delete; cpus={os.cpu_count()}, load {load_before[0]:.2f} before, {load_after[0]:.2f} after"
    )
    for op in ("stop", "start", "delete"):
        raw, nk = times[("raw", op)], times[("novakit", op)]
        ratio = statistics.median(nk) / statistics.median(raw)
        verdict = "meets" if ratio <= GOAL else "misses"
        print(f"  {op:6}  raw {fmt(raw)}   novakit {fmt(nk)}   ratio {ratio:.2f}x ({verdict} goal {GOAL}x)")


if __name__ == "__main__":
    main()
