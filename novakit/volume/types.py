"""Volume types: novakit has one, Cinder's default ``__DEFAULT__``, that every volume is of.

A volume's storage is its host's pool (``novakit.volume.volumes``), so there is nothing a type
could choose between; the one type exists so that clients which name or show a type (Cinder's
API always has one) find it. Asking for any other type is refused as Cinder refuses an unknown
one: not found.
"""

from __future__ import annotations

import uuid
from typing import Any

from novakit import exceptions

DEFAULT_NAME = "__DEFAULT__"
#: the default type's id: the same in every database, derived from its name
DEFAULT_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "novakit:volume-type:" + DEFAULT_NAME))


class VolumeTypeNotFound(exceptions.NotFound):
    msg_fmt = "Volume type %(volume_type)s could not be found (novakit has one: " + DEFAULT_NAME + ")."


def default() -> dict[str, Any]:
    return {
        "id": DEFAULT_ID,
        "name": DEFAULT_NAME,
        "description": "Default Volume Type",
        "is_public": True,
        "extra_specs": {},
    }


def list_types() -> list[dict[str, Any]]:
    return [default()]


def find(ref: str | None) -> dict[str, Any]:
    """The type ``ref`` names (its id or name; ``default`` or None: the default type)."""
    if ref is None or ref in (DEFAULT_ID, DEFAULT_NAME, "default"):
        return default()
    raise VolumeTypeNotFound(volume_type=ref)
