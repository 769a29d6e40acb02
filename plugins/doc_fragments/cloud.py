"""The ``cloud`` option of the modules that go through ``novakit serve`` (``novakit.client``)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  cloud:
    description:
      - A cloud of C(clouds.yaml) (as the C(openstack) command's C(--os-cloud); M(novakit.cloud.server) and
        the others read it with openstacksdk, so E(OS_CLIENT_CONFIG_FILE) and the usual places apply). The
        task then calls C(novakit serve) with that cloud's credentials (a user's password, or an
        application credential, as an AWX OpenStack credential gives one) instead of opening the
        database, which it needs no URL of; the service holds it, and its token says who the caller is.
      - Without it, E(OS_CLOUD) is taken unless a database URL is given (O(db_url), E(NOVAKIT_DB_URL)),
        which keeps the operator path.
      - Not with O(project), O(user) or O(roles) - the cloud's credentials are the identity.
      - Through a cloud the service builds and acts; where a module waits (C(wait)), a state that takes
        several actions (a new server to be stopped) waits for each before starting the next, whatever
        C(wait) says.
    type: str
    version_added: 0.3.0
"""
