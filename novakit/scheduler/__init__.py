"""The filter scheduler: placement's SQL prefilter, then filters and weighers over the candidates.

``manager.SchedulerManager.select_destinations`` is the entry point; ``request_spec``
holds what is asked, ``host_state`` what each candidate host looks like.
"""
