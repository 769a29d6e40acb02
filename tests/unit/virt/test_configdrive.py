"""The config drive ISO, read back the way a guest would."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from pathlib import Path

import pycdlib
import pytest
from pydantic import SecretStr

from novakit import exceptions
from novakit.compute.messages import InstanceSpec
from novakit.virt.libvirt.configdrive import ConfigDrive, guest_mac

MakeInstance = Callable[..., InstanceSpec]


def read_iso(path: Path) -> tuple[str, dict[str, bytes], dict[str, bytes]]:
    """Volume label, files by Rock Ridge name, files by Joliet name."""
    iso = pycdlib.PyCdlib()
    iso.open(str(path))
    try:
        label = iso.pvd.volume_identifier.decode().strip()
        rr: dict[str, bytes] = {}
        joliet: dict[str, bytes] = {}
        for name in ("meta-data", "user-data", "network-config"):
            buf = io.BytesIO()
            iso.get_file_from_iso_fp(buf, rr_path=f"/{name}")
            rr[name] = buf.getvalue()
            buf = io.BytesIO()
            iso.get_file_from_iso_fp(buf, joliet_path=f"/{name}")
            joliet[name] = buf.getvalue()
    finally:
        iso.close()
    return label, rr, joliet


def test_nocloud_iso_has_label_and_files(tmp_path: Path, make_instance: MakeInstance) -> None:
    inst = make_instance(hostname="web-1", user_data=SecretStr(base64.b64encode(b"#cloud-config\n").decode()))
    macs = [guest_mac(inst.uuid, 0)]
    ConfigDrive.from_instance(inst, macs).write_iso(tmp_path / "disk.config")
    label, rr, joliet = read_iso(tmp_path / "disk.config")
    assert label == "cidata"
    assert rr == joliet
    assert rr["meta-data"].decode() == f"instance-id: {inst.uuid}\nlocal-hostname: web-1\n"
    assert rr["user-data"] == b"#cloud-config\n"
    net = json.loads(rr["network-config"])
    assert net["version"] == 1
    assert [(c["name"], c["mac_address"], c["subnets"]) for c in net["config"]] == [
        ("eth0", macs[0], [{"type": "dhcp"}])
    ]
    assert (tmp_path / "disk.config").stat().st_mode & 0o077 == 0


def test_values_that_yaml_could_misread_are_quoted(tmp_path: Path, make_instance: MakeInstance) -> None:
    inst = make_instance(hostname="a: b\nc")
    ConfigDrive.from_instance(inst, []).write_iso(tmp_path / "d")
    _, rr, _ = read_iso(tmp_path / "d")
    assert rr["meta-data"].decode().splitlines()[1] == 'local-hostname: "a: b\\nc"'


def test_without_user_data_the_file_is_empty(tmp_path: Path, make_instance: MakeInstance) -> None:
    ConfigDrive.from_instance(make_instance(), []).write_iso(tmp_path / "d")
    assert read_iso(tmp_path / "d")[1]["user-data"] == b""


def test_invalid_base64_user_data_aborts_without_quoting_it(make_instance: MakeInstance) -> None:
    secret = "top-secret-password!!"
    inst = make_instance(user_data=SecretStr(secret))
    with pytest.raises(exceptions.BuildAbortError, match="user_data is not valid base64") as err:
        ConfigDrive.from_instance(inst, [])
    assert secret not in str(err.value)


def test_guest_macs_are_stable_and_local() -> None:
    mac = guest_mac("0f8fad5b-d9cb-469f-a165-70867728950e", 0)
    assert mac == guest_mac("0f8fad5b-d9cb-469f-a165-70867728950e", 0)
    assert mac.startswith("52:54:00:")
    assert mac != guest_mac("0f8fad5b-d9cb-469f-a165-70867728950e", 1)


def test_an_admin_password_hash_joins_the_user_data_and_no_repr(
    tmp_path: Path, make_instance: MakeInstance
) -> None:
    hashed = "$6$saltsaltsaltsalt$" + "h" * 86
    inst = make_instance(
        user_data=SecretStr(base64.b64encode(b"#cloud-config\nhostname: kept\n").decode()),
        admin_password_hash=SecretStr(hashed),
    )
    drive = ConfigDrive.from_instance(inst, [])
    assert hashed not in repr(drive) and "kept" not in repr(drive)
    drive.write_iso(tmp_path / "d")
    user_data = read_iso(tmp_path / "d")[1]["user-data"].decode()
    assert user_data.startswith("#cloud-config\n")
    assert "hostname: kept" in user_data and f"password: {hashed}" in user_data
