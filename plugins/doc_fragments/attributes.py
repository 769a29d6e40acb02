"""What novakit's modules support of Ansible's action attributes (check mode, diff mode, platform).

Used with C(ansible.builtin.action_common_attributes), which describes each
attribute. A module states only where it differs from these (its own
C(attributes) win over a fragment's).
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
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
"""
