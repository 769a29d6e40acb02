"""Neutron's share of a boot, small: networks, subnets, ports and their fixed IPs.

One noun per module: ``networks`` (a libvirt network or a bridge the hosts have),
``subnets`` (a CIDR, gateway, DNS servers and allocation pools), ``ipam`` (which
address a port gets: the first free one of the pools, atomic by the unique key
``(network_id, ip_address)``), ``ports`` (a MAC chosen once, fixed IPs, the server
and the host it is bound to; ``free_for_instance`` is Nova's ``deallocate_for_instance``) and
``allocation`` (what a boot asks for: Nova's ``allocate_for_instance``).

Everything lives in the API database, whichever cell a server is in, so every
session reaches these tables (``Database.target_cell`` routes only the instance
tables).
"""
