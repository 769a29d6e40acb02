"""VolumeHostFilter: a server booted from an existing volume lands on the volume's host.

A volume lives in one host's storage pool (``novakit.volume``); the server's root disk is that
volume, so no other host could start it. Nova needs no such filter (Cinder volumes are reached
over the network); here it is what Cinder's availability zone is to Nova, and stricter.
"""

from __future__ import annotations

from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec


class VolumeHostFilter(BaseFilter):
    name = "VolumeHostFilter"

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        return spec.request.boot_volume is not None

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        volume = spec.request.boot_volume or {}
        if host.host == volume.get("host"):
            return PASS
        return reject(f"volume {volume.get('name')} lives on host {volume.get('host')}")
