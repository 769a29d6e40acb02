"""Request models for the compute API, with Nova's limits.

Every public entry point (Python API, CLI, Ansible modules) validates through
these models, so a rule is written once. ``parse`` turns pydantic's errors
into one ``ValidationError`` that names every bad field and its rule.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import unicodedata
import uuid as uuidlib
from typing import Any, Literal, TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from novakit import exceptions

MAX_NAME = 255
MAX_METADATA_ITEMS = 128
MAX_METADATA_LEN = 255
MAX_USER_DATA = 65535  # bytes once base64-encoded, as Nova's column
MAX_ADMIN_PASSWORD = 255  # characters; bounds the hashing work too
MAX_INT = 2147483647  # Nova's bound for integer fields (flavor RAM, disk, ...)
# Nova's metadata keys: letters, digits, space and -_:.
METADATA_KEY = re.compile(r"^[a-zA-Z0-9-_:. ]{1,255}$")
# Characters no name may hold (Nova's valid_name_regex): control, format, surrogate, private and
# unassigned (C*), and the line and paragraph separators (Zl, Zp).
_BAD_NAME_CATEGORIES = ("C", "Zl", "Zp")

M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], data: dict[str, Any], prefix: str = "") -> M:
    """Validate ``data``; on failure raise ValidationError naming each field and rule.

    ``prefix`` names where ``data`` sits in the request (``options``: ``options.timeout``).
    """
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        errors = []
        for err in exc.errors():
            field = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "") or "request"
            rule = err["msg"]
            if err["type"] == "extra_forbidden":
                rule = "is not a known field"
            rule = rule.removeprefix("Value error, ")
            errors.append((field, rule))
        raise exceptions.ValidationError(errors[0][0], errors[0][1], errors) from None


def check_name(value: str) -> str:
    """The rule of every name a caller gives (servers, flavors, images, volumes, networks, ...):
    1 to 255 characters, no surrounding whitespace, none of Nova's forbidden characters."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    if not 1 <= len(value) <= MAX_NAME:
        raise ValueError(f"must be 1 to {MAX_NAME} characters long")
    if value != value.strip():
        raise ValueError("must not begin or end with whitespace")
    for c in value:
        if unicodedata.category(c).startswith(_BAD_NAME_CATEGORIES):
            raise ValueError(
                f"must not contain control, format, unassigned or separator characters (U+{ord(c):04X})"
            )
    return value


_check_name = check_name  # the name the request models below (and the network ones) use


def name_error(value: Any) -> str | None:
    """``check_name``'s rule as words, None when ``value`` keeps it (for checks that collect errors)."""
    try:
        check_name(value)
    except ValueError as exc:
        return str(exc)
    return None


def _check_uuid(value: str) -> str:
    try:
        return str(uuidlib.UUID(value))
    except (ValueError, AttributeError, TypeError):
        raise ValueError(f"{value!r} is not a valid UUID") from None


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class Metadata(_Request):
    items: dict[str, str] = Field(default_factory=dict)


def _check_metadata(value: dict[str, Any]) -> dict[str, str]:
    if len(value) > MAX_METADATA_ITEMS:
        raise ValueError(f"at most {MAX_METADATA_ITEMS} items are allowed, got {len(value)}")
    out: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_METADATA_LEN:
            raise ValueError(f"key {str(key)[:40]!r} must be a string of 1 to {MAX_METADATA_LEN} characters")
        if not METADATA_KEY.match(key):
            raise ValueError(f"key {key[:40]!r} may hold only letters, digits, space and -_:.")
        if not isinstance(val, str):
            raise ValueError(f"value of {key!r} must be a string")
        if len(val) > MAX_METADATA_LEN:
            raise ValueError(f"value of {key!r} must be at most {MAX_METADATA_LEN} characters")
        out[key] = val
    return out


