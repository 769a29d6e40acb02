"""The compute side in the controller's own process (direct mode, fake hosts, libvirt URIs)."""

from __future__ import annotations

import os
import threading
from typing import Any

from novakit.host.faults import unusable
from novakit.host.manager import ComputeManager
from novakit.host.messages import ComputeRequest, ComputeResult
from novakit.virt.driver import load_driver

_MANAGERS: dict[tuple[str, str, str | None], ComputeManager] = {}
_LOCK = threading.Lock()


class LocalTransport:
    def __init__(self, host: str, driver_info: dict[str, Any], max_concurrent_builds: int = 10) -> None:
        self.host = host
        self.driver_info = driver_info
        self.max_concurrent_builds = max_concurrent_builds

    def _manager(self) -> ComputeManager:
        # One manager per host and driver in a process, so that the host's
        # max_concurrent_builds holds across concurrent calls. The fake driver's state directory,
        # unless its options name one, comes from the environment when the driver is made: a
        # process whose environment points elsewhere later (tests, embedded callers) gets another.
        key = (self.host, repr(sorted(self.driver_info.items())), os.environ.get("NOVAKIT_FAKE_STATE_DIR"))
        with _LOCK:
            mgr = _MANAGERS.get(key)
            if mgr is None:
                driver = load_driver(
                    self.driver_info.get("driver", "fake"), self.host, self.driver_info.get("options") or {}
                )
                mgr = ComputeManager(self.host, driver, self.max_concurrent_builds)
                _MANAGERS[key] = mgr
            return mgr

    def call(self, request: ComputeRequest) -> ComputeResult:
        try:
            manager = self._manager()
        except Exception as exc:  # the driver cannot even start: the host is unusable
            return unusable(request, exc, self.host)
        return manager.handle(request)
