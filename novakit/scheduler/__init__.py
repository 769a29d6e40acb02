"""The filter scheduler: placement's SQL prefilter, then filters and weighers over the candidates.

``manager.SchedulerManager.select_destinations`` is the entry point; ``request_spec``
holds what is asked, ``host_state`` what each candidate host looks like.
"""

from __future__ import annotations

from novakit.config import Config
from novakit.scheduler import filters, weights


def check_config(conf: Config) -> None:
    """The configured filter and weigher names are known to the registries (ConfigError naming
    the unknown and the known ones). Run at start-up by the front door (``API``) and by
    ``load_config`` (each registry registers its check there when imported; loading either
    part of the scheduler loads both)."""
    filters.check_filter_names(conf)
    weights.check_weigher_names(conf)
