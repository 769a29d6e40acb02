"""What every novakit controller-side module shares: its authors, its requirements, the database and
identity options (``module_utils/novakit.py``'s ``COMMON_ARGS``), and what it supports of Ansible's
action attributes.

The attributes are used with C(ansible.builtin.action_common_attributes), which describes each
attribute; a module states only where it differs from these (its own C(attributes) win over a
fragment's). The compute module, which runs on the hosts without the database, states its own.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
author: novakit developers (@novakit)
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
attributes:
  check_mode:
    support: full
    details:
      - Check mode runs the library's dry run of the same call - the checks of a real run, and for a
        new server the scheduler - and writes nothing; it refuses what a real run refuses, with the
        same message.
  diff_mode:
    support: full
  platform:
    platforms: posix
requirements:
  - python >= 3.11
  - novakit
"""