class SchedulerHints(_Request):
    same_host: list[str] = Field(default_factory=list)
    different_host: list[str] = Field(default_factory=list)
    group: str | None = None

    @field_validator("same_host", "different_host", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("same_host", "different_host")
    @classmethod
    def _uuids(cls, v: list[str]) -> list[str]:
        return [_check_uuid(x) for x in v]

    @field_validator("group")
    @classmethod
    def _group(cls, v: str | None) -> str | None:
        return _check_uuid(v) if v is not None else None


def ipv4_address(value: str) -> str:
    """``value`` as an IPv4 address, for a field validator (a ValueError says what it is not)."""
    try:
        addr = ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None
    if addr.version != 4:
        raise ValueError(f"{value} is not an IPv4 address")
    return str(addr)


class NetworkRequest(_Request):
    """One NIC: a novakit network (``net_id``, with Nova's ``v4-fixed-ip`` as ``fixed_ip``), a
    port (``port_id``), or a host-side network plugged in directly (``type`` and ``source``)."""

    type: Literal["network", "bridge", "user"] = "user"
    source: str = ""
    net_id: str | None = Field(default=None, min_length=1, max_length=255)
    port_id: str | None = Field(default=None, min_length=1, max_length=255)
    fixed_ip: str | None = None

    @field_validator("fixed_ip")
    @classmethod
    def _fixed_ip(cls, v: str | None) -> str | None:
        return ipv4_address(v) if v is not None else None

    @pydantic.model_validator(mode="after")
    def _one_form(self) -> NetworkRequest:
        given = self.model_fields_set
        if self.net_id is not None and self.port_id is not None:
            raise ValueError("give net_id or port_id, not both")
        if self.fixed_ip is not None and self.net_id is None:
            raise ValueError("fixed_ip needs net_id (the network to take it from)")
        if (self.net_id is not None or self.port_id is not None) and given & {"type", "source"}:
            raise ValueError("a NIC is net_id/port_id or type/source, not both")
        return self


class ServerCreate(_Request):
    name: str
    flavor: str
    # Optional only with ``boot_volume``: the server then boots the volume's image.
    image: str | None = None
    min_count: int = Field(default=1, ge=1, le=MAX_INT)
    max_count: int | None = Field(default=None, ge=1, le=MAX_INT, validate_default=True)
    metadata: dict[str, Any] = Field(default_factory=dict)
    user_data: SecretStr | None = None
    admin_password: SecretStr | None = None
    availability_zone: str | None = None
    server_group: str | None = None
    scheduler_hints: SchedulerHints = Field(default_factory=SchedulerHints)
    networks: list[NetworkRequest] = Field(default_factory=list)
    # The security groups of the ports the create makes (names or ids; None: ``default``), as
    # Nova's ``security_groups`` (``[{"name": ...}]`` is taken too). ``novakit.network.security_groups``.
    security_groups: list[str] | None = Field(default=None, max_length=64)
    config_drive: bool = True
    key_name: str | None = None
    description: str | None = Field(default=None, max_length=255)
    # Boot from volume (Nova's block_device_mapping_v2 with boot_index 0, ``novakit.volume.boot``):
    # a new volume of this many GiB made from the image on the chosen host, or an existing
    # bootable volume (name or id). ``delete_on_termination``: whether the root volume goes with
    # the server (default: true for a new one, false for an existing one, as Nova's API).
    boot_from_volume: int | None = Field(default=None, ge=1, le=MAX_INT)
    boot_volume: str | None = Field(default=None, min_length=1, max_length=255)
    delete_on_termination: bool | None = None

    _check_name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))
    _check_md = field_validator("metadata")(classmethod(lambda cls, v: _check_metadata(v)))

    @field_validator("security_groups", mode="before")
    @classmethod
    def _group_names(cls, v: Any) -> Any:
        # Nova's form, [{"name": "web"}], a plain list of names, or a playbook survey's answer
        # ("web db": names separated by spaces or commas).
        if isinstance(v, str):
            return v.replace(",", " ").split() or None
        if isinstance(v, list):
            return [g["name"] if isinstance(g, dict) and set(g) == {"name"} else g for g in v]
        return v

    @field_validator("boot_volume")
    @classmethod
    def _one_root(cls, v: str | None, info: pydantic.ValidationInfo) -> str | None:
        if v is None:
            return v
        if info.data.get("boot_from_volume") is not None:
            raise ValueError("boot_from_volume and boot_volume are mutually exclusive: give one root disk")
        if (info.data.get("max_count") or 1) > 1:
            raise ValueError("an existing volume is the root of one server: max_count must be 1")
        return v

    @field_validator("delete_on_termination")
    @classmethod
    def _root_given(cls, v: bool | None, info: pydantic.ValidationInfo) -> bool | None:
        if (
            v is not None
            and info.data.get("boot_from_volume") is None
            and info.data.get("boot_volume") is None
        ):
            raise ValueError("applies to a root volume only: give boot_from_volume or boot_volume")
        return v

    @field_validator("flavor", "image")
    @classmethod
    def _non_empty(cls, v: str | None) -> str | None:
        if v is None:  # the image with boot_volume: the API's check names it otherwise
            return v
        if not v or not v.strip():
            raise ValueError("must name an existing one (name or id)")
        return v

    @field_validator("user_data")
    @classmethod
    def _user_data(cls, v: SecretStr | None) -> SecretStr | None:
        if v is None:
            return v
        # Line breaks as `base64` prints them are accepted (Nova decodes with decodebytes) and
        # dropped, so that what is stored is plain base64.
        raw = "".join(v.get_secret_value().split())
        if len(raw.encode()) > MAX_USER_DATA:
            raise ValueError(f"must be at most {MAX_USER_DATA} bytes once base64-encoded")
        try:
            base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            # Never echo the value: user data may hold secrets.
            raise ValueError("must be base64-encoded") from None
        return SecretStr(raw)

    @field_validator("admin_password")
    @classmethod
    def _admin_password(cls, v: SecretStr | None) -> SecretStr | None:
        # Hashed by the API before anything is written (``novakit.compute.passwords``).
        # Never echo the value.
        if v is None:
            return v
        value = v.get_secret_value()
        if not 1 <= len(value) <= MAX_ADMIN_PASSWORD:
            raise ValueError(f"must be 1 to {MAX_ADMIN_PASSWORD} characters long")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            # A NUL would end it early for the guest's C crypt(); none can be typed at a login prompt.
            raise ValueError("must not contain control characters")
        return v

    @field_validator("max_count")
    @classmethod
    def _counts(cls, v: int | None, info: pydantic.ValidationInfo) -> int:
        min_count = info.data.get("min_count", 1)
        if v is None:
            return int(min_count)
        if min_count > v:
            raise ValueError(f"must not be less than min_count ({min_count})")
        return v


