#!/usr/bin/python
"""Register a compute host from what its driver reported."""

from __future__ import annotations

DOCUMENTATION = r"""
module: compute_node
short_description: Register a compute host with novakit
description:
  - Creates or refreshes a host's service (heartbeat), compute node and resource provider from
    what its driver reported (the C(compute) module's RV(novakit.cloud.compute#module:resources)),
    with reserved amounts and allocation ratios from configuration or from this task.
  - Runs on the controller (delegate it to C(localhost)); the compute host never needs the database.
version_added: 0.1.0
extends_documentation_fragment: [ansible.builtin.action_common_attributes, novakit.cloud.common]
options:
  host:
    description: The host's name (its inventory name; also its resource provider's name).
    type: str
    required: true
  resources:
    description: What the host's driver reported.
    type: dict
    required: true
  driver:
    description: How the controller reaches the host in direct mode (C(driver), C(options), C(transport)).
    type: dict
  cell:
    description:
      - The cell (name or uuid) the host's servers live in (Nova's cells v2; C(novakit cell list)).
      - Without it a host already mapped keeps its cell and a new one goes to the default cell
        (the only cell besides cell0, or C(cell1)). A host lives in one cell; naming another is refused.
    type: str
  cpu_allocation_ratio:
    description: vCPU overcommit ratio (default from configuration, 4.0).
    type: float
  ram_allocation_ratio:
    description: RAM overcommit ratio (default 1.0).
    type: float
  disk_allocation_ratio:
    description: Disk overcommit ratio (default 1.0).
    type: float
  reserved_host_memory_mb:
    description: RAM kept for the host itself (default 512).
    type: int
  reserved_host_cpus:
    description: vCPUs kept for the host itself (default 0).
    type: int
  reserved_host_disk_mb:
    description: Disk kept for the host itself (default 0).
    type: int
  availability_zone:
    description:
      - The availability zone the host is in - the aggregate named after the zone, made with that
        zone when missing (as C(openstack aggregate create --zone east east)); the host leaves any
        aggregate of another zone. Left as it is when not given.
      - The role's variable C(novakit_availability_zone).
    type: str
  aggregates:
    description:
      - The aggregates without a zone the host is in, exactly - each a name, or a dict of C(name) and
        C(metadata) (keys set on the aggregate, other keys left alone). Missing ones are made. Left
        as they are when not given.
      - Only this host's membership changes, so the hosts of an inventory may run it at once.
      - The role's variable C(novakit_aggregates).
    type: list
    elements: raw
  traits:
    description:
      - The custom traits (C(CUSTOM_*)) the host carries, exactly; the traits its driver reports
        are the driver's. Left as they are when not given.
      - The role's variable C(novakit_traits).
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Report this host's resources
  novakit.cloud.compute:
    host: "{{ inventory_hostname }}"
    operation: get_available_resource
  register: novakit_resources

- name: Register it
  novakit.cloud.compute_node:
    host: "{{ inventory_hostname }}"
    resources: "{{ novakit_resources.resources }}"
  delegate_to: localhost
"""

