"""RAMWeigher: free memory (MB). Positive multiplier spreads instances, negative stacks them."""

from __future__ import annotations

from novakit.scheduler.weights.base import BaseWeigher


class RAMWeigher(BaseWeigher):
    name = "RAMWeigher"
    multiplier_option = "ram_weight_multiplier"
    resource_class = "MEMORY_MB"
