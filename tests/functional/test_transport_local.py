"""The in-process transport: one compute manager per host, and its limit on concurrent builds."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from novakit.host.messages import ComputeRequest, FlavorSpec, ImageSpec, InstanceSpec
from novakit.transport.local import LocalTransport


def _spec(n: int) -> InstanceSpec:
    return InstanceSpec(
        uuid=f"00000000-0000-0000-0000-{n:012d}",
        name=f"s{n}",
        hostname=f"s{n}",
        project_id="p",
        user_id="u",
        image=ImageSpec(id="img"),
        flavor=FlavorSpec(name="f", vcpus=1, memory_mb=64, root_gb=1),
    )


class _Gauge:
    """Counts spawns in flight on a driver and remembers the most at once."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self._lock = threading.Lock()

    def wrap(self, driver: Any) -> None:
        spawn = driver.spawn

        def counted(instance: InstanceSpec) -> None:
            with self._lock:
                self.now += 1
                self.most = max(self.most, self.now)
            try:
                spawn(instance)
            finally:
                with self._lock:
                    self.now -= 1

        driver.spawn = counted


def test_at_most_max_concurrent_builds_run_at_once_on_a_host(tmp_path: Path) -> None:
    info = {
        "driver": "fake",
        "transport": "local",
        "options": {"state_dir": str(tmp_path), "failure_mode": "slow_spawn", "spawn_delay": 0.2},
    }
    transport = LocalTransport("busy-host", info, max_concurrent_builds=2)
    gauge = _Gauge()
    gauge.wrap(transport._manager().driver)

    # Two requests at once (two users' boots) of four builds each: the limit is per host, not per request.
    results: list[Any] = []

    def boot(first: int) -> None:
        req = ComputeRequest(
            request_id=f"req-{first}",
            host="busy-host",
            operation="build",
            instances=[_spec(first + i) for i in range(4)],
        )
        results.append(transport.call(req))

    started = time.monotonic()
    threads = [threading.Thread(target=boot, args=(n,)) for n in (0, 100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started

    assert all(r.ok for res in results for r in res.results) and len(results) == 2
    assert gauge.most == 2
    assert took >= 4 * 0.2 * 0.9  # eight builds of 0.2 s, two at a time
    assert len(LocalTransport("busy-host", info)._manager().driver.list_instances()) == 8


def test_a_host_whose_driver_cannot_start_asks_for_a_reschedule(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    transport = LocalTransport("broken", {"driver": "fake", "options": {"state_dir": str(blocker)}})
    result = transport.call(
        ComputeRequest(request_id="r", host="broken", operation="build", instances=[_spec(1)])
    )
    assert result.error is not None and result.error.reschedule
    assert [(r.ok, r.fault.host if r.fault else None) for r in result.results] == [(False, "broken")]
