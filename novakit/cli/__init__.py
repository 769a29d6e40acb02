"""The ``novakit`` command: the library's functions, for people at a terminal.

Identity is the operator's: ``NOVAKIT_PROJECT``, ``NOVAKIT_USER``, ``NOVAKIT_ROLES`` over the
configuration's ``[identity]`` (default: a member of project ``default``, never an admin);
``--project/--user/--role`` are honoured for an admin (``novakit.context``). Every list and show
command takes ``-f table|json|yaml|value|csv`` and ``-c COLUMN`` (``novakit.cli.output``;
``--output json`` is kept). Errors are one line on stderr and exit status 1; a ``server create``
whose servers end in error prints them (with their faults) and exits with status 1 too.

One module per noun: ``hosts``, ``aggregates`` (aggregates, availability zones),
``cells``, ``catalog`` (flavors, images), ``keypairs``, ``servers``,
``groups`` (server groups), ``networks`` (networks, subnets, ports), ``security_groups`` (groups, rules, a
server's groups), ``moves`` (resize, migrate, evacuate,
shelve, snapshot, rescue, ``migration list``, ``host drain``), ``ops`` (db, states, heal, boot);
``base`` holds the app, its groups (one table) and the caller; ``output`` how every command prints
(``output.shows``/``output.lists`` for a command that returns records); ``verbs`` the ``show`` and
``delete`` every noun has, one line each.
"""
