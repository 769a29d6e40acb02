"""ImageLocalityWeigher: 1 when the host's image cache already holds the image, else 0.

Hosts report their cached images when they register and after each build
(``compute_nodes.cached_images``). A positive multiplier prefers warm caches
(no copy of the image before the boot); a negative one would avoid them.
"""

from __future__ import annotations

from novakit.scheduler.host_state import HostState
from novakit.scheduler.resolved import ResolvedSpec
from novakit.scheduler.weights.base import BaseWeigher


class ImageLocalityWeigher(BaseWeigher):
    name = "ImageLocalityWeigher"
    multiplier_option = "image_locality_weight_multiplier"

    def weigh(self, host: HostState, spec: ResolvedSpec) -> float:
        return 1.0 if spec.request.image.id in host.cached_images else 0.0
