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
from novakit.host.messages import FixedIp, InstanceSpec, NetworkSpec
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
        for name in ("meta-data", "user-data", "network-config", "meta_data.json"):
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
    assert net == {
        "version": 2,
        "ethernets": {"eth0": {"match": {"macaddress": macs[0]}, "set-name": "eth0", "dhcp4": True}},
    }
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


def test_fixed_ips_are_static_and_other_nics_keep_dhcp(tmp_path: Path, make_instance: MakeInstance) -> None:
    """What cloud-init applies: port addresses by MAC, one default route, DNS; DHCP elsewhere."""
    inst = make_instance(
        networks=[
            NetworkSpec(
                type="network",
                source="tenant",
                mac="fa:16:3e:00:00:01",
                port_id="p1",
                fixed_ips=[
                    FixedIp(
                        address="10.0.0.5",
                        cidr="10.0.0.0/24",
                        gateway="10.0.0.1",
                        dns_nameservers=["10.0.0.2"],
                    )
                ],
            ),
            NetworkSpec(
                type="bridge",
                source="br-data",
                mac="fa:16:3e:00:00:02",
                port_id="p2",
                fixed_ips=[FixedIp(address="172.16.5.9", cidr="172.16.0.0/16", gateway="172.16.0.1")],
            ),
            NetworkSpec(type="network", source="default", mac="fa:16:3e:00:00:03"),
        ]
    )
    macs = [n.mac or "" for n in inst.networks]
    ConfigDrive.from_instance(inst, macs).write_iso(tmp_path / "d")
    net = json.loads(read_iso(tmp_path / "d")[1]["network-config"])
    assert net == {
        "version": 2,
        "ethernets": {
            "eth0": {
                "match": {"macaddress": "fa:16:3e:00:00:01"},
                "set-name": "eth0",
                "addresses": ["10.0.0.5/24"],
                "routes": [{"to": "0.0.0.0/0", "via": "10.0.0.1"}],
                "nameservers": {"addresses": ["10.0.0.2"]},
            },
            # A second gateway would be a second default route: only the first NIC's counts.
            "eth1": {
                "match": {"macaddress": "fa:16:3e:00:00:02"},
                "set-name": "eth1",
                "addresses": ["172.16.5.9/16"],
            },
            "eth2": {"match": {"macaddress": "fa:16:3e:00:00:03"}, "set-name": "eth2", "dhcp4": True},
        },
    }


def test_metadata_reaches_meta_data_json(tmp_path: Path, make_instance: MakeInstance) -> None:
    inst = make_instance(metadata={"novakit.ping": "10.0.0.6", "role": 'db"1'})
    ConfigDrive.from_instance(inst, []).write_iso(tmp_path / "d")
    _, rr, _ = read_iso(tmp_path / "d")
    assert json.loads(rr["meta_data.json"]) == {
        "uuid": inst.uuid,
        "hostname": inst.hostname,
        "meta": {"novakit.ping": "10.0.0.6", "role": 'db"1'},
    }
    assert rr["meta-data"].decode().startswith("instance-id: ")


def test_a_bad_fixed_ip_aborts_the_build_naming_the_field(
    tmp_path: Path, make_instance: MakeInstance
) -> None:
    inst = make_instance(
        networks=[
            NetworkSpec(
                type="network",
                source="n",
                mac="fa:16:3e:00:00:01",
                fixed_ips=[FixedIp(address="10.0.0.999", cidr="10.0.0.0/24")],
            )
        ]
    )
    with pytest.raises(exceptions.BuildAbortError, match=r"networks\[0\]\.fixed_ips"):
        ConfigDrive.from_instance(inst, ["fa:16:3e:00:00:01"]).write_iso(tmp_path / "d")
    assert not (tmp_path / "d").exists()
