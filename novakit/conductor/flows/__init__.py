"""The conductor's moves, one flow object per move type, found by the name the state table's row
gives (``Transition.flow``): a move type is one file here (its ``run`` and ``dry_run``) and its
row in ``novakit.compute.states``. Recovery of an interrupted move is heal's (``novakit.heal``).

The records of a move are ``novakit.moves.migrations``'; emptying a host is ``novakit.moves.drain``.
"""
