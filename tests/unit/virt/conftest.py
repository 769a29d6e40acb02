"""Shared fixtures for the driver unit tests: instance specs as the compute manager sends them."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import pytest

from novakit.host.messages import FlavorSpec, ImageSpec, InstanceSpec


def build_instance(**overrides: Any) -> InstanceSpec:
    data: dict[str, Any] = {
        "uuid": str(uuidlib.uuid4()),
        "name": "web-1",
        "hostname": "web-1",
        "project_id": "p-demo",
        "user_id": "u-demo",
        "flavor": FlavorSpec(name="m1.tiny", vcpus=1, memory_mb=256, root_gb=1),
        "image": ImageSpec(id="img-tiny", name="tiny"),
    }
    data.update(overrides)
    return InstanceSpec(**data)


@pytest.fixture
def make_instance() -> Callable[..., InstanceSpec]:
    return build_instance