class Rename(_Request):
    name: str
    _check_name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))


class VolumeAction(_Request):
    """attach_volume / detach_volume: the volume (its id), which ``novakit.volume.attachments``
    has reserved for the server (or marked detaching) before the action starts."""

    volume_id: str = Field(min_length=1, max_length=36)


class NoOptions(_Request):
    """The options of an action that takes none: any key given is refused, by name."""


class Reboot(_Request):
    reboot_type: Literal["SOFT", "HARD"] = "SOFT"

    @field_validator("reboot_type", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v


class Lock(_Request):
    reason: str | None = Field(default=None, max_length=255)


class Rebuild(_Request):
    image: str
    name: str | None = None
    metadata: dict[str, Any] | None = None
    user_data: SecretStr | None = None
    admin_password: SecretStr | None = None
    # A new key pair (the requesting user's) replaces the server's key; without one it keeps it.
    key_name: str | None = None

    _check_name = field_validator("name")(classmethod(lambda cls, v: _check_name(v) if v is not None else v))
    _check_md = field_validator("metadata")(
        classmethod(lambda cls, v: _check_metadata(v) if v is not None else v)
    )
    _check_ud = field_validator("user_data")(classmethod(lambda cls, v: ServerCreate._user_data(v)))
    _check_pw = field_validator("admin_password")(classmethod(lambda cls, v: ServerCreate._admin_password(v)))


class Stop(_Request):
    timeout: int | None = Field(default=None, ge=0, le=3600)


class Resize(_Request):
    """resize: the flavor to move to (name or id)."""

    flavor: str = Field(min_length=1, max_length=255)


class CreateImage(_Request):
    """create_image (a snapshot): the new image's name and properties."""

    name: str
    metadata: dict[str, Any] | None = None

    _check_name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))
    _check_md = field_validator("metadata")(
        classmethod(lambda cls, v: _check_metadata(v) if v is not None else v)
    )


