"""What serialising an instance's operations on its host costs (``compute.manager.InstanceLocks``).

A host runs each instance's operations one at a time, in the order their actions
started: every lifecycle request takes an ``flock`` on a file of its own and reads
and writes the start time kept there. This times ``ComputeManager.handle`` for a
pause/unpause pair on the fake driver, with the locks as shipped and, as the
baseline in the same process, with the lock replaced by a no-op, and prints the
median per request, the range over the rounds and the ratio.

    python bench/instance_lock.py [--rounds 7] [--requests 200]

Figures only; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from novakit.host.manager import ComputeManager, InstanceLocks
from novakit.host.messages import ComputeRequest, FlavorSpec, ImageSpec, InstanceSpec
from novakit.virt.driver import load_driver


class _NoLocks(InstanceLocks):
    @contextlib.contextmanager
    def hold(self, uuid: str, issued_at: dt.datetime | None = None) -> Iterator[None]:
        yield


def _round(manager: ComputeManager, spec: InstanceSpec, requests: int) -> float:
    """Seconds per request over ``requests`` pause/unpause requests, each issued after the last."""
    started = time.perf_counter()
    for i in range(requests):
        op = "pause" if i % 2 == 0 else "unpause"
        issued = dt.datetime(2026, 1, 1) + dt.timedelta(microseconds=i)
        manager.handle(
            ComputeRequest(
                request_id="req-bench", host="bench", operation=op, instances=[spec], issued_at=issued
            )
        )
    return (time.perf_counter() - started) / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        driver = load_driver("fake", "bench", {"state_dir": str(Path(tmp) / "fake")})
        manager = ComputeManager("bench", driver)
        spec = InstanceSpec(
            uuid="00000000-0000-4000-8000-000000000001",
            name="bench",
            hostname="bench",
            project_id="p",
            user_id="u",
            flavor=FlavorSpec(name="m1.small", vcpus=1, memory_mb=512, root_gb=1),
            image=ImageSpec(id="tiny", name="tiny"),
        )
        driver.spawn(spec)
        shipped = manager._instance_locks
        figures: dict[str, list[float]] = {"with locks": [], "no-op lock (baseline)": []}
        for _ in range(args.rounds):  # interleaved, so that drift hits both alike
            manager._instance_locks = shipped
            figures["with locks"].append(_round(manager, spec, args.requests))
            manager._instance_locks = _NoLocks(Path(tmp))
            figures["no-op lock (baseline)"].append(_round(manager, spec, args.requests))
    medians = {}
    for name, values in figures.items():
        medians[name] = statistics.median(values)
        low, high = min(values), max(values)
        print(
            f"{name:24} median {medians[name] * 1e3:7.3f} ms/request  range {low * 1e3:.3f}..{high * 1e3:.3f}"
        )
    ratio = medians["with locks"] / medians["no-op lock (baseline)"]
    print(f"ratio with/without: {ratio:.2f}x over {args.rounds} rounds of {args.requests} requests")


if __name__ == "__main__":
    main()
