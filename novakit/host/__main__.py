"""``python -m novakit.host``: one compute request in on stdin, its result out on stdout.

This is what the SSH transport runs on a compute host, Nova's nova-compute
reduced to one call: the host needs novakit and its hypervisor, never the
database or its credentials, so this module must not import ``novakit.db``
(``tests/unit/test_imports.py`` checks it in a fresh interpreter).

The driver comes from the request (``ComputeRequest.driver``, filled in by the
controller from the host's registration) or, when the request carries none,
from ``NOVAKIT_COMPUTE_DRIVER`` on the host (the same JSON), else the fake
driver. stdout carries nothing but the result, so a caller can parse it whole;
logs go to stderr. Exit status: 0 with a result (per-instance failures are in
the result), 2 when the input is not a request, 1 when the driver cannot start
(a result with ``error`` is still written, so the caller learns why).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any, TextIO

from pydantic import ValidationError

from novakit.host.manager import ComputeManager
from novakit.host.messages import ComputeRequest, ComputeResult
from novakit.virt.driver import load_driver

ENV_DRIVER = "NOVAKIT_COMPUTE_DRIVER"


def driver_info_for(request: ComputeRequest) -> dict[str, Any]:
    """The request's driver description, else the host's own, else the fake driver."""
    if request.driver:
        return dict(request.driver)
    raw = os.environ.get(ENV_DRIVER)
    if raw:
        info: dict[str, Any] = json.loads(raw)
        return info
    return {"driver": "fake", "options": {}}


def run(request: ComputeRequest) -> tuple[ComputeResult, int]:
    """Build the driver and handle one request; a driver that cannot start is a result too."""
    try:
        info = driver_info_for(request)
        driver = load_driver(str(info.get("driver", "fake")), request.host, info.get("options") or {})
        manager = ComputeManager(request.host, driver, int(info.get("max_concurrent_builds", 10)))
    except Exception as exc:
        from novakit.compute.rpc import unusable

        return unusable(request, exc, request.host), 1
    return manager.handle(request), 0


def main(stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> int:
    logging.basicConfig(level=os.environ.get("NOVAKIT_LOG_LEVEL", "WARNING"), stream=sys.stderr)
    try:
        request = ComputeRequest.model_validate_json(stdin.read())
    except ValidationError as exc:
        # The input may hold user data: name the fields, never echo the values.
        fields = sorted({".".join(str(p) for p in e["loc"]) or "(document)" for e in exc.errors()})
        sys.stderr.write(f"novakit.compute: not a compute request (bad fields: {', '.join(fields)})\n")
        return 2
    result, status = run(request)
    stdout.write(result.model_dump_json() + "\n")
    stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
