"""Cloud-init user data that also sets the admin password and the server's SSH key, whatever
format the user gave.

The password arrives as a SHA-512 crypt hash (``novakit.compute.passwords``) and
goes into cloud-config as the hashed password of ``ADMIN_USER``::

    chpasswd:
      expire: false
      users:
      - {name: root, password: $6$..., type: hash}

(``chpasswd.users``, cloud-init 22.2 and later; ``type: hash`` makes cloud-init
run ``chpasswd -e``). ``expire: false`` keeps the password usable at the first
login, as Nova's admin password is; a user's own ``chpasswd.expire`` is kept.

The key pair's public key goes into ``ssh_authorized_keys`` (cloud-init installs it for the
image's default user), after any keys the user's own cloud-config lists there, as Nova's key
reaches a guest through the metadata that cloud-init merges with the user's keys.

The user's data is kept as it means:

* none: the document above alone;
* a ``#cloud-config`` document (YAML mapping): merged into it - an entry for root
  in ``chpasswd.users`` is replaced, the key is appended to ``ssh_authorized_keys``
  (once), everything else is kept (comments and formatting are not: the document is
  written back from its data);
* anything else (a script, a MIME multi-part archive, a ``## template: jinja``
  document, a cloud-config that is not a YAML mapping, bytes that are not text):
  a MIME multi-part archive holding the user's data unchanged (a MIME archive as a
  nested part) and the document above as a ``text/cloud-config`` part whose
  ``Merge-Type`` appends its lists to any ``chpasswd.users`` and ``ssh_authorized_keys``
  of the user's parts.

Gzip-compressed user data is uncompressed first (as cloud-init does), up to
``MAX_UNCOMPRESSED`` bytes; past that, or if it is not valid gzip, it goes
unopened into the archive as ``application/gzip``, which cloud-init uncompresses.
"""

from __future__ import annotations

import functools
import io
import zlib
from collections.abc import Callable
from email.generator import BytesGenerator
from email.message import Message
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.parser import BytesParser
from typing import Any

import yaml

#: the user whose password ``admin_password`` sets (Nova's guest agents set the admin, root, one)
ADMIN_USER = "root"
MAX_UNCOMPRESSED = 16 * 1024 * 1024
#: how cloud-init merges novakit's part into the user's cloud-config parts
MERGE_TYPE = "dict(recurse_array,no_replace)+list(append)"

_GZIP_MAGIC = b"\x1f\x8b"
_NOT_CLOUD_CONFIG = ("#cloud-config-archive", "#cloud-config-jsonp")


def with_admin_password(user_data: bytes | None, password_hash: str) -> bytes:
    """``user_data`` (raw bytes, or None) with ``password_hash`` set for ``ADMIN_USER``."""
    return with_additions(user_data, password_hash=password_hash)


def with_additions(
    user_data: bytes | None, *, password_hash: str | None = None, authorized_keys: list[str] | None = None
) -> bytes:
    """``user_data`` (raw bytes, or None) with ``password_hash`` set for ``ADMIN_USER`` and
    ``authorized_keys`` in ``ssh_authorized_keys``; unchanged when there is neither."""
    keys = [k for k in authorized_keys or [] if k]
    if password_hash is None and not keys:
        return user_data if user_data is not None else b""
    add = functools.partial(_add, password_hash=password_hash, keys=keys)
    if not user_data:
        return _cloud_config(add({}))
    data = user_data
    if data.startswith(_GZIP_MAGIC):
        data = _gunzip(data) or data
    merged = _merged(data, add)
    return merged if merged is not None else _multipart(data, add)


def _add(config: dict[Any, Any], *, password_hash: str | None, keys: list[str]) -> dict[Any, Any]:
    if password_hash is not None:
        config = _set_password(config, password_hash)
    if keys:
        have = config.get("ssh_authorized_keys")
        listed = list(have) if isinstance(have, list) else []
        config["ssh_authorized_keys"] = [*listed, *(k for k in keys if k not in listed)]
    return config


def password_entry(password_hash: str) -> dict[str, str]:
    return {"name": ADMIN_USER, "password": password_hash, "type": "hash"}


