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
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - novakit.cloud.common
  - novakit.cloud.cloud
  - novakit.cloud.catalog
  - novakit.cloud.catalog.name
attributes:
  check_mode:
    support: full
    details:
      - The task is one database transaction, rolled back in check mode, so check mode refuses
        what a real run refuses, with the same message, and writes nothing; and a real run
        refused half way writes nothing either.
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

from ansible_collections.novakit.cloud.plugins.module_utils.catalog import CatalogModule  # noqa: E402


class HostAggregateModule(CatalogModule):
    takes_cloud = True
    resource = "aggregate"
    argument_spec = {
        "availability_zone": {"type": "str"},
        "metadata": {"type": "dict"},
        "hosts": {"type": "list", "elements": "str"},
        "purge_hosts": {"type": "bool", "default": True},
    }

    def run(self):
        from novakit.fleet import aggregates

        p = self.params
        metadata = None if p["metadata"] is None else {str(k): str(v) for k, v in p["metadata"].items()}
        done = self.call(
            aggregates.apply,
            p["name"],
            present=p["state"] == "present",
            availability_zone=p["availability_zone"],
            metadata=metadata,
            hosts=p["hosts"],
            purge_hosts=p["purge_hosts"],
            dry_run=self.check_mode,
        )
        before, after = done["before"], done["after"]
        # A new aggregate is planned in check mode, not made: it has no id to return yet.
        shown = None if after is None or (self.check_mode and before is None) else after
        return self.result(done["changed"], before, after, shown)


def main():
    HostAggregateModule()()


if __name__ == "__main__":
    main()
