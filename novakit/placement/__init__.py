"""Placement: resource providers, their inventories, traits and aggregates, and the allocations
consumers hold against them.

Split by noun as OpenStack Placement is: ``providers``, ``inventories``, ``allocations``
(the compare-and-swap claims), ``candidates`` (the one-query SQL prefilter), ``traits``,
``aggregates`` (availability zones are aggregates). The functions re-exported here are the
interface the conductor, the compute registration and the scheduler use.
"""
