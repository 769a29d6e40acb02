"""The filter scheduler: placement's SQL prefilter, then filters and weighers over the candidates.

``manager.SchedulerManager.select_destinations`` is the entry point; ``request_spec``
holds what is asked, ``host_state`` what each candidate host looks like.
"""

# The registries check the configuration's filter and weigher names for ``load_config``
# (``novakit.config.register_check``); loading either part of the scheduler loads both.
from novakit.scheduler import filters, weights  # noqa: E402,F401
