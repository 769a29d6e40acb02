"""The status and power state name a server shows, from the text and number its row holds."""

from __future__ import annotations

import pytest

from novakit.compute.states import STATUS_MAP, PowerState, TaskState, VmState, status_from_state
from novakit.compute.views import _power_state_name


@pytest.mark.parametrize("vm_state", list(VmState))
def test_every_state_shows_the_table_status(vm_state: VmState) -> None:
    table = STATUS_MAP.get(vm_state, {"default": "UNKNOWN"})
    for task_state in [None, *TaskState]:
        expected = table.get(task_state, table["default"]) if task_state is not None else table["default"]
        # As a row holds them: plain text.
        raw_task = task_state.value if task_state is not None else None
        assert status_from_state(vm_state.value, raw_task) == expected


def test_power_state_names_from_the_number() -> None:
    assert _power_state_name(int(PowerState.RUNNING)) == "Running"
    assert _power_state_name(int(PowerState.NOSTATE)) == "NOSTATE"
    assert _power_state_name(int(PowerState.SHUTDOWN)) == "Shutdown"