class Rescue(_Request):
    """rescue: the image to boot from (name or id); None: the server's own image."""

    image: str | None = None


class Migrate(_Request):
    """migrate (cold): where to, by host name; None lets the scheduler choose (admin only)."""

    host: str | None = Field(default=None, min_length=1, max_length=255)


class FlavorCreate(_Request):
    name: str
    vcpus: int = Field(ge=1, le=4096)
    memory_mb: int = Field(ge=1, le=MAX_INT)
    root_gb: int = Field(default=0, ge=0, le=MAX_INT)
    ephemeral_gb: int = Field(default=0, ge=0, le=MAX_INT)
    swap: int = Field(default=0, ge=0, le=MAX_INT)
    flavorid: str | None = None
    extra_specs: dict[str, str] = Field(default_factory=dict)
    is_public: bool = True
    description: str | None = Field(default=None, max_length=255)

    _check_name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))


#: Glance's image visibilities (``novakit.catalog.images`` enforces them)
VISIBILITIES = ("public", "private", "shared", "community")
Visibility = Literal["public", "private", "shared", "community"]


def _check_location(value: str) -> str:
    """Where compute hosts read an image: an absolute path, or a ``file://`` URL of one on the
    host itself (``file:///...``, ``file://localhost/...``). Empty: no file (fake hosts only)."""
    if value == "":
        return value
    for c in value:
        if unicodedata.category(c).startswith(_BAD_NAME_CATEGORIES):
            raise ValueError(f"must not contain control or separator characters (U+{ord(c):04X})")
    if "://" in value or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", value):
        scheme, _, rest = value.partition("://")
        if scheme.lower() != "file" or not rest:
            raise ValueError(
                f"must be an absolute path or a file:// URL on the compute hosts, got scheme {scheme!r}"
            )
        host, slash, path = rest.partition("/")
        if host not in ("", "localhost"):
            raise ValueError(
                f"a file:// URL names a file on the compute host itself (file:///...), not on {host!r}"
            )
        if not slash or not path:
            raise ValueError("a file:// URL must name a file (file:///path/to/image)")
        return value
    if not value.startswith("/"):
        raise ValueError(f"must be an absolute path (starting with /) or a file:// URL, got {value!r}")
    return value


def _check_property_keys(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if not METADATA_KEY.match(key):
            raise ValueError(f"key {key!r} must be 1 to 255 letters, digits, spaces or -_:.")
    return value


class ImageCreate(_Request):
    name: str
    location: str = ""
    # None: public when an admin registers it (Glance's default for an admin), private otherwise.
    visibility: Visibility | None = None
    disk_format: Literal["qcow2", "raw", "aki", "ari", "ami"] = "qcow2"
    container_format: Literal["bare", "aki", "ari", "ami"] = "bare"
    checksum: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    size: int = Field(default=0, ge=0, le=2**63 - 1)
    min_disk: int = Field(default=0, ge=0, le=MAX_INT)
    min_ram: int = Field(default=0, ge=0, le=MAX_INT)
    properties: dict[str, str] = Field(default_factory=dict)
    uuid: str | None = None

    _check_name = field_validator("name")(classmethod(lambda cls, v: _check_name(v)))
    _check_uuid = field_validator("uuid")(classmethod(lambda cls, v: _check_uuid(v) if v else v))
    _check_location = field_validator("location")(classmethod(lambda cls, v: _check_location(v)))
    _check_properties = field_validator("properties")(classmethod(lambda cls, v: _check_property_keys(v)))


class ImageMemberRequest(_Request):
    """A project an image is shared with (Glance's member), and the status it gives."""

    member: str = Field(min_length=1, max_length=255)
    status: Literal["pending", "accepted", "rejected"] = "pending"

    _check_member = field_validator("member")(classmethod(lambda cls, v: _check_name(v)))
