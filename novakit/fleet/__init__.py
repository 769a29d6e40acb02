"""The fleet: compute hosts as the control plane knows them.

``hosts``: registration from a driver's report, services (enabled, disabled, forced down),
liveness, maintenance and the host mappings to cells. ``importer``: guests found on a host that
novakit did not create, recorded as servers with claims (brownfield import). ``aggregates``: host
aggregates and availability zones; ``traits``: a host's custom traits. The code that runs
on a host itself is ``novakit.host``.
"""
