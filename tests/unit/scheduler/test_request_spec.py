"""The request spec: what it derives from the flavor, and that it survives a JSON round trip."""

from __future__ import annotations

import json

import pytest

from novakit import exceptions
from novakit.host.messages import FlavorSpec, ImageSpec
from novakit.scheduler.request_spec import InstanceGroupSpec, RequestSpec


def make(**flavor_fields: object) -> RequestSpec:
    fields = {"name": "f", "vcpus": 2, "memory_mb": 1024, "root_gb": 10, **flavor_fields}
    return RequestSpec(
        request_id="r",
        project_id="p",
        user_id="u",
        flavor=FlavorSpec(**fields),
        image=ImageSpec(id="i"),  # type: ignore[arg-type]
    )


def test_resources_from_flavor_with_swap_rounded_up_to_gb() -> None:
    assert make(ephemeral_gb=5, swap=1536).resources() == {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 17}


def test_zero_disk_is_omitted_and_extra_specs_override() -> None:
    spec = make(root_gb=0, extra_specs={"resources:CUSTOM_GPU": "1", "resources:VCPU": "4"})
    assert spec.resources() == {"VCPU": 4, "MEMORY_MB": 1024, "CUSTOM_GPU": 1}


@pytest.mark.parametrize("field,value", [("vcpus", 0), ("memory_mb", -1), ("root_gb", -5)])
def test_zero_or_negative_sizes_are_refused_naming_the_field(field: str, value: int) -> None:
    with pytest.raises(exceptions.ValidationError) as err:
        make(**{field: value}).resources()
    assert field in str(err.value)


def test_traits_from_extra_specs_and_contradictions() -> None:
    spec = make(extra_specs={"trait:HW_CPU_X86_AVX2": "required", "trait:CUSTOM_SLOW": "forbidden"})
    assert spec.traits() == ({"HW_CPU_X86_AVX2"}, {"CUSTOM_SLOW"})
    with pytest.raises(exceptions.ValidationError):
        make(extra_specs={"trait:X": "maybe"}).traits()
    both = make(extra_specs={"trait:X": "required"}).model_copy(update={"forbidden_traits": ["X"]})
    with pytest.raises(exceptions.ValidationError):
        both.traits()


def test_json_round_trip_is_lossless() -> None:
    spec = make().model_copy(
        update={
            "instance_group": InstanceGroupSpec(
                uuid="g", policy="anti-affinity", rules={"max_server_per_host": 2}
            ),
            "scheduler_hints": {"different_host": ["a"]},
            "num_instances": 3,
            "min_count": 2,
        }
    )
    stored = json.loads(json.dumps(spec.model_dump(mode="json")))
    assert RequestSpec.model_validate(stored) == spec
    assert RequestSpec.model_validate(stored).effective_min_count == 2
