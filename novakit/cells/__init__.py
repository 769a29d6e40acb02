"""Cells v2, as Nova has them: one API database, one database per cell.

The API database holds what is global: flavors, images, quotas, request specs, server
groups, placement, compute hosts, and the mappings (``models.CellMapping``,
``HostMapping``, ``InstanceMapping``). Each cell's database holds its instances and their
audit trail (``models.CELL_TABLES``). cell0 holds the servers that could not be
scheduled. The embedded default (and a database made before cells) is the API
database and cell1 at once, with cell0 in a file beside it: nothing to configure.

- ``registry``: the cells, their databases, which cell an instance or host is in;
- ``mappings``: the mapping rows, written with the records they map;
- ``moves``: a server scheduled to a host of another database is moved into its cell
  (Nova's super conductor creates it there), one that could not be scheduled into cell0;
- ``scatter``: a question asked of every cell, the answers merged, a down cell named.

Where a server is while it is not scheduled yet: in the API database's own instance tables
(Nova keeps a build request there), with its mapping's cell unset.
"""
