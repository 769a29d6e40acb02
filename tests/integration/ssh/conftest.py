"""An sshd of the tests' own on 127.0.0.1 (tests/services/sshd.sh), for the SSH transport.

The "remote" python is this venv's interpreter, so ``python -m novakit.host``
imports the novakit under test. Without openssh-server the tests skip, unless
``NOVAKIT_REQUIRE_REAL=1`` says they must run.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import need_real

SSHD_SH = Path(__file__).resolve().parents[2] / "services" / "sshd.sh"


@dataclass(frozen=True)
class Sshd:
    port: int
    key: str
    user: str

    def ssh_info(self, **extra: Any) -> dict[str, Any]:
        return {
            "host": "127.0.0.1",
            "port": self.port,
            "user": self.user,
            "key_filename": self.key,
            "python": sys.executable,
            "connect_timeout": 5,
            **extra,
        }


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    if not os.path.exists("/usr/sbin/sshd"):
        need_real("openssh-server is not installed")
    if os.geteuid() != 0:
        need_real("the test sshd logs in as root and must be started by root")
    area = tmp_path_factory.mktemp("sshd")
    out = subprocess.run([str(SSHD_SH), "start", str(area)], check=True, capture_output=True, text=True)
    port, key = out.stdout.split()
    try:
        yield Sshd(port=int(port), key=key, user="root")
    finally:
        subprocess.run([str(SSHD_SH), "stop", str(area)], check=False)


@pytest.fixture
def closed_port() -> int:
    """A loopback port that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
