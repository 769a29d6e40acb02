"""A host's batch of requests runs side by side, bounded, and in order for each instance.

The fake driver here takes a while to power a guest off or on (as a real guest's shutdown
does), and counts how many of its calls overlap: what the compute manager decides is how
many run at once and in which order, which is what these tests look at.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from novakit.compute.states import PowerState
from novakit.host.manager import ComputeManager
from novakit.host.messages import ComputeRequest, InstanceSpec
from novakit.virt.fake import FakeDriver
from tests.unit.virt.conftest import build_instance

SLOW = 0.3


class SlowFake(FakeDriver):
    """The fake driver, with power changes that take ``SLOW`` seconds and are counted."""

    def __init__(self, host: str, options: dict[str, Any]) -> None:
        super().__init__(host, options)
        self._count_lock = threading.Lock()
        self.in_flight = 0
        self.most_at_once = 0
        self.calls: list[tuple[str, str]] = []

    def _slowly(self, what: str, uuid: str) -> None:
        with self._count_lock:
            self.in_flight += 1
            self.most_at_once = max(self.most_at_once, self.in_flight)
            self.calls.append((what, uuid))
        time.sleep(SLOW)
        with self._count_lock:
            self.in_flight -= 1

    def power_off(self, instance: InstanceSpec, timeout: float = 60, retry_interval: float = 5) -> None:
        self._slowly("stop", instance.uuid)
        super().power_off(instance, timeout, retry_interval)

    def power_on(self, instance: InstanceSpec) -> None:
        self._slowly("start", instance.uuid)
        super().power_on(instance)


@pytest.fixture
def driver(tmp_path: Path) -> SlowFake:
    drv = SlowFake("compute-1", {"state_dir": str(tmp_path / "fake"), "spawn_delay": 0})
    drv.init_host()
    return drv


def guests(driver: SlowFake, n: int) -> list[InstanceSpec]:
    out = [build_instance(uuid=str(uuidlib.uuid4()), name=f"g-{i}") for i in range(n)]
    for inst in out:
        driver.spawn(inst)
    return out


def request(op: str, instances: list[InstanceSpec], at: dt.datetime | None = None) -> ComputeRequest:
    return ComputeRequest(
        request_id="req-batch",
        host="compute-1",
        operation=op,  # type: ignore[arg-type]
        action=op,
        instances=instances,
        issued_at=at or dt.datetime.now(dt.UTC),
    )


def test_stops_of_five_guests_run_at_once_and_answer_in_order(driver: SlowFake) -> None:
    five = guests(driver, 5)
    manager = ComputeManager("compute-1", driver)
    start = time.monotonic()
    results = manager.handle_all([request("stop", [g]) for g in five])
    elapsed = time.monotonic() - start
    assert [r.results[0].uuid for r in results] == [g.uuid for g in five]
    assert all(r.results[0].ok for r in results)
    assert {r.results[0].power_state for r in results} == {PowerState.SHUTDOWN}
    assert driver.most_at_once == 5
    # One after the other would take five times SLOW.
    assert elapsed < 3 * SLOW


def test_at_most_max_concurrent_builds_at_once(driver: SlowFake) -> None:
    five = guests(driver, 5)
    results = ComputeManager("compute-1", driver, max_concurrent_builds=2).handle_all(
        [request("stop", [g]) for g in five]
    )
    assert all(r.results[0].ok for r in results)
    assert driver.most_at_once == 2


def test_one_request_for_several_instances_runs_them_side_by_side(driver: SlowFake) -> None:
    four = guests(driver, 4)
    result = ComputeManager("compute-1", driver).handle(request("stop", four))
    assert [r.uuid for r in result.results] == [g.uuid for g in four]
    assert all(r.ok for r in result.results)
    assert driver.most_at_once == 4


def test_requests_for_one_instance_run_in_the_order_given(driver: SlowFake) -> None:
    one, other = guests(driver, 2)
    now = dt.datetime.now(dt.UTC)
    later = now + dt.timedelta(seconds=1)
    batch = [request("stop", [one], now), request("stop", [other], now), request("start", [one], later)]
    results = ComputeManager("compute-1", driver).handle_all(batch)
    # Neither is refused as superseded: the stop ran before the start that came after it.
    assert all(r.results[0].ok for r in results)
    assert [c for c in driver.calls if c[1] == one.uuid] == [("stop", one.uuid), ("start", one.uuid)]
    assert results[2].results[0].power_state == PowerState.RUNNING
    assert results[1].results[0].power_state == PowerState.SHUTDOWN
    # The other guest's stop did not wait for them.
    assert driver.most_at_once == 2
