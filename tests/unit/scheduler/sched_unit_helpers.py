"""Host states and request specs built in memory: filters and weighers are pure functions of them."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

from novakit.host.messages import FlavorSpec, ImageSpec
from novakit.scheduler.host_state import HostState
from novakit.scheduler.request_spec import RequestSpec
from novakit.scheduler.resolved import ResolvedSpec

NOW = dt.datetime(2026, 1, 1, 12, 0, 0)


def build_host(name: str = "h1", **overrides: Any) -> HostState:
    data: dict[str, Any] = {
        "host": name,
        "nodename": name,
        "provider_uuid": f"uuid-{name}",
        "provider_id": 1,
        "capacity": {"VCPU": 64, "MEMORY_MB": 65024, "DISK_GB": 1000},
        "used": {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0},
        "max_unit": {"VCPU": 16, "MEMORY_MB": 65536, "DISK_GB": 1000},
        "hypervisor_type": "kvm",
        "hypervisor_version": 8000000,
        "cpu_arch": "x86_64",
        "has_compute_node": True,
        "has_service": True,
        "last_seen_up": NOW - dt.timedelta(seconds=10),
    }
    data.update(overrides)
    return HostState(**data)


def build_spec(**overrides: Any) -> ResolvedSpec:
    flavor = overrides.pop("flavor", None) or FlavorSpec(name="m1.small", vcpus=2, memory_mb=2048, root_gb=20)
    image = overrides.pop("image", None) or ImageSpec(id="img-1", name="cirros")
    instance_hosts = overrides.pop("instance_hosts", {})
    batch_hosts = overrides.pop("batch_hosts", [])
    request = RequestSpec(
        request_id="req-1", project_id="p1", user_id="u1", flavor=flavor, image=image, **overrides
    )
    return ResolvedSpec(
        request=request,
        resources=request.resources(),
        instance_hosts=instance_hosts,
        batch_hosts=batch_hosts,
        # As the manager does: existing members' hosts, from the database and the spec.
        group_hosts=Counter(request.instance_group.hosts if request.instance_group else []),
        now=NOW,
    )
