#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The controller step of playbooks/heal.yml: make the database agree with the hypervisors."""

from __future__ import annotations

DOCUMENTATION = r"""
module: heal
short_description: Correct the database from what the compute hosts actually run
description:
  - Runs on the controller after the C(compute) module has listed each host's guests
    (O(guests)). Power states are corrected as Nova's power-state sync does (a guest found off
    while its server is active is recorded C(stopped), with a C(stop) action); a server whose
    guest vanished goes to C(error) with a fault; builds stuck in C(building) past
    C(compute.build_timeout) go to C(error) and free their claim; allocations held by no live
    server are removed; guests no server owns are reported (and destroyed with O(destroy_orphans)).
  - With O(import_unmanaged), guests that novakit did not create on the hosts that answered become
    servers with their claims, as C(novakit host import) does (an C(imported_guest) correction each).
  - A host without an answer in O(guests) is reported as unreachable and its servers are left alone.
version_added: 0.1.0
extends_documentation_fragment: [ansible.builtin.action_common_attributes, novakit.cloud.common]
attributes:
  check_mode:
    support: full
    details:
      - Check mode is O(dry_run) - RV(report) lists every correction a real run would make, with
        C(applied) false (with O(import_unmanaged), each guest it would import, its flavor and whether
        its claim fits); C(changed) is what the real run would report (true if it would correct
        something). O(dry_run) outside check mode changes nothing and reports C(changed) false.
  diff_mode:
    support: none
options:
  guests:
    description:
      - What the C(compute) module returned on each host for C(operation=list_instances), by host
        name. A missing or failed answer counts as unreachable.
    type: dict
    required: true
  asked_at:
    description:
      - When the hosts were asked (ISO 8601, UTC). Servers whose records changed later are skipped,
        because their guest list is older than their record.
    type: str
  hosts:
    description: Only these hosts (default every host in O(guests)).
    type: list
    elements: str
  dry_run:
    description: Report what would be corrected and change nothing.
    type: bool
    default: false
  destroy_orphans:
    description: Destroy guests that no live server on their host owns.
    type: bool
    default: false
  import_unmanaged:
    description:
      - Import the guests novakit did not create as servers with claims (an existing flavor of their
        size, else a private C(imported-...) flavor recorded for them). A guest whose claim does not
        fit its host is refused, with placement's reason. Admin only (C(host:import)).
    type: bool
    default: false
  import_project:
    description: The project imported servers belong to (default the caller's).
    type: str
"""

EXAMPLES = r"""
- name: Record the heal
  novakit.cloud.heal:
    guests: "{{ dict(groups['novakit_compute'] | zip(groups['novakit_compute'] | map('extract', hostvars)
               | map(attribute='novakit_guests', default={}))) }}"
    asked_at: "{{ novakit_heal_asked_at }}"
"""

RETURN = r"""
report:
  description: What heal compared and what it found.
  returned: always
  type: dict
  contains:
    request_id:
      description: The heal's request id (its instance actions carry it).
      type: str
    dry_run:
      description: Whether it only reported.
      type: bool
    hosts:
      description: The hosts whose guests were compared.
      type: list
      elements: str
    unreachable:
      description: The hosts that did not answer, and why.
      type: dict
    down_cells:
      description:
        - The cells whose database did not answer, and why. Nothing in them was changed, and the hosts
          mapped to them were not compared.
      type: dict
    corrections:
      description: Every correction found.
      type: list
      elements: dict
      contains:
        kind:
          description:
            - C(power_state), C(stopped), C(vanished), C(task_recovered), C(build_timeout), C(build_adopted),
              C(abandoned_action), C(orphan_allocation), C(orphan_guest), C(imported_guest), C(stray_copy)
              (the copy an interrupted move into a cell left behind, removed), C(volume_recovered) (a volume
              whose operation was cut off, settled) or C(upload_recovered) (an image whose upload was cut off,
              queued again).
          type: str
        instance:
          description:
            - The instance (or, for an orphan guest, the guest's uuid; for C(volume_recovered), the volume's;
              for C(upload_recovered), the image's).
          type: str
        host:
          description: Its host.
          type: str
        before:
          description: What the database said.
          type: str
        after:
          description: What it says now (or would say).
          type: str
        detail:
          description: Why.
          type: str
        applied:
          description: Whether the correction was made.
          type: bool
        error:
          description: Why a correction could not be made; null when it was.
          type: str
  sample:
    request_id: req-heal-1
    dry_run: false
    hosts: [compute-large]
    unreachable: {}
    down_cells: {}
    corrections:
      - kind: stopped
        instance: 0b3f6a51-4a5e-4ab3-9a55-2f0f1ce7c2a4
        host: compute-large
        before: active
        after: stopped
        detail: the guest is off
        applied: true
        error: null
"""

from ansible_collections.novakit.cloud.plugins.module_utils.novakit import NovakitModule  # noqa: E402


class HealModule(NovakitModule):
    argument_spec = {
        "guests": {"type": "dict", "required": True},
        "asked_at": {"type": "str"},
        "hosts": {"type": "list", "elements": "str"},
        "dry_run": {"type": "bool", "default": False},
        "destroy_orphans": {"type": "bool", "default": False},
        "import_unmanaged": {"type": "bool", "default": False},
        "import_project": {"type": "str"},
    }

    def run(self):
        import datetime as dt

        from novakit.db.engine import Database
        from novakit.heal.manager import heal, reports_from_compute_results

        self.refuse_cloud()
        conf = self.config()
        reports, unreachable, boot_ids = reports_from_compute_results(self.params["guests"])
        asked_at = None
        if self.params["asked_at"]:
            asked_at = dt.datetime.fromisoformat(self.params["asked_at"]).replace(tzinfo=None)
        report = heal(
            self._opened(Database.from_config(conf)),
            conf,
            hosts=self.params["hosts"],
            reports=reports,
            reported_at=asked_at,
            unreachable=unreachable,
            boot_ids=boot_ids,
            ctx=self.context(),
            dry_run=self.params["dry_run"] or self.check_mode,
            destroy_orphans=self.params["destroy_orphans"],
            import_unmanaged=self.params["import_unmanaged"],
            import_project=self.params["import_project"],
        )
        if self.check_mode:
            # Check mode answers what the real run would do: each correction it would make.
            changed = any(would_change(c) for c in report.corrections)
        else:
            changed = any(c.applied for c in report.corrections)
        return {"changed": changed, "report": report.model_dump(mode="json")}


def would_change(correction):
    """Whether a dry run's correction is one a real run would apply: a refused one says why in
    ``error``, and one only reported (an orphan guest left alone) ends as it began."""
    return correction.error is None and correction.before != correction.after


def main():
    HealModule()()


if __name__ == "__main__":
    main()
