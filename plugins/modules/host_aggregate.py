#!/usr/bin/python
"""Host aggregates and availability zones, declaratively (openstack.cloud's host_aggregate)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: host_aggregate
short_description: Create, update or delete a novakit host aggregate
description:
  - Makes sure a host aggregate exists with the given availability zone, metadata and hosts
    (O(state=present)) or does not (O(state=absent)), as C(openstack.cloud.host_aggregate) does
    for Nova.
  - An aggregate with O(availability_zone) set is that availability zone (C(novakit availability zone list));
    a host may be in several aggregates but in one zone only (refused with the reason).
  - The scheduler reads the same aggregates (Placement's C(member_of), the zone of C(server create),
    flavor extra specs C(aggregate_instance_extra_specs:KEY)).
  - O(state=absent) takes the aggregate's hosts out first, then deletes it (the library refuses
    to delete an aggregate that holds hosts).
  - Admin only. Runs on the controller.
version_added: 0.3.0
extends_documentation_fragment: [ansible.builtin.action_common_attributes, novakit.cloud.common, novakit.cloud.catalog, novakit.cloud.catalog.name]
attributes:
  check_mode:
    support: full
    details:
      - Check mode makes the real changes in a database transaction that is rolled back, so it
        refuses what a real run refuses, with the same message, and writes nothing. A real run
        does the same first, so that a refused task writes nothing either.
options:
  availability_zone:
    description:
      - The availability zone the aggregate makes (C(openstack aggregate create --zone)).
      - Left as it is when not given.
    type: str
  metadata:
    description:
      - The aggregate's metadata, exactly (keys not given are removed); values are strings.
      - Left as it is when not given.
    type: dict
  hosts:
    description:
      - Compute hosts of the aggregate (their names, as registered).
      - Left as they are when not given.
    type: list
    elements: str
  purge_hosts:
    description:
      - Whether hosts not in O(hosts) are taken out of the aggregate.
      - V(false) only adds the hosts given, so that several tasks may each add their own host.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Zone east, made of two hosts
  novakit.cloud.host_aggregate:
    name: east
    availability_zone: east
    hosts: [compute-1, compute-2]

- name: Hosts with SSDs, for flavors with aggregate_instance_extra_specs:ssd=true
  novakit.cloud.host_aggregate:
    name: fast-disks
    metadata:
      ssd: "true"
    hosts: ["{{ inventory_hostname }}"]
    purge_hosts: false
  delegate_to: localhost

- name: No more aggregate east
  novakit.cloud.host_aggregate:
    name: east
    state: absent
"""

RETURN = r"""
aggregate:
  description: The aggregate, when it exists (not in check mode for a new one).
  returned: when state is present
  type: dict
  contains:
    id:
      description: Its id.
      type: int
    uuid:
      description: Its uuid.
      type: str
    name:
      description: Its name.
      type: str
    availability_zone:
      description: The availability zone it makes, or null.
      type: str
    metadata:
      description: Its metadata.
      type: dict
    hosts:
      description: Its hosts, sorted.
      type: list
      elements: str
  sample: {id: 1, uuid: 0b8f..., name: east, availability_zone: east, metadata: {}, hosts: [compute-1, compute-2]}
"""

from ansible_collections.novakit.cloud.plugins.module_utils import aggregates as ops  # noqa: E402
from ansible_collections.novakit.cloud.plugins.module_utils.catalog import CatalogModule  # noqa: E402


class HostAggregateModule(CatalogModule):
    resource = "aggregate"
    argument_spec = {
        "availability_zone": {"type": "str"},
        "metadata": {"type": "dict"},
        "hosts": {"type": "list", "elements": "str"},
        "purge_hosts": {"type": "bool", "default": True},
    }

    _db = None

    def database(self):
        # One for the task; in check mode, one transaction rolled back at the task's end (``run``).
        return self._db if self._db is not None else super().database()

    def run(self):
        db = super().database()
        # The task's calls first in one transaction rolled back: check mode's answer, and a
        # real run refused on its third call writes nothing of its first two.
        planned = ops.dry_run(db, self._run_on)
        if self.check_mode:
            return planned
        self._db = db
        return super().run()

    def _run_on(self, db):
        self._db = db
        return super().run()

    def find(self):
        return ops.find(self.database(), self.context(), self.params["name"])

    def wanted(self):
        p = self.params
        metadata = None if p["metadata"] is None else {str(k): str(v) for k, v in p["metadata"].items()}
        return {"availability_zone": p["availability_zone"], "metadata": metadata}

    def hosts_after(self, now):
        given = self.params["hosts"]
        if given is None:
            return sorted(now)
        return sorted(set(given) if self.params["purge_hosts"] else set(now) | set(given))

    def compare(self, current, wanted):
        changes = {k: (current[k], v) for k, v in wanted.items() if v is not None and current[k] != v}
        if self.hosts_after(current["hosts"]) != current["hosts"]:
            changes["hosts"] = (current["hosts"], self.hosts_after(current["hosts"]))
        return changes

    def create(self, dry_run):
        db, ctx, w = self.database(), self.context(), self.wanted()
        made, created = ops.ensure(
            db, ctx, self.params["name"], availability_zone=w["availability_zone"], metadata=w["metadata"]
        )
        if not created:  # another task made it a moment ago: make it as this task wants
            made = self.update(made, self.compare(made, w), dry_run) or made
        for host in self.hosts_after([]):
            made = ops.add_host(db, ctx, made, host)
        return {k: v for k, v in made.items() if k != "uuid"} if dry_run else made

    def update(self, current, changes, dry_run):
        from novakit.fleet import aggregates

        db, ctx, ref, after = self.database(), self.context(), current["uuid"], current
        wanted_hosts = self.hosts_after(current["hosts"])
        # Out first, in last: a host leaving may be what keeps the zone from changing, and a
        # host joining may need the new zone.
        for host in set(current["hosts"]) - set(wanted_hosts):
            after = ops.remove_host(db, ctx, after, host)
        if "availability_zone" in changes:
            after = aggregates.update(db, ctx, ref, availability_zone=changes["availability_zone"][1])
        if "metadata" in changes:
            metadata = changes["metadata"][1]
            unset = tuple(sorted(set(current["metadata"]) - set(metadata)))
            after = aggregates.update(db, ctx, ref, metadata=metadata, unset_metadata=unset)
        for host in sorted(set(wanted_hosts) - set(after["hosts"])):
            after = ops.add_host(db, ctx, after, host)
        return after

    def delete(self, current, dry_run):
        from novakit.fleet import aggregates

        db, ctx, after = self.database(), self.context(), current
        for host in current["hosts"]:
            after = ops.remove_host(db, ctx, after, host)
        aggregates.delete(db, ctx, current["uuid"])


def main():
    HostAggregateModule()()


if __name__ == "__main__":
    main()
