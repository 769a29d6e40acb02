#!/usr/bin/python
"""The novakit database's schema, migrated to this novakit's revision."""

from __future__ import annotations

DOCUMENTATION = r"""
module: db
short_description: Create or upgrade the novakit database schema
description:
  - Migrates the database named by O(db_url) (or E(NOVAKIT_DB_URL), the configuration file, the
    embedded default) to the newest schema revision this novakit knows, as C(novakit db upgrade)
    does. Run it once against a new shared PostgreSQL database before the other playbooks, and
    again after upgrading novakit; a database that is already there is left unchanged.
  - The embedded SQLite default migrates itself on first use and needs no such step.
  - Every cell's database is upgraded too, and cell0's is made beside the API database
    (PostgreSQL C(<name>_cell0)). The module fails, saying so, when cell0's database cannot be
    made (the database user needs CREATEDB, or the database created by hand and owned by it).
    Check mode fails the same way.
  - Needs the C(admin) role (a schema change is the operator's).
version_added: 0.1.0
extends_documentation_fragment: [ansible.builtin.action_common_attributes, novakit.cloud.common]
options: {}
"""

EXAMPLES = r"""
- name: Create or upgrade the schema of the shared database
  novakit.cloud.db:
    db_url: "{{ lookup('env', 'NOVAKIT_DB_URL') }}"
"""

RETURN = r"""
revision_before:
  description: The schema revision the database had (null for an empty database).
  returned: always
  type: str
  sample: "0004"
revision:
  description: The revision it has now (in check mode, the one it would have).
  returned: always
  type: str
  sample: "0005"
cells:
  description: Each cell's database revision afterwards (not in check mode).
  returned: success
  type: dict
  sample: {"cell0": "c0001", "cell1": "(the API database)"}
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


class DbModule(NovakitModule):
    argument_spec = {}

    def run(self):
        from novakit import exceptions, policy
        from novakit.cells.manage import upgrade_all
        from novakit.cells.registry import cell0_problem
        from novakit.db import migration
        from novakit.db.engine import Database

        self.refuse_cloud()
        policy.authorize(self.context(), "db:upgrade")
        conf = self.config()
        # Not opened as usual: the embedded default would migrate itself before being asked.
        db = Database(conf.database_url, auto_upgrade=False, create_dir=not conf.db_url)
        try:
            before, head = db.current_revision(), migration.head_revision()
            cells = {}
            if self.check_mode:
                problem = cell0_problem(db)
                if problem:
                    raise exceptions.InvalidCell(cell="cell0", reason=problem)
            else:
                cells = {k: v for k, v in upgrade_all(db).items() if k != "(api)"}
            after = head if self.check_mode else db.current_revision()
        finally:
            db.dispose()
        return self.with_diff(
            {"changed": before != head, "revision_before": before, "revision": after, "cells": cells},
            {"revision": before},
            {"revision": after},
        )


def main():
    DbModule()()


if __name__ == "__main__":
    main()
