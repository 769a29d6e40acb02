"""Storage pool and volume XML for remote daemons: formats stated, backing store present, names data."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from novakit.virt.libvirt.host import is_remote_uri
from novakit.virt.libvirt.imagecache import CachedImage
from novakit.virt.libvirt.storage import (
    StoragePoolConfig,
    StorageVolumeConfig,
    base_volume_name,
    default_pool_path,
)

HOSTILE = "a</name><path>/etc</path><name>b"


def test_overlay_states_its_format_and_its_backing_stores() -> None:
    vol = ET.fromstring(
        StorageVolumeConfig(
            "u.disk", 1 << 30, "qcow2", backing_path="/pool/_base.img.abc", backing_format="raw"
        ).to_xml()
    )
    assert vol.findtext("name") == "u.disk"
    assert (vol.findtext("capacity"), vol.find("capacity").get("unit")) == (str(1 << 30), "bytes")
    assert vol.find("target/format").get("type") == "qcow2"
    assert vol.findtext("backingStore/path") == "/pool/_base.img.abc"
    assert vol.find("backingStore/format").get("type") == "raw"
    assert vol.findtext("target/permissions/mode") == "0600"


def test_an_overlay_without_a_backing_format_is_refused() -> None:
    with pytest.raises(ValueError, match="format"):
        StorageVolumeConfig("u.disk", 1, "qcow2", backing_path="/pool/base").to_xml()


def test_plain_volume_has_no_backing_store() -> None:
    vol = ET.fromstring(StorageVolumeConfig("u.disk.swap", 64 << 20, "raw").to_xml())
    assert vol.find("backingStore") is None
    assert vol.find("target/format").get("type") == "raw"


def test_names_and_paths_stay_text() -> None:
    xml = StorageVolumeConfig(HOSTILE, 1, "raw", backing_path=HOSTILE, backing_format="raw").to_xml()
    assert HOSTILE not in xml
    vol = ET.fromstring(xml)
    assert [e.text for e in vol.iter("name")] == [HOSTILE]
    assert [e.text for e in vol.iter("path")] == [HOSTILE]
    pool = ET.fromstring(StoragePoolConfig(HOSTILE, "/var/lib/x&y").to_xml())
    assert (pool.get("type"), pool.findtext("name"), pool.findtext("target/path")) == (
        "dir",
        HOSTILE,
        "/var/lib/x&y",
    )


def test_base_volume_name_is_a_safe_file_name_keyed_by_image_and_content() -> None:
    sha = "ab" * 32
    plain = CachedImage("cirros-0.6", Path("/c/x"), "qcow2", 1, sha)
    assert base_volume_name(plain) == "_base.cirros-0.6." + sha[:16]
    odd = base_volume_name(CachedImage("../../etc/passwd", Path("/c/y"), "raw", 1, sha))
    assert "/" not in odd and ".." not in odd.removeprefix("_base.")
    other = CachedImage("cirros-0.6", Path("/c/x"), "qcow2", 1, "cd" * 32)
    assert base_volume_name(other) != base_volume_name(plain)


def test_pool_path_defaults() -> None:
    assert default_pool_path(session=False, configured=None) == "/var/lib/novakit/pool"
    assert default_pool_path(session=True, configured=None) is None  # the remote home is unknown here
    assert default_pool_path(session=True, configured="/home/u/pool") == "/home/u/pool"


@pytest.mark.parametrize(
    ("uri", "remote"),
    [
        ("qemu:///system", False),
        ("qemu+unix:///session?socket=/run/user/1001/libvirt/libvirt-sock", False),
        ("qemu+ssh://nk@127.0.0.1:2222/session", True),  # another user's daemon, even on loopback
        ("qemu+tcp://compute-1/system", True),
        ("qemu://compute-1/system", True),
        ("test:///default", False),
    ],
)
def test_which_uris_cannot_see_local_files(uri: str, remote: bool) -> None:
    assert is_remote_uri(uri) is remote
