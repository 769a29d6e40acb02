"""Servers recorded in the novakit database, as Ansible hosts."""

from __future__ import annotations

DOCUMENTATION = r"""
name: novakit
short_description: novakit servers as inventory hosts
description:
  - Reads the servers from the novakit database and makes each one a host, reachable at its first
    address (C(ansible_host) is the first fixed IP of its ports when it has ports, so a play right
    after the boot reaches it), with its uuid, status, compute host, flavor, image, availability
    zone, server groups and metadata as C(novakit_*) variables.
  - Groups them by compute host (C(novakit_host_<host>)), the availability zone they were placed in
    (C(novakit_az_<zone>); a server on no host, never placed or shelved offloaded, is in none),
    status (C(novakit_status_<status>)) and server group (C(novakit_group_<name>)); C(compose),
    C(groups) and C(keyed_groups) add more.
  - The inventory file's name must end in C(novakit.yml) or C(novakit.yaml).
version_added: 0.1.0
author: novakit developers (@novakit)
extends_documentation_fragment: [constructed]
options:
  plugin:
    description: The name of this plugin; it makes the file a novakit inventory.
    type: str
    required: true
    choices: [novakit.cloud.novakit]
  db_url:
    description: SQLAlchemy URL of the database (default E(NOVAKIT_DB_URL), the configuration file, the embedded SQLite file).
    type: str
  config:
    description: Path of a novakit TOML configuration file (default E(NOVAKIT_CONFIG)).
    type: path
  project:
    description: Only this project's servers (default every project).
    type: str
  statuses:
    description: Only servers with one of these statuses (V(ACTIVE), V(SHUTOFF), V(ERROR)...); default all.
    type: list
    elements: str
    default: []
requirements:
  - novakit
"""

EXAMPLES = r"""
# inventory/servers.novakit.yml
plugin: novakit.cloud.novakit
statuses: [ACTIVE]
keyed_groups:
  - key: novakit_flavor
    prefix: flavor
compose:
  ansible_user: "'debian'"
"""

import re  # noqa: E402
from collections import Counter  # noqa: E402

from ansible.errors import AnsibleParserError  # noqa: E402
from ansible.plugins.inventory import BaseInventoryPlugin, Constructable  # noqa: E402


def _group_name(prefix, value):
    return f"{prefix}_{re.sub(r'[^A-Za-z0-9_]', '_', str(value))}"


class InventoryModule(BaseInventoryPlugin, Constructable):
    NAME = "novakit.cloud.novakit"

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith(("novakit.yml", "novakit.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        try:
            from novakit.compute.api import API
            from novakit.compute.server_groups import list_groups
            from novakit.config import load_config
            from novakit.context import RequestContext
            from novakit.db.engine import Database
        except ImportError as exc:
            raise AnsibleParserError(f"the novakit inventory needs the novakit library: {exc}") from exc
        conf = load_config(self.get_option("config"), db_url=self.get_option("db_url"))
        api, ctx = API(Database.from_config(conf), conf), RequestContext.admin()
        servers = api.list(ctx)
        groups: dict[str, list[str]] = {}
        for group in list_groups(api.db, ctx, all_projects=True):
            for uuid in group["members"]:
                groups.setdefault(uuid, []).append(group["name"])
        self._populate(servers, groups)

    def _populate(self, servers, server_groups):
        project, statuses = self.get_option("project"), [s.upper() for s in self.get_option("statuses")]
        servers = [
            s
            for s in servers
            if (not project or s["project_id"] == project) and (not statuses or s["status"] in statuses)
        ]
        # Counted once: a list's count() per server made 10,000 servers take 1.2 s here.
        names = Counter(s["name"] for s in servers)
        strict = self.get_option("strict")
        for server in servers:
            # Names are unique per project; across projects the uuid tells two apart.
            name = server["name"] if names[server["name"]] == 1 else f"{server['name']}_{server['id'][:8]}"
            self.inventory.add_host(name)
            hostvars = {
                "novakit_id": server["id"],
                "novakit_name": server["name"],
                "novakit_status": server["status"],
                "novakit_vm_state": server["vm_state"],
                "novakit_host": server["host"],
                "novakit_project": server["project_id"],
                "novakit_flavor": server["flavor"].get("name"),
                "novakit_image": server["image"],
                "novakit_availability_zone": server["availability_zone"],
                # With ports (novakit networks) these are their fixed IPs, known before the guest answers.
                "novakit_addresses": server["addresses"],
                "novakit_nics": server.get("nics", []),
                "novakit_metadata": server["metadata"],
                "novakit_server_groups": server_groups.get(server["id"], []),
            }
            if server["addresses"]:
                hostvars["ansible_host"] = server["addresses"][0]
            for key, value in hostvars.items():
                self.inventory.set_variable(name, key, value)
            wanted = [_group_name("novakit_status", server["status"].lower())]
            if server["host"]:
                wanted.append(_group_name("novakit_host", server["host"]))
            # The zone it was placed in (Nova's OS-EXT-AZ:availability_zone, kept when its host
            # later changes zone); a server on no host has at most the zone it asked for: no group.
            if server["host"] and server["availability_zone"]:
                wanted.append(_group_name("novakit_az", server["availability_zone"]))
            wanted += [_group_name("novakit_group", g) for g in hostvars["novakit_server_groups"]]
            for group in wanted:
                self.inventory.add_group(group)
                self.inventory.add_child(group, name)
            self._set_composite_vars(self.get_option("compose"), hostvars, name, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), hostvars, name, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, name, strict=strict)
