"""The connection to one libvirt daemon, opened lazily and reopened when it breaks."""

from __future__ import annotations

import contextlib
import threading
import urllib.parse
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType
from typing import Any

from novakit import exceptions
from novakit.virt.libvirt.config import NetworkDhcpHost, network_dhcp_range

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

    # --- networks -------------------------------------------------------------

    def network_names(self) -> list[str]:
        """The libvirt networks of this daemon, active or not (a guest's NIC names one)."""
        try:
            return sorted(str(net.name()) for net in self.get_connection().listAllNetworks(0))
        except self.libvirt.libvirtError as exc:
            raise exceptions.HypervisorUnavailable(host=self.host, reason=exc.get_error_message()) from None

    def add_dhcp_host(self, network: str, entry: NetworkDhcpHost) -> bool:
        """Make ``network``'s DHCP server give ``entry.ip`` to ``entry.mac``; False if it runs none.

        Idempotent: an identical entry is left as it is. An entry for the same MAC or IP
        is the leftover of an earlier port and is replaced; a name another MAC holds is
        left to it (two servers may share a hostname) and this entry goes without one.
        Runs on the network's definition and, when it is active, on the live dnsmasq.
        """
        for _attempt in range(3):
            net, flags, located = self._dhcp_section(network, entry.ip)
            if located is None:
                return False
            index, hosts = located
            if entry in hosts:
                return True
            stale = [old for old in hosts if old.mac == entry.mac or old.ip == entry.ip]
            for old in stale:
                self._update_dhcp(net, "DELETE", index, old, flags, missing_ok=True)
            if entry.name and any(h.name == entry.name for h in hosts if h not in stale):
                entry = NetworkDhcpHost(entry.mac, entry.ip)
            # Another process may add a clashing entry in between: read again and retry.
            if self._update_dhcp(net, "ADD_LAST", index, entry, flags, missing_ok=False, clash_ok=True):
                return True
        raise exceptions.ComputeError(
            reason=f"cannot add the DHCP host entry {entry.mac} -> {entry.ip} to network {network}: "
            "it keeps changing under us"
        )

    def remove_dhcp_hosts(self, network: str, mac: str) -> None:
        """Remove every DHCP host entry for ``mac`` from ``network``; a missing one is fine."""
        try:
            net = self.get_connection().networkLookupByName(network)
        except self.libvirt.libvirtError as exc:
            if exc.get_error_code() == self.libvirt.VIR_ERR_NO_NETWORK:
                return
            raise self._network_error(network, exc) from None
        for xml, flags in self._network_views(net, network):
            for index, ip_elem in enumerate(_ip_elements(xml)):
                for elem in ip_elem.findall("dhcp/host"):
                    old = NetworkDhcpHost.from_element(elem)
                    if old.mac == mac.lower():
                        self._update_dhcp(net, "DELETE", index, old, flags, missing_ok=True)

    def _dhcp_section(
        self, network: str, ip: str
    ) -> tuple[Any, int, tuple[int, list[NetworkDhcpHost]] | None]:
        try:
            net = self.get_connection().networkLookupByName(network)
        except self.libvirt.libvirtError as exc:
            raise self._network_error(network, exc) from None
        views = self._network_views(net, network)
        flags = 0
        for _xml, view_flags in views:
            flags |= view_flags
        # The definition decides (what survives a restart); a transient network has only its live state.
        return net, flags, network_dhcp_range(views[0][0], ip)

    def _network_views(self, net: Any, network: str) -> list[tuple[str, int]]:
        """The network's XML and the update flag for each state of it that exists (config, live)."""
        lv = self.libvirt
        try:
            views = []
            if net.isPersistent():
                views.append((net.XMLDesc(lv.VIR_NETWORK_XML_INACTIVE), lv.VIR_NETWORK_UPDATE_AFFECT_CONFIG))
            if net.isActive():
                views.append((net.XMLDesc(0), lv.VIR_NETWORK_UPDATE_AFFECT_LIVE))
        except lv.libvirtError as exc:
            raise self._network_error(network, exc) from None
        return views

    def _update_dhcp(
        self,
        net: Any,
        command: str,
        index: int,
        entry: NetworkDhcpHost,
        flags: int,
        *,
        missing_ok: bool,
        clash_ok: bool = False,
    ) -> bool:
        lv = self.libvirt
        try:
            net.update(
                getattr(lv, f"VIR_NETWORK_UPDATE_COMMAND_{command}"),
                lv.VIR_NETWORK_SECTION_IP_DHCP_HOST,
                index,
                entry.to_xml(),
                flags,
            )
        except lv.libvirtError as exc:
            # libvirt says "no such entry" / "there is an existing entry" as an invalid operation.
            if exc.get_error_code() == lv.VIR_ERR_OPERATION_INVALID and (missing_ok or clash_ok):
                return False
            raise self._network_error(str(net.name()), exc) from None
        return True

    def _network_error(self, network: str, exc: Any) -> exceptions.NovakitError:
        return exceptions.ComputeError(reason=f"libvirt network {network}: {exc.get_error_message()}")


def _ip_elements(network_xml: str) -> list[ET.Element]:
    return ET.fromstring(network_xml).findall("ip")


def bridge_names(sys_class_net: Path = Path("/sys/class/net")) -> list[str]:
    """The host's bridges (a NIC of type bridge names one): the links that have a ``bridge`` directory."""
    try:
        return sorted(p.name for p in sys_class_net.iterdir() if (p / "bridge").is_dir())
    except OSError:
        return []
