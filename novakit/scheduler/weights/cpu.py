"""CPUWeigher: free vCPUs after overcommit. Positive multiplier spreads, negative stacks."""

from __future__ import annotations

from novakit.scheduler.weights.base import BaseWeigher


class CPUWeigher(BaseWeigher):
    name = "CPUWeigher"
    multiplier_option = "cpu_weight_multiplier"
    resource_class = "VCPU"
