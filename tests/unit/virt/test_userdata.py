"""User data with the admin password merged in, read back the way cloud-init reads it."""

from __future__ import annotations

import gzip
import os
from email import message_from_bytes
from email.message import Message
from typing import Any

import pytest
import yaml

from novakit.virt import userdata
from novakit.virt.userdata import MERGE_TYPE, with_admin_password

HASH = "$6$abcdefghABCDEFGH$" + "x" * 86
ROOT = {"name": "root", "password": HASH, "type": "hash"}


def cloud_config(data: bytes) -> dict[str, Any]:
    text = data.decode()
    assert text.startswith("#cloud-config\n")
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def parts(data: bytes) -> list[Message]:
    """The leaf parts of a MIME archive, in order (nested archives opened), as cloud-init walks them."""
    assert b"mime-version:" in data[:4096].lower()
    return [p for p in message_from_bytes(data).walk() if not p.is_multipart()]


def ours(part: Message) -> dict[str, Any]:
    assert part.get_content_type() == "text/cloud-config"
    assert part["Merge-Type"] == MERGE_TYPE
    return cloud_config(part.get_payload(decode=True))


def test_without_user_data_a_cloud_config_sets_roots_password() -> None:
    config = cloud_config(with_admin_password(None, HASH))
    assert config == {"chpasswd": {"expire": False, "users": [ROOT]}}
    assert with_admin_password(b"", HASH) == with_admin_password(None, HASH)


def test_a_cloud_config_is_merged_and_keeps_everything_else() -> None:
    given = (
        b"#cloud-config\n"
        b"# a comment\n"
        b"packages: [vim, curl]\n"
        b"write_files:\n- {path: /etc/motd, content: hi}\n"
        b"chpasswd:\n  expire: true\n  users:\n"
        b"  - {name: root, password: old, type: text}\n"
        b"  - {name: bob, password: bobs, type: text}\n"
    )
    config = cloud_config(with_admin_password(given, HASH))
    assert config["packages"] == ["vim", "curl"]
    assert config["write_files"] == [{"path": "/etc/motd", "content": "hi"}]
    # The user's own expire wins; root's entry is replaced, bob's kept.
    assert config["chpasswd"] == {
        "expire": True,
        "users": [{"name": "bob", "password": "bobs", "type": "text"}, ROOT],
    }


@pytest.mark.parametrize("header", [b"#cloud-config", b"  #Cloud-Config  "])
def test_an_empty_cloud_config_gets_just_the_password(header: bytes) -> None:
    assert cloud_config(with_admin_password(header + b"\n", HASH)) == {
        "chpasswd": {"expire": False, "users": [ROOT]}
    }


def test_gzipped_cloud_config_is_merged_uncompressed() -> None:
    config = cloud_config(with_admin_password(gzip.compress(b"#cloud-config\nhostname: gz\n"), HASH))
    assert config == {"hostname": "gz", "chpasswd": {"expire": False, "users": [ROOT]}}


SCRIPT = b"#!/bin/sh\necho hello\nFrom here on, nothing is mangled\n"


@pytest.mark.parametrize(
    "given",
    [
        SCRIPT,
        b"## template: jinja\n#cloud-config\nhostname: {{ v1.instance_id }}\n",
        b"#cloud-config\n- a list, not a mapping\n",
        b"#cloud-config\nkey: [unclosed\n",
        b"#cloud-config-archive\n- type: text/x-shellscript\n  content: '#!/bin/sh'\n",
        "#!/bin/sh\necho grüß\n".encode(),
    ],
    ids=["script", "jinja", "not-a-mapping", "bad-yaml", "archive", "utf-8-script"],
)
def test_other_text_goes_unchanged_into_a_multipart_next_to_the_password(given: bytes) -> None:
    first, second = parts(with_admin_password(given, HASH))
    # text/plain: cloud-init tells the type from the first line, as for the data alone.
    assert first.get_content_type() == "text/plain"
    assert first.get_payload(decode=True) == given
    assert ours(second) == {"chpasswd": {"expire": False, "users": [ROOT]}}


def test_a_mime_archive_is_kept_part_for_part() -> None:
    archive = (
        b'Content-Type: multipart/mixed; boundary="XYZ"\nMIME-Version: 1.0\n\n'
        b'--XYZ\nContent-Type: text/cloud-config; charset="us-ascii"\n\n'
        b"#cloud-config\nchpasswd:\n  users:\n  - {name: bob, password: b, type: text}\n"
        b'--XYZ\nContent-Type: text/x-shellscript; charset="us-ascii"\n\n'
        + SCRIPT
        + b"\n--XYZ--\n"  # the line break before a boundary belongs to the boundary
    )
    config_part, script_part, last = parts(with_admin_password(archive, HASH))
    assert config_part.get_content_type() == "text/cloud-config"
    assert cloud_config(config_part.get_payload(decode=True))["chpasswd"]["users"][0]["name"] == "bob"
    assert script_part.get_content_type() == "text/x-shellscript"
    assert script_part.get_payload(decode=True) == SCRIPT
    # Appended to bob's list by cloud-init's merge, not replacing it.
    assert ours(last)["chpasswd"]["users"] == [ROOT]


def test_bytes_that_are_not_text_go_as_an_opaque_part() -> None:
    blob = os.urandom(64).replace(b"\x1f", b"\x00")
    first, second = parts(with_admin_password(b"\xff" + blob, HASH))
    assert first.get_content_type() == "application/octet-stream"
    assert first.get_payload(decode=True) == b"\xff" + blob
    ours(second)


def test_gzip_too_large_to_open_goes_compressed_for_cloud_init_to_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(userdata, "MAX_UNCOMPRESSED", 10)
    packed = gzip.compress(b"#cloud-config\nhostname: big\n")
    first, second = parts(with_admin_password(packed, HASH))
    assert first.get_content_type() == "application/gzip"
    assert first.get_payload(decode=True) == packed
    ours(second)


def test_the_hash_is_written_plain_for_a_reader_of_the_drive() -> None:
    """Not base64 in a MIME part: the tiny guest (and a person) can find it in the file."""
    for given in (None, b"#cloud-config\n", SCRIPT):
        assert HASH.encode() in with_admin_password(given, HASH)
