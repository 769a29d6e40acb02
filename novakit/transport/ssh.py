"""The compute side on another machine, over SSH with Fabric.

The controller connects as the host's ``ssh`` settings say, runs
``<python> -m novakit.host`` there, writes the request (secrets included:
the channel is encrypted and the far side needs them) to its stdin, closes
stdin, and reads one ``ComputeResult`` from stdout. Nothing else crosses, and
the host never needs database credentials, as nova-compute reaches the
database only through the conductor.

Whatever goes wrong on the way (no route, refused, authentication, the command
failing, output that is not a result) becomes a result whose ``error`` and
per-instance faults say ``HypervisorUnavailable`` on this host and ask for a
reschedule: the conductor cannot tell a broken SSH link from a broken host,
and another host may well succeed.

``driver_info``::

    {"driver": "fake", "options": {...}, "transport": "ssh",
     "ssh": {"host": "127.0.0.1", "port": 22, "user": "nova", "key_filename": "~/.ssh/id_ed25519",
             "python": "python3", "connect_timeout": 10, "command_timeout": 3600,
             "known_hosts": "/etc/novakit/known_hosts"}}

Without ``known_hosts`` Fabric accepts a host key it has not seen (its
default); give a known_hosts file to refuse unknown keys.
"""

from __future__ import annotations

import json
import shlex
import socket
from typing import Any

from novakit import exceptions
from novakit.host.faults import unusable
from novakit.host.messages import ComputeRequest, ComputeResult

#: stderr kept in a fault: enough to see the error, short enough for a fault's details
_STDERR_TAIL = 2000


class SSHTransport:
    def __init__(self, host: str, driver_info: dict[str, Any], max_concurrent_builds: int = 10) -> None:
        self.host = host
        self.driver_info = driver_info
        ssh = dict(driver_info.get("ssh") or {})
        self.address = str(ssh.get("host") or host)
        self.port = int(ssh.get("port", 22))
        self.user = ssh.get("user")
        self.key_filename = ssh.get("key_filename")
        self.python = str(ssh.get("python") or "python3")
        self.connect_timeout = float(ssh.get("connect_timeout", 10))
        self.command_timeout = float(ssh.get("command_timeout", 3600))
        self.known_hosts = ssh.get("known_hosts")
        self.max_concurrent_builds = int(driver_info.get("max_concurrent_builds", max_concurrent_builds))

    def command(self) -> str:
        return f"{shlex.quote(self.python)} -m novakit.host"

    def call(self, request: ComputeRequest) -> ComputeResult:
        wire = request.model_copy(
            update={
                "driver": {
                    "driver": self.driver_info.get("driver", "fake"),
                    "options": dict(self.driver_info.get("options") or {}),
                    "max_concurrent_builds": self.max_concurrent_builds,
                }
            }
        )
        try:
            status, out, err = self._run(json.dumps(wire.to_wire()))
        except Exception as exc:
            return self._unavailable(request, _describe(exc))
        try:
            result = ComputeResult.model_validate_json(out)
        except ValueError:
            tail = err.strip()[-_STDERR_TAIL:] or out.strip()[:200] or "no output"
            return self._unavailable(
                request, f"`{self.command()}` exited with status {status} without a result: {tail}"
            )
        # A result whose identity is not ours is as good as garbage.
        if result.request_id != request.request_id or result.host != request.host:
            return self._unavailable(request, "the host answered for another request")
        return result

    def _unavailable(self, request: ComputeRequest, reason: str) -> ComputeResult:
        where = f"{self.user + '@' if self.user else ''}{self.address}:{self.port}"
        exc = exceptions.HypervisorUnavailable(host=self.host, reason=f"ssh {where}: {reason}")
        return unusable(request, exc, self.host)

    def _run(self, payload: str) -> tuple[int, str, str]:
        """Run the compute command once; stdin gets ``payload`` and then end-of-file.

        Fabric opens and authenticates the connection; the channel is driven
        with paramiko directly because the request must be followed by EOF,
        which is what tells the far side the request is complete.
        """
        from fabric import Connection
        from paramiko import RejectPolicy

        connect_kwargs: dict[str, Any] = {"allow_agent": False, "look_for_keys": self.key_filename is None}
        if self.key_filename:
            connect_kwargs["key_filename"] = str(self.key_filename)
        conn = Connection(
            self.address,
            user=self.user,
            port=self.port,
            connect_timeout=self.connect_timeout,
            connect_kwargs=connect_kwargs,
        )
        if self.known_hosts:
            conn.client.load_host_keys(str(self.known_hosts))
            conn.client.set_missing_host_key_policy(RejectPolicy())
        try:
            conn.open()
            assert conn.client is not None
            stdin, stdout, stderr = conn.client.exec_command(self.command(), timeout=self.command_timeout)
            stdin.write(payload.encode())
            stdin.flush()
            stdin.channel.shutdown_write()
            out = stdout.read().decode(errors="replace")
            err = stderr.read().decode(errors="replace")
            status = stdout.channel.recv_exit_status()
        finally:
            conn.close()
        return status, out, err


def _describe(exc: BaseException) -> str:
    """One line for a fault; never the request, which holds user data."""
    from paramiko.ssh_exception import AuthenticationException, NoValidConnectionsError, SSHException

    if isinstance(exc, NoValidConnectionsError):
        return "cannot connect (" + "; ".join(str(e) for e in exc.errors.values()) + ")"
    if isinstance(exc, AuthenticationException):
        return f"authentication failed ({exc})"
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(exc, SSHException | OSError):
        return f"{exc.__class__.__name__}: {exc}"
    return exc.__class__.__name__
