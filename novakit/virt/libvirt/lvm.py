"""Volumes as logical volumes: a libvirt ``logical`` pool on a volume group the host already has.

Set ``volume_group`` in the libvirt driver's options and a host's volumes (``volumes.VolumePool``)
are LVs of that volume group instead of files in the ``dir`` pool. The volume group is the
operator's: novakit finds it (``virConnectFindStoragePoolSources``, which runs LVM's ``pvs`` on the
host), then uses the logical pool libvirt already has on it, whatever its name, or defines one
(``volume_pool``, default ``novakit-volumes``: source name = the volume group, target ``/dev/<vg>``)
and starts it. It never builds a pool (``virStoragePoolBuild`` would run ``vgcreate`` on devices)
and never deletes or undefines one it did not define in the same call; a start that fails
undefines the pool this call defined, so a refused configuration leaves nothing on the host.

A volume group that is not on the host, a pool of that name that is not this volume group's
logical pool, or a pool that will not start: a ``ConfigError`` naming ``volume_group`` and the
host, at ``init_host`` and at any volume operation.

Every LV is ``raw`` (a block device holds no image format) and thick: its allocation is its
capacity, as libvirt makes a sparse snapshot LV when the allocation is less. No permissions are
written: libvirt's DAC driver gives the device to QEMU when a guest uses it, and a mode set on
a device node would expose the data to every local user.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from novakit import exceptions
from novakit.virt.libvirt.config import sub_element
from novakit.virt.libvirt.storage import RemoteStorage, pool_xml, volume_element

OPTION = "volume_group"
# LVM's rule for VG names (lvm(8), "VALID NAMES"); also keeps ``/dev/<vg>`` inside /dev.
_VG_NAME = re.compile(r"^(?!-)[A-Za-z0-9+_.-]{1,127}$")


def check_volume_group_name(name: str) -> str:
    """``name`` if LVM would accept it as a volume group's name, else a ConfigError."""
    if not _VG_NAME.match(name) or name in (".", ".."):
        raise exceptions.ConfigError(
            option=OPTION,
            reason=(
                f"{name!r} is not a volume group name: letters, digits and + _ . - only, "
                "not starting with -, at most 127 characters"
            ),
        )
    return name


@dataclass
class LogicalPoolConfig:
    """A ``logical`` pool: the LVs of one existing volume group, under ``/dev/<vg>``."""

    name: str
    volume_group: str

    @property
    def path(self) -> str:
        return f"/dev/{self.volume_group}"

    def to_xml(self) -> str:
        source = ET.Element("source")
        sub_element(source, "name", self.volume_group)
        sub_element(source, "format", type="lvm2")
        return pool_xml("logical", self.name, self.path, source)


@dataclass
class LogicalVolumeConfig:
    """One thick LV of ``capacity`` bytes (see the module docstring for what is left out)."""

    name: str
    capacity: int

    def to_xml(self) -> str:
        # Thick: all of it allocated up front.
        vol = volume_element("block", self.name, self.capacity, allocation=self.capacity)
        return ET.tostring(vol, encoding="unicode")


def pool_source(pool_xml: str) -> tuple[str, str | None]:
    """(pool type, source name) of a pool's definition: ``("logical", vg)`` for an LVM pool."""
    root = ET.fromstring(pool_xml)
    return root.get("type", ""), root.findtext("source/name")


def volume_group_names(sources_xml: str) -> list[str]:
    """The volume groups in ``virConnectFindStoragePoolSources("logical")``'s answer."""
    return sorted({name for s in ET.fromstring(sources_xml).iter("source") if (name := s.findtext("name"))})


class LogicalStorage(RemoteStorage):
    """The volume pool on ``volume_group``: the storage calls of ``RemoteStorage`` on an LVM pool.

    Only ``pool`` differs (found or defined, started, never built); volume look-ups, uploads
    and deletes are the same libvirt calls on any pool.
    """

    def __init__(
        self,
        libvirt: Any,
        get_connection: Callable[[], Any],
        pool_name: str,
        volume_group: str,
        host: str,
        lock_dir: Path,
    ) -> None:
        self.volume_group = check_volume_group_name(volume_group)
        self.host = host
        super().__init__(libvirt, get_connection, pool_name, f"/dev/{volume_group}", lock_dir)
        self._checked = False

    def _refused(self, why: str) -> exceptions.ConfigError:
        return exceptions.ConfigError(option=OPTION, reason=why)

    def pool(self) -> Any:
        lv = self.libvirt
        conn = self._conn()
        pool = self._existing(conn)
        defined_here = False
        if pool is None:
            self._check_volume_group(conn)
            try:
                config = LogicalPoolConfig(self.pool_name, self.volume_group)
                pool = conn.storagePoolDefineXML(config.to_xml(), 0)
                defined_here = True
            except lv.libvirtError:
                # Defined meanwhile by another process of this host; else the define's error stands.
                pool = self._existing(conn)
                if pool is None:
                    raise
        if not pool.isActive():
            try:
                pool.create(0)  # vgchange -ay: the LVs appear under /dev/<vg>
            except lv.libvirtError as exc:
                if not pool.isActive():  # unless someone else started it meanwhile
                    why = (
                        f"volume group {self.volume_group} on host {self.host} cannot be used: libvirt "
                        f"could not start its pool {self.pool_name}: {exc.get_error_message().strip()}"
                    )
                    if defined_here:
                        try:
                            pool.undefine()
                        except lv.libvirtError as stuck:
                            why += f" (its definition, made just now, stays: {stuck.get_error_message()})"
                    raise self._refused(why) from None
        if defined_here:
            pool.setAutostart(1)
        return pool

    def _existing(self, conn: Any) -> Any | None:
        """The pool named ``pool_name`` if it is this volume group's logical pool, else another
        logical pool on the volume group (libvirt allows one per source), else None."""
        lv = self.libvirt
        try:
            pool = conn.storagePoolLookupByName(self.pool_name)
        except lv.libvirtError as exc:
            if exc.get_error_code() != lv.VIR_ERR_NO_STORAGE_POOL:
                raise
        else:
            if not self._checked:
                kind, source = pool_source(pool.XMLDesc(0))
                if (kind, source) != ("logical", self.volume_group):
                    raise self._refused(
                        f"storage pool {self.pool_name} on host {self.host} is a {kind} pool"
                        + (f" of {source}" if source else "")
                        + f", not the logical pool of volume group {self.volume_group}; "
                        "name another pool with volume_pool"
                    )
                self._checked = True
            return pool
        for other in conn.listAllStoragePools(lv.VIR_CONNECT_LIST_STORAGE_POOLS_LOGICAL):
            if pool_source(other.XMLDesc(0)) == ("logical", self.volume_group):
                self.pool_name = str(other.name())
                self._checked = True
                return other
        return None

    def _check_volume_group(self, conn: Any) -> None:
        lv = self.libvirt
        missing = f"volume group {self.volume_group} not found on host {self.host}"
        try:
            found = volume_group_names(conn.findStoragePoolSources("logical", None, 0))
        except lv.libvirtError as exc:
            raise self._refused(
                f"{missing}: its volume groups cannot be listed ({exc.get_error_message().strip()}); "
                "LVM (lvm2) must be installed there, or volume_group left unset"
            ) from None
        if self.volume_group not in found:
            raise self._refused(
                f"{missing} (it has {', '.join(found) or 'none'}); "
                "novakit uses an existing volume group and never creates one"
            )
