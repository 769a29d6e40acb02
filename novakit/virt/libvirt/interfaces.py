"""A port's NIC added to a built guest and removed again (Nova's ``attach_interface`` /
``detach_interface`` of its libvirt driver).

The NIC is the typed ``GuestInterface`` a spawn gives the port (``GuestConfigBuilder.interfaces``,
with its network filter reference), serialised by ``config.py``; it goes in with
``attachDeviceFlags`` and out with ``detachDeviceFlags``, ``AFFECT_CONFIG`` always and
``AFFECT_LIVE`` on a running guest, so a running guest gets it now and keeps it across a
stop/start, and a stopped one gets it at its next start. A NIC is known by its MAC (a port's,
unique): attaching one already there, or detaching one that is not, does nothing. A live
detach returns before the guest lets the device go; it is waited for, so that the port is free
when the call returns.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from typing import Any

from novakit import exceptions
from novakit.virt.libvirt import config as vconfig

#: how long a live detach may take the guest (it must release the PCI device)
DETACH_TIMEOUT = 30.0


def has_mac(domain: Any, mac: str, flags: int) -> bool:
    """Whether the domain's definition (``flags``: its inactive or live XML) has a NIC of ``mac``."""
    root = ET.fromstring(domain.XMLDesc(flags))
    wanted = mac.lower()
    return any((m.get("address") or "").lower() == wanted for m in root.iterfind("./devices/interface/mac"))


def attach(libvirt: Any, domain: Any, nic: vconfig.GuestInterface, port_id: str) -> None:
    """Add ``nic`` to the guest: live and in its definition when it runs, else only there."""
    lv = libvirt
    assert nic.mac is not None  # a port's NIC always has the port's MAC
    if has_mac(domain, nic.mac, lv.VIR_DOMAIN_XML_INACTIVE):
        return  # attached already (a repeated request)
    flags = lv.VIR_DOMAIN_AFFECT_CONFIG
    if domain.isActive():
        flags |= lv.VIR_DOMAIN_AFFECT_LIVE
    try:
        domain.attachDeviceFlags(ET.tostring(nic.to_element(), encoding="unicode"), flags)
    except lv.libvirtError as exc:
        raise exceptions.ComputeError(
            reason=f"attaching port {port_id} ({nic.mac}): {exc.get_error_message()}"
        ) from None


def detach(libvirt: Any, domain: Any, nic: vconfig.GuestInterface, port_id: str) -> None:
    """Remove ``nic`` from the guest's definition and, when it runs, from the guest itself."""
    lv = libvirt
    assert nic.mac is not None
    xml = ET.tostring(nic.to_element(), encoding="unicode")
    for state, flag in (
        (lv.VIR_DOMAIN_XML_INACTIVE, lv.VIR_DOMAIN_AFFECT_CONFIG),
        (0, lv.VIR_DOMAIN_AFFECT_LIVE),
    ):
        if flag == lv.VIR_DOMAIN_AFFECT_LIVE and not domain.isActive():
            continue
        if not has_mac(domain, nic.mac, state):
            continue  # not there (idempotent)
        try:
            domain.detachDeviceFlags(xml, flag)
        except lv.libvirtError as exc:
            raise exceptions.ComputeError(
                reason=f"detaching port {port_id} ({nic.mac}): {exc.get_error_message()}"
            ) from None
        if flag == lv.VIR_DOMAIN_AFFECT_LIVE:
            _wait_gone(domain, nic.mac, port_id)


def _wait_gone(domain: Any, mac: str, port_id: str) -> None:
    deadline = time.monotonic() + DETACH_TIMEOUT
    while domain.isActive() and has_mac(domain, mac, 0):
        if time.monotonic() > deadline:
            raise exceptions.ComputeError(
                reason=f"the guest did not release port {port_id} ({mac}) within {DETACH_TIMEOUT:.0f} s"
            )
        time.sleep(0.2)
