"""Moving servers between hosts: the records of a move and emptying a host.

``migrations`` keeps a move's records (Nova's ``migrations`` table); ``drain`` empties a host.
Each move type itself (resize, cold and live migration, evacuation, snapshot, shelve) is one
flow of the conductor (``novakit.conductor.flows``), named by its row of the state table
(``novakit.compute.states``).
"""
