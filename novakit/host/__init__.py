"""The host side: what runs on a compute host, Nova's nova-compute.

``messages`` is the JSON contract between the controller and a host (``ComputeRequest``,
``ComputeResult`` and the specs they carry), ``manager`` runs a request on the host's driver,
``faults`` turns a failure into the result's fault, ``power`` is the guest's power state, and
``python -m novakit.host`` is the entry point a transport runs on a host (one request on stdin,
its result on stdout). Nothing here opens the database; the virt drivers and the transports
depend on these modules, not on the controller's state table.
"""
