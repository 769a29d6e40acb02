"""ImagePropertiesFilter: the image's architecture, hypervisor type, VM mode and hypervisor version.

Image properties read, with Nova's names: ``hw_architecture`` (or ``architecture``),
``img_hv_type`` (or ``hypervisor_type``), ``hw_vm_mode`` (or ``vm_mode``),
``img_hv_requested_version`` (e.g. ``>= 6000000``). A KVM host can also run
plain QEMU (TCG) guests, as Nova's libvirt driver reports.
"""

from __future__ import annotations

from novakit.scheduler.filters import extra_specs_ops
from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec

_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "i386": "i686", "x86": "i686"}
_HV_RUNS = {"kvm": {"kvm", "qemu"}}
_SUPPORTED_VM_MODES = {"hvm"}


def _prop(props: dict[str, str], *names: str) -> str | None:
    for name in names:
        if props.get(name):
            return props[name]
    return None


def _arch(value: str) -> str:
    value = value.lower()
    return _ARCH_ALIASES.get(value, value)


class ImagePropertiesFilter(BaseFilter):
    name = "ImagePropertiesFilter"

    def enabled_for(self, spec: ResolvedSpec) -> bool:
        props = spec.request.image.properties
        return any(
            _prop(props, n) is not None
            for n in (
                "hw_architecture",
                "architecture",
                "img_hv_type",
                "hypervisor_type",
                "hw_vm_mode",
                "vm_mode",
                "img_hv_requested_version",
            )
        )

    def host_passes(self, host: HostState, spec: ResolvedSpec) -> FilterResult:
        props = spec.request.image.properties
        arch = _prop(props, "hw_architecture", "architecture")
        if arch and _arch(arch) != _arch(host.cpu_arch or ""):
            return reject(f"image needs architecture {arch}, host is {host.cpu_arch or 'unknown'}")
        hv_type = _prop(props, "img_hv_type", "hypervisor_type")
        if hv_type:
            host_hv = (host.hypervisor_type or "").lower()
            if hv_type.lower() not in _HV_RUNS.get(host_hv, {host_hv}):
                return reject(
                    f"image needs hypervisor type {hv_type}, host runs {host.hypervisor_type or 'unknown'}"
                )
        vm_mode = _prop(props, "hw_vm_mode", "vm_mode")
        if vm_mode and vm_mode.lower() not in _SUPPORTED_VM_MODES:
            return reject(
                f"image needs VM mode {vm_mode}; hosts support {', '.join(sorted(_SUPPORTED_VM_MODES))}"
            )
        version = _prop(props, "img_hv_requested_version")
        if version and not extra_specs_ops.match(host.hypervisor_version, version):
            return reject(f"image needs hypervisor version {version}, host has {host.hypervisor_version}")
        return PASS