def _set_password(config: dict[Any, Any], password_hash: str) -> dict[Any, Any]:
    chpasswd = config.get("chpasswd")
    if not isinstance(chpasswd, dict):
        chpasswd = {}  # absent, or a value cloud-init would refuse anyway
    users = chpasswd.get("users")
    kept = (
        [u for u in users if not (isinstance(u, dict) and u.get("name") == ADMIN_USER)]
        if isinstance(users, list)
        else []
    )
    chpasswd.setdefault("expire", False)
    chpasswd["users"] = [*kept, password_entry(password_hash)]
    config["chpasswd"] = chpasswd
    return config


def _cloud_config(config: dict[Any, Any]) -> bytes:
    body = yaml.safe_dump(config, default_flow_style=False, sort_keys=False, allow_unicode=True, width=4096)
    return ("#cloud-config\n" + body).encode()


def _is_cloud_config(text: str) -> bool:
    # cloud-init's test: the start of the data, without leading space, in any case.
    head = text.lstrip().lower()
    return head.startswith("#cloud-config") and not head.startswith(_NOT_CLOUD_CONFIG)


def _merged(data: bytes, add: Callable[[dict[Any, Any]], dict[Any, Any]]) -> bytes | None:
    """The merged cloud-config document, or None if ``data`` is not a cloud-config mapping."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not _is_cloud_config(text):
        return None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if config is None:
        config = {}
    if not isinstance(config, dict):
        return None
    return _cloud_config(add(config))


def _gunzip(data: bytes) -> bytes | None:
    """``data`` uncompressed, or None if it is not gzip or is larger than MAX_UNCOMPRESSED."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, MAX_UNCOMPRESSED)
    except zlib.error:
        return None
    if inflater.unconsumed_tail or not inflater.eof:
        return None
    return out


def _user_part(data: bytes) -> Message:
    # cloud-init's test for a MIME archive: a MIME-Version header in the first 4 KiB.
    if b"mime-version:" in data[:4096].lower():
        return BytesParser().parsebytes(data)
    if data.startswith(_GZIP_MAGIC):
        return MIMEApplication(data, "gzip")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return MIMEApplication(data, "octet-stream")
    # text/plain: cloud-init finds the part's type from its first line (#!, #include, ...).
    return MIMEText(text, "plain", "us-ascii" if text.isascii() else "utf-8")


def _multipart(data: bytes, add: Callable[[dict[Any, Any]], dict[Any, Any]]) -> bytes:
    archive = MIMEMultipart()
    archive.attach(_user_part(data))
    body = _cloud_config(add({})).decode()
    ours = MIMEText(body, "cloud-config", "us-ascii" if body.isascii() else "utf-8")
    ours["Merge-Type"] = MERGE_TYPE
    ours.add_header("Content-Disposition", "attachment", filename="novakit.cfg")
    archive.attach(ours)
    out = io.BytesIO()
    # Body lines that begin with "From " stay as they are (a script may have them).
    BytesGenerator(out, mangle_from_=False, maxheaderlen=0).flatten(archive)
    return out.getvalue()


def authorized_keys_in(user_data: bytes) -> list[str]:
    """The ``ssh_authorized_keys`` that cloud-init would read from ``user_data`` (a cloud-config
    document, or the cloud-config parts of a MIME archive), in order: what a guest is given
    (the fake driver records it; tests read it)."""
    data = (_gunzip(user_data) or user_data) if user_data.startswith(_GZIP_MAGIC) else user_data
    if b"mime-version:" in data[:4096].lower():
        message = BytesParser().parsebytes(data)
        documents = [
            part.get_payload(decode=True)
            for part in message.walk()
            if not part.is_multipart() and part.get_content_type() in ("text/cloud-config", "text/plain")
        ]
    else:
        documents = [data]
    found: list[str] = []
    for doc in documents:
        if not isinstance(doc, bytes):
            continue
        try:
            text = doc.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if not _is_cloud_config(text):
            continue
        try:
            config = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        listed = config.get("ssh_authorized_keys") if isinstance(config, dict) else None
        found.extend(k for k in listed or [] if isinstance(k, str) and k not in found)
    return found
