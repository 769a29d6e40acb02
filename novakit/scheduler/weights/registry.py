"""The weigher registry: every weigher by name; ``weighers = ["all"]`` in the config enables
every one of them."""

from __future__ import annotations

from novakit.config import Config, register_check
from novakit.scheduler.registry import check_names
from novakit.scheduler.weights.affinity import ServerGroupSoftAffinityWeigher
from novakit.scheduler.weights.anti_affinity import ServerGroupSoftAntiAffinityWeigher
from novakit.scheduler.weights.base import BaseWeigher, normalize
from novakit.scheduler.weights.build_failure import BuildFailureWeigher
from novakit.scheduler.weights.cpu import CPUWeigher
from novakit.scheduler.weights.disk import DiskWeigher
from novakit.scheduler.weights.image_locality import ImageLocalityWeigher
from novakit.scheduler.weights.io_ops import IoOpsWeigher
from novakit.scheduler.weights.ram import RAMWeigher

WEIGHERS: dict[str, type[BaseWeigher]] = {
    cls.name: cls
    for cls in (
        RAMWeigher,
        CPUWeigher,
        DiskWeigher,
        IoOpsWeigher,
        BuildFailureWeigher,
        ServerGroupSoftAffinityWeigher,
        ServerGroupSoftAntiAffinityWeigher,
        ImageLocalityWeigher,
    )
}


def _names(conf: Config) -> list[str]:
    return list(WEIGHERS) if conf.scheduler.weighers == ["all"] else conf.scheduler.weighers


def check_weigher_names(conf: Config) -> None:
    """The one check of ``scheduler.weighers``: ConfigError names unknown ones and lists the known
    ones. ``load_config`` runs it (``register_check`` below), and so does ``build_weighers``."""
    check_names("scheduler.weighers", _names(conf), WEIGHERS, "weigher", listed=["all"])


register_check(check_weigher_names)


def build_weighers(conf: Config) -> list[BaseWeigher]:
    """The configured weighers."""
    check_weigher_names(conf)
    return [WEIGHERS[name](conf) for name in _names(conf)]


__all__ = ["WEIGHERS", "BaseWeigher", "build_weighers", "check_weigher_names", "normalize"]
