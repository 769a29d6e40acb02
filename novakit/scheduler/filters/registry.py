"""The filter registry: every filter by name; ``scheduler.enabled_filters`` picks them and their
order. An unknown name fails at start-up with the list, so a typo cannot silently switch a
filter off."""

from __future__ import annotations

from novakit.config import Config, register_check
from novakit.scheduler.filters.aggregate_instance_extra_specs_filter import AggregateInstanceExtraSpecsFilter
from novakit.scheduler.filters.base import PASS, BaseFilter, FilterResult, reject
from novakit.scheduler.filters.compute_capabilities_filter import ComputeCapabilitiesFilter
from novakit.scheduler.filters.compute_filter import ComputeFilter
from novakit.scheduler.filters.different_host_filter import DifferentHostFilter
from novakit.scheduler.filters.image_properties_filter import ImagePropertiesFilter
from novakit.scheduler.filters.io_ops_filter import IoOpsFilter
from novakit.scheduler.filters.network_filter import NetworkFilter
from novakit.scheduler.filters.num_instances_filter import NumInstancesFilter
from novakit.scheduler.filters.same_host_filter import SameHostFilter
from novakit.scheduler.filters.security_group_filter import SecurityGroupFilter
from novakit.scheduler.filters.server_group_affinity_filter import ServerGroupAffinityFilter
from novakit.scheduler.filters.server_group_anti_affinity_filter import ServerGroupAntiAffinityFilter
from novakit.scheduler.filters.volume_host_filter import VolumeHostFilter
from novakit.scheduler.registry import check_names

FILTERS: dict[str, type[BaseFilter]] = {
    cls.name: cls
    for cls in (
        ComputeFilter,
        ComputeCapabilitiesFilter,
        ImagePropertiesFilter,
        ServerGroupAffinityFilter,
        ServerGroupAntiAffinityFilter,
        SameHostFilter,
        DifferentHostFilter,
        NumInstancesFilter,
        IoOpsFilter,
        AggregateInstanceExtraSpecsFilter,
        NetworkFilter,
        VolumeHostFilter,
        SecurityGroupFilter,
    )
}


def check_filter_names(conf: Config) -> None:
    """The one check of ``scheduler.enabled_filters``: ConfigError names the unknown ones and the
    known ones. ``load_config`` runs it (``register_check`` below), and so does ``build_filters``."""
    check_names("scheduler.enabled_filters", conf.scheduler.enabled_filters, FILTERS, "filter")


register_check(check_filter_names)


def build_filters(conf: Config) -> list[BaseFilter]:
    """The configured filters, in order."""
    check_filter_names(conf)
    return [FILTERS[name](conf) for name in conf.scheduler.enabled_filters]


__all__ = ["FILTERS", "PASS", "BaseFilter", "FilterResult", "build_filters", "check_filter_names", "reject"]
