"""``abort_live_migration`` of the drivers: libvirt's ``abortJob`` (its "no job" left alone, as
Nova's), and the fake driver's slow live migration stopped from another thread."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from novakit import exceptions
from novakit.virt.driver import load_driver
from novakit.virt.fake import FakeDriver
from tests.unit.virt.conftest import build_instance


class _Domain:
    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error
        self.aborted = 0

    def abortJob(self) -> None:  # noqa: N802 (libvirt's name)
        self.aborted += 1
        if self.error is not None:
            raise self.error


def _libvirt_error(lv: Any, code: int) -> BaseException:
    class Error(lv.libvirtError):
        def get_error_code(self) -> int:
            return code

        def get_error_message(self) -> str:
            return f"error {code}"

    return Error(f"error {code}")


def test_libvirt_aborts_the_guest_s_job_and_leaves_a_missing_one_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lv = pytest.importorskip("libvirt")
    drv: Any = load_driver("libvirt", "compute-1", {"uri": "test:///default"})
    instance = build_instance()
    monkeypatch.setattr(drv, "_lookup", lambda uuid: None)
    drv.abort_live_migration(instance)  # no guest here (the migration ended): nothing to do

    domain = _Domain()
    monkeypatch.setattr(drv, "_lookup", lambda uuid: type("G", (), {"domain": domain, "uuid": uuid})())
    drv.abort_live_migration(instance)
    assert domain.aborted == 1
    domain.error = _libvirt_error(lv, lv.VIR_ERR_OPERATION_INVALID)  # "no job is active"
    drv.abort_live_migration(instance)
    domain.error = _libvirt_error(lv, lv.VIR_ERR_INTERNAL_ERROR)
    with pytest.raises(exceptions.ComputeError, match="abort the live migration"):
        drv.abort_live_migration(instance)


def test_the_fake_s_slow_live_migration_stops_when_aborted(tmp_path: Path) -> None:
    options = {"state_dir": str(tmp_path), "failure_mode": "slow_live_migration", "live_migration_delay": 20}
    drv = FakeDriver("compute-1", options)
    drv.init_host()
    instance = build_instance()
    drv.spawn(instance)
    drv.abort_live_migration(instance)  # no job yet: nothing, and the next job is not aborted by it
    failed: list[exceptions.ComputeError] = []

    def migrate() -> None:
        try:
            drv.live_migration(instance, "compute-2", {})
        except exceptions.ComputeError as exc:
            failed.append(exc)

    worker = threading.Thread(target=migrate)
    started = time.monotonic()
    worker.start()
    while not drv.live_migration_running(instance.uuid):
        assert time.monotonic() - started < 10
        time.sleep(0.01)
    FakeDriver("compute-1", options).abort_live_migration(instance)  # another driver: another process
    worker.join(10)
    assert not worker.is_alive() and time.monotonic() - started < 10
    assert len(failed) == 1 and "aborted" in failed[0].format_message()
    assert drv.list_instances() == {instance.uuid: 1}  # still running here
    assert not drv.live_migration_running(instance.uuid)
