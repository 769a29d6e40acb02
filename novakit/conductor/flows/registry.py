"""The state table's flow names and the flow object that carries each out."""

from __future__ import annotations

from novakit.conductor.flows.base import Flow
from novakit.conductor.flows.evacuate import Evacuate
from novakit.conductor.flows.live import LiveMigrate
from novakit.conductor.flows.resize import ConfirmResize, Resize, RevertResize
from novakit.conductor.flows.shelve import Shelve, ShelveOffload, Unshelve
from novakit.conductor.flows.snapshot import Snapshot

#: the state table's flow names -> the flow that carries them out
FLOWS: dict[str, type[Flow]] = {
    "resize": Resize,
    "confirm_resize": ConfirmResize,
    "revert_resize": RevertResize,
    "live_migrate": LiveMigrate,
    "evacuate": Evacuate,
    "create_image": Snapshot,
    "shelve": Shelve,
    "shelve_offload": ShelveOffload,
    "unshelve": Unshelve,
}

__all__ = ["FLOWS", "Flow"]
