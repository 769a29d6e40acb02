"""O(state) of the modules that keep one resource as the task describes it (``module_utils/catalog.py``).

Documented once, as ``catalog.STATE_ARG`` is specified once; the module's own description says
what "exists" means for its resource (a module may give O(state) a description of its own).
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
