"""A port's NIC hot-plugged into a libvirt domain and out again (``virt.libvirt.interfaces``),
against a stand-in domain that keeps its live and persistent XML as libvirt does."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from novakit import exceptions
from novakit.host.messages import FixedIp, NetworkSpec
from novakit.virt.fake import FakeDriver
from novakit.virt.libvirt import interfaces
from novakit.virt.libvirt.config import GuestInterface
from tests.unit.virt.conftest import build_instance


class _Error(Exception):
    def get_error_message(self) -> str:
        return str(self)


class _Libvirt:
    VIR_DOMAIN_XML_INACTIVE = 2
    VIR_DOMAIN_AFFECT_LIVE = 1
    VIR_DOMAIN_AFFECT_CONFIG = 2
    libvirtError = _Error


class _Domain:
    """Two definitions (live, persistent), each a list of NIC XML strings."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self.live: list[str] = []
        self.config: list[str] = []
        self.calls: list[tuple[str, int]] = []
        self.refuse = False

    def isActive(self) -> bool:  # noqa: N802 (libvirt's name)
        return self.active

    def XMLDesc(self, flags: int) -> str:  # noqa: N802
        nics = self.config if flags & _Libvirt.VIR_DOMAIN_XML_INACTIVE else self.live
        return f"<domain><devices>{''.join(nics)}</devices></domain>"

    def attachDeviceFlags(self, xml: str, flags: int) -> None:  # noqa: N802
        if self.refuse:
            raise _Error("no free PCI slot")
        self.calls.append(("attach", flags))
        if flags & _Libvirt.VIR_DOMAIN_AFFECT_CONFIG:
            self.config.append(xml)
        if flags & _Libvirt.VIR_DOMAIN_AFFECT_LIVE:
            self.live.append(xml)

    def detachDeviceFlags(self, xml: str, flags: int) -> None:  # noqa: N802
        self.calls.append(("detach", flags))
        mac = ET.fromstring(xml).find("mac")
        assert mac is not None
        wanted = mac.get("address")
        for nics, flag in (
            (self.config, _Libvirt.VIR_DOMAIN_AFFECT_CONFIG),
            (self.live, _Libvirt.VIR_DOMAIN_AFFECT_LIVE),
        ):
            if flags & flag:
                nics[:] = [n for n in nics if f'address="{wanted}"' not in n]


NIC = GuestInterface(
    "network", "lan2", "fa:16:3e:00:00:09", filter="novakit-port-x", filter_params={"IP": "10.0.1.9"}
)


@pytest.mark.parametrize("running", [True, False])
def test_a_nic_goes_in_live_and_persistent_on_a_running_guest_only_persistent_on_a_stopped_one(
    running: bool,
) -> None:
    dom = _Domain(active=running)
    interfaces.attach(_Libvirt, dom, NIC, "port-x")
    flags = _Libvirt.VIR_DOMAIN_AFFECT_CONFIG | (_Libvirt.VIR_DOMAIN_AFFECT_LIVE if running else 0)
    assert dom.calls == [("attach", flags)]
    element = ET.fromstring(dom.config[0])
    assert element.get("type") == "network" and element.find("source").get("network") == "lan2"  # type: ignore[union-attr]
    assert element.find("filterref").get("filter") == "novakit-port-x"  # type: ignore[union-attr]
    assert interfaces.has_mac(dom, NIC.mac or "", _Libvirt.VIR_DOMAIN_XML_INACTIVE)
    # Again: already there, nothing done.
    interfaces.attach(_Libvirt, dom, NIC, "port-x")
    assert len(dom.calls) == 1
    interfaces.detach(_Libvirt, dom, NIC, "port-x")
    assert dom.config == [] and dom.live == []
    assert [c for c in dom.calls if c[0] == "detach"] == (
        [("detach", _Libvirt.VIR_DOMAIN_AFFECT_CONFIG), ("detach", _Libvirt.VIR_DOMAIN_AFFECT_LIVE)]
        if running
        else [("detach", _Libvirt.VIR_DOMAIN_AFFECT_CONFIG)]
    )
    # A NIC that is not there: nothing to do.
    interfaces.detach(_Libvirt, dom, NIC, "port-x")


def test_libvirt_refusing_the_nic_is_a_compute_error_naming_the_port() -> None:
    dom = _Domain(active=True)
    dom.refuse = True
    with pytest.raises(exceptions.ComputeError, match="port-x .*no free PCI slot"):
        interfaces.attach(_Libvirt, dom, NIC, "port-x")
    assert dom.config == [] and dom.live == []


def test_the_fake_driver_records_attached_nics_in_order(tmp_path: Path) -> None:
    driver = FakeDriver("h1", {"state_dir": str(tmp_path)})
    first = NetworkSpec(type="network", source="lan", mac="fa:16:3e:00:00:01", port_id="p1")
    instance = build_instance(networks=[first])
    driver.spawn(instance)
    extra: Any = NetworkSpec(
        type="network",
        source="lan2",
        mac="fa:16:3e:00:00:02",
        port_id="p2",
        fixed_ips=[FixedIp(address="10.0.1.9", cidr="10.0.1.0/24")],
    )
    driver.attach_interface(instance, extra)
    driver.attach_interface(instance, extra)  # idempotent
    assert driver.interfaces(instance.uuid) == ["p1", "p2"]
    assert "10.0.1.9" in driver.get_interface_addresses(instance)
    assert driver.get_console_output(instance).splitlines()[-1] == "NOVAKIT-NIC fa:16:3e:00:00:02 10.0.1.9/24"
    driver.detach_interface(instance, extra)
    driver.detach_interface(instance, extra)  # idempotent
    assert driver.interfaces(instance.uuid) == ["p1"]
    assert "10.0.1.9" not in driver.get_interface_addresses(instance)
    failing = FakeDriver("h1", {"state_dir": str(tmp_path), "failure_mode": "fail_interface_attach"})
    with pytest.raises(exceptions.ComputeError, match="interface attaches"):
        failing.attach_interface(instance, extra)
    assert driver.interfaces(instance.uuid) == ["p1"]