RETURN = r"""
placement:
  description: The host's zone, aggregates and custom traits, for the options given.
  returned: when O(availability_zone), O(aggregates) or O(traits) is given
  type: dict
  sample: {availability_zone: east, aggregates: [east, ssd], custom_traits: [CUSTOM_SSD]}
host:
  description: The registered host.
  returned: always
  type: str
  sample: compute-large
uuid:
  description: The host's compute node.
  returned: when not in check mode
  type: str
  sample: 4c0e5b1a-0d1e-4c52-9f3a-6b7d2e8f9a10
provider_uuid:
  description: Its resource provider.
  returned: when not in check mode
  type: str
  sample: 4c0e5b1a-0d1e-4c52-9f3a-6b7d2e8f9a10
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402

# The compute node's overcommit ratios and reserved amounts a task may set, by option type;
# unset, the configuration's stand.
RATIOS = {
    "cpu_allocation_ratio": "float",
    "ram_allocation_ratio": "float",
    "disk_allocation_ratio": "float",
    "reserved_host_memory_mb": "int",
    "reserved_host_cpus": "int",
    "reserved_host_disk_mb": "int",
}


class ComputeNodeModule(NovakitModule):
    argument_spec = {
        "host": {"type": "str", "required": True},
        "resources": {"type": "dict", "required": True},
        "driver": {"type": "dict"},
        "cell": {"type": "str"},
        **{ratio: {"type": kind} for ratio, kind in RATIOS.items()},
        "availability_zone": {"type": "str"},
        "aggregates": {"type": "list", "elements": "raw"},
        "traits": {"type": "list", "elements": "str"},
    }

    def run(self):
        from novakit import exceptions
        from novakit.fleet import hosts
        from novakit.host.messages import HostResources

        conf, db, p = self.config(), self.database(), self.params
        ctx = self.context()
        resources = HostResources.model_validate(p["resources"])
        overrides = {k: p[k] for k in RATIOS if p.get(k) is not None}
        try:
            node = hosts.get_node(db, p["host"])
            before = {
                "vcpus": node.vcpus,
                "memory_mb": node.memory_mb,
                "local_gb": node.local_gb,
                "cached_images": sorted(node.cached_images or []),
                "driver": node.driver or None,
                "traits": hosts.registered_capability_traits(db, p["host"]),
                **{k: getattr(node, k) for k in overrides},
            }
        except exceptions.NotFound:
            before = None
        after = {
            "vcpus": resources.vcpus,
            "memory_mb": resources.memory_mb,
            "local_gb": resources.local_gb,
            "cached_images": sorted(resources.cached_images),
            "driver": p["driver"] if p["driver"] is not None else (before or {}).get("driver"),
            "traits": hosts.capability_traits(resources.traits),
            **overrides,
        }
        changed = before != after
        asked = placement_asked(p)
        # Where the host goes is tried first in a transaction rolled back (for a registered host):
        # what the real run would refuse is refused before anything is written.
        planned = place(db, ctx, p["host"], asked, registered=before is not None, dry=True) if asked else None
        if self.check_mode:
            hosts.check_register(ctx, p["host"])  # as register_host does for the real run: policy, name
            out = {"host": p["host"]}
        else:
            # Registering also beats the host's heartbeat, so it runs even when nothing changed.
            out = hosts.register_host(
                db, conf, p["host"], resources, p["driver"], overrides, ctx=ctx, cell=p["cell"]
            )
            if asked:
                planned = place(db, ctx, p["host"], asked, registered=True, dry=False)
        if planned is not None:
            was, out["placement"] = planned
            changed = changed or was != out["placement"]
            before, after = {**(before or {}), **was}, {**after, **out["placement"]}
        return self.with_diff({"changed": changed, **out}, before, after)


def placement_asked(p):
    """The zone, aggregates and traits the task asks for (None: left as they are)."""
    from ansible_collections.novakit.cloud.plugins.module_utils.aggregates import aggregate_entries

    from novakit.fleet.traits import check_custom_traits
    from novakit.placement.aggregates import check_zone_name

    # Refused before the host is registered, so that bad input writes nothing.
    asked = {k: p[k] for k in ("availability_zone", "traits") if p[k] is not None}
    if "availability_zone" in asked:
        check_zone_name(asked["availability_zone"])
    if "traits" in asked:
        check_custom_traits(asked["traits"])
    if p["aggregates"] is not None:
        asked["aggregates"] = aggregate_entries(p["aggregates"])
    return asked


def place(db, ctx, host, asked, *, registered, dry):
    """The host's zone, aggregates and traits before and after putting it where ``asked`` says;
    in check mode the real changes, rolled back (a host not registered yet: what is asked)."""
    from ansible_collections.novakit.cloud.plugins.module_utils import aggregates as ops

    if dry and not registered:
        planned = {k: v for k, v in asked.items() if k != "traits"}
        if "traits" in asked:
            planned["custom_traits"] = sorted(set(asked["traits"]))
        if "aggregates" in asked:
            zone = {asked["availability_zone"]} if "availability_zone" in asked else set()
            planned["aggregates"] = sorted({e["name"] for e in asked["aggregates"]} | zone)
        return {}, planned
    if not dry:
        before = ops.host_place(db, ctx, host, asked)
        ops.place_host(db, ctx, host, asked)
        return before, ops.host_place(db, ctx, host, asked)

    def tried(dry_db):
        before = ops.host_place(dry_db, ctx, host, asked)
        ops.place_host(dry_db, ctx, host, asked)
        return before, ops.host_place(dry_db, ctx, host, asked)

    return ops.dry_run(db, tried)


def main():
    ComputeNodeModule()()


if __name__ == "__main__":
    main()
