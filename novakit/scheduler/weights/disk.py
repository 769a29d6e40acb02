"""DiskWeigher: free local disk (GB). Positive multiplier spreads, negative stacks."""

from __future__ import annotations

from novakit.scheduler.weights.base import BaseWeigher


class DiskWeigher(BaseWeigher):
    name = "DiskWeigher"
    multiplier_option = "disk_weight_multiplier"
    resource_class = "DISK_GB"
