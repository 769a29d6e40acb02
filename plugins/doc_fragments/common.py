"""What every novakit controller-side module shares: the database and identity options, what it
needs, and the attributes (``attributes.py``).

``novakit.cloud.common`` is all of it; ``novakit.cloud.common.catalog`` adds O(state) for the
modules that keep one resource as the task describes it (``module_utils/catalog.py``, whose
``STATE_ARG`` it documents).
"""

from __future__ import annotations

from ansible_collections.novakit.cloud.plugins.doc_fragments.attributes import ATTRIBUTES

OPTIONS = r"""
options:
  db_url:
    description:
      - SQLAlchemy URL of the novakit database, for example
        C(postgresql+psycopg://user:pass@db.example.com/novakit).
      - Defaults to E(NOVAKIT_DB_URL), then the configuration file, then the
        embedded SQLite file under E(NOVAKIT_STATE_DIR) (C(~/.local/state/novakit)).
    type: str
  config:
    description: Path of a novakit TOML configuration file (default E(NOVAKIT_CONFIG)).
    type: path
  project:
    description:
      - Project the caller acts for. The caller's identity is the operator's to give (E(NOVAKIT_PROJECT),
        E(NOVAKIT_USER), E(NOVAKIT_ROLES), for instance from an AWX credential, over C([identity]) in the
        configuration; unset, a member of project C(default)).
      - O(project), O(user) and O(roles) are honoured for an admin; for anyone else only where they name
        the same identity or drop roles, unless the configuration sets C(identity.trust_given_identity).
    type: str
  user:
    description: User the caller acts as (see O(project)).
    type: str
  roles:
    description: Roles of the caller (see O(project)); C(admin) sees and acts on every project.
    type: list
    elements: str
  request_id:
    description:
      - Request id that ties this call to the audit trail. Defaults to the AWX job id or the
        ansible-runner ident when there is one, else a new id.
    type: str
"""

STATE = r"""
  state:
    description:
      - V(present) makes sure the resource exists as the task describes it; a second identical run
        finds it so and reports C(changed=false).
      - V(absent) makes sure it does not exist, deleting it if it does.
    type: str
    choices: [present, absent]
    default: present
"""

REQUIREMENTS = r"""
requirements:
  - python >= 3.11
  - novakit
"""


class ModuleDocFragment:
    DOCUMENTATION = OPTIONS + REQUIREMENTS + ATTRIBUTES
    CATALOG = OPTIONS + STATE + REQUIREMENTS + ATTRIBUTES
