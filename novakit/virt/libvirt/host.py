"""The connection to one libvirt daemon, opened lazily and reopened when it breaks."""

from __future__ import annotations

import contextlib
import threading
import urllib.parse
from types import ModuleType
from typing import Any

from novakit import exceptions

_LOCAL_HOSTS = {"", "localhost", "127.0.0.1", "::1", "[::1]"}


def import_libvirt() -> ModuleType:
    """libvirt-python, or a MissingDependency that says how to get it."""
    try:
        import libvirt
    except ImportError:
        raise exceptions.MissingDependency(
            feature="the libvirt driver",
            package="libvirt-python",
            hint="pip install 'novakit[libvirt]' (needs libvirt-dev and pkg-config)",
        ) from None
    # libvirt prints every error to stderr by default; novakit reports them as exceptions instead.
    libvirt.registerErrorHandler(_ignore_error, None)
    module: ModuleType = libvirt
    return module


def _ignore_error(_ctx: Any, _err: Any) -> None:
    return None


def is_session_uri(uri: str) -> bool:
    return urllib.parse.urlparse(uri).path.rstrip("/") == "/session"


#: libvirt transports that log in somewhere (libvirt's remote URI syntax: driver+transport://)
_LOGIN_TRANSPORTS = {"ssh", "libssh", "libssh2", "tcp", "tls", "ext"}


def is_remote_uri(uri: str) -> bool:
    """Whether the daemon may not see this process's files (so local paths mean nothing to it).

    True for another host, and for any transport that logs in (``qemu+ssh://``):
    even on 127.0.0.1 that daemon may run as another user, with another home,
    unable to read files made here. ``+unix`` and plain URIs are local.
    """
    parsed = urllib.parse.urlparse(uri)
    _, _, transport = parsed.scheme.partition("+")
    if transport in _LOGIN_TRANSPORTS:
        return True
    return parsed.hostname not in _LOCAL_HOSTS and parsed.hostname is not None


class Host:
    """One hypervisor connection, shared by the threads of a compute process (libvirt allows it)."""

    def __init__(self, host: str, uri: str) -> None:
        self.libvirt = import_libvirt()
        self.host = host
        self.uri = uri
        self._conn: Any = None
        self._lock = threading.Lock()

    def get_connection(self) -> Any:
        with self._lock:
            conn = self._conn
            if conn is not None:
                try:
                    if conn.isAlive():
                        return conn
                except self.libvirt.libvirtError:
                    pass
            try:
                self._conn = self.libvirt.open(self.uri)
            except self.libvirt.libvirtError as exc:
                raise exceptions.HypervisorUnavailable(
                    host=self.host, reason=f"cannot connect to {self.uri}: {exc.get_error_message()}"
                ) from None
            return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(self.libvirt.libvirtError):
                    self._conn.close()
                self._conn = None
