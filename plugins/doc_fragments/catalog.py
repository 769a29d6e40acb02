"""O(state) and O(name) of the modules that keep one resource as the task describes it
(``module_utils/catalog.py``).

Documented once, as ``catalog.STATE_ARG`` and ``catalog.NAME_ARG`` are specified once: O(state) for
every such module (C(novakit.cloud.catalog)), O(name) for those that find their resource by name
(C(novakit.cloud.catalog.name)). The module's own description says what "exists" means for its
resource and what its names are unique within; a module may give either option a description of
its own, which wins over this one.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  state:
    description:
      - V(present) makes sure the resource exists as the task describes it; a second identical run
        finds it so and reports C(changed=false).
      - V(absent) makes sure it does not exist, deleting it if it does.
    type: str
    choices: [present, absent]
    default: present
"""

    NAME = r"""
options:
  name:
    description: The resource's name, by which an existing one is found (its id finds it too).
    type: str
    required: true
"""
