"""admin_password reaches the guest, as a SHA-512 crypt hash, and its clear text is nowhere (issue 13).

The guest gets the hash through the config drive's user data; the fake driver
records what it was handed, as the tiny guest prints it. The clear text (and
its base64) must be in no row of any table, no notification, no action, event
or fault, and no request sent to a host.
"""

from __future__ import annotations

import base64
import gzip
import json
from email import message_from_bytes
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import text

from novakit import exceptions, playflow
from novakit.compute.passwords import sha512_crypt
from novakit.context import RequestContext
from novakit.db.models import Base
from novakit.host.manager import ComputeManager
from novakit.host.messages import ComputeRequest, InstanceSpec, join_secrets
from novakit.virt import admin_password_line
from novakit.virt.libvirt.configdrive import ConfigDrive
from tests.functional.cloud import HOSTS, Cloud, boot
from tests.unit.virt.test_configdrive import read_iso

PASSWORD = "Tr0ub4dor&3-admin"
NEW_PASSWORD = "c0rrect-h0rse-b4ttery"
OK = {"name": "pw", "flavor": "m1.small", "image": "tiny"}


def clear_forms(password: str) -> list[str]:
    """The password as it could leak: itself, and base64 (as user data travels)."""
    raw = password.encode()
    return [password, base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()]


def db_holds(cloud: Cloud, needle: str) -> list[str]:
    """Every table.column of every row whose value (as text, JSON for JSON columns) holds ``needle``."""
    found = []
    with cloud.db.engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            for row in conn.execute(text(f"SELECT * FROM {table.name}")):
                for column, value in row._mapping.items():
                    blob = value if isinstance(value, str) else json.dumps(value, default=str)
                    if needle in blob:
                        found.append(f"{table.name}.{column}")
    return found


def assert_clear_text_nowhere(cloud: Cloud, ctx: RequestContext, uuid: str, *passwords: str) -> None:
    audit = json.dumps(cloud.api.list_actions(cloud.admin, uuid), default=str)
    view = json.dumps(cloud.api.get(ctx, uuid), default=str)
    notes = cloud.conf.notifications_file.read_text() if cloud.conf.notifications_file else ""
    for password in passwords:
        for form in clear_forms(password):
            assert db_holds(cloud, form) == []
            assert form not in audit and form not in view and form not in notes


def stored_hash(cloud: Cloud, uuid: str) -> str | None:
    with cloud.db.engine.connect() as conn:
        return conn.execute(
            text("SELECT admin_password_hash FROM instances WHERE uuid = :u"), {"u": uuid}
        ).scalar_one()


def guest(cloud: Cloud, server: dict[str, Any]) -> dict[str, Any]:
    """The fake hypervisor's record of the server's guest."""
    host = cloud.api.get(cloud.admin, server["id"])["host"]  # a member's view names no host
    state = json.loads(cloud.fake(host).state_file.read_text())
    record: dict[str, Any] = state["instances"][server["id"]]
    return record


def verifies(password: str, hashed: str) -> bool:
    _, scheme, salt, _digest = hashed.split("$")
    return scheme == "6" and sha512_crypt(password, salt) == hashed


@pytest.fixture
def notes_file(cloud: Cloud, tmp_path: Path) -> Path:
    path = tmp_path / "notifications.jsonl"
    cloud.conf.notifications_file = path  # before the conductor is made, which reads it
    return path


def test_create_hands_the_guest_a_hash_and_keeps_no_clear_text(
    cloud: Cloud, ctx: RequestContext, notes_file: Path
) -> None:
    server = boot(cloud, ctx, "pw-create", admin_password=PASSWORD)
    got = guest(cloud, server)["admin_password_hash"]
    assert verifies(PASSWORD, got)
    assert stored_hash(cloud, server["id"]) == got
    # As the tiny guest prints it: the sha256 of the hash, before the ready marker.
    console = cloud.fake(cloud.api.get(cloud.admin, server["id"])["host"]).get_console_output(
        InstanceSpec.model_construct(uuid=server["id"])
    )
    assert admin_password_line(got) in console.splitlines()
    assert PASSWORD not in console and got not in console
    assert_clear_text_nowhere(cloud, ctx, server["id"], PASSWORD)
    # The hash is a secret too: shown to no one, announced nowhere, in no audit record.
    assert got not in json.dumps(cloud.api.get(cloud.admin, server["id"]), default=str)
    assert got not in notes_file.read_text()
    assert got not in json.dumps(cloud.api.list_actions(cloud.admin, server["id"]), default=str)
    assert db_holds(cloud, got) == ["instances.admin_password_hash"]


def test_the_playbook_path_builds_from_the_records_with_the_hash_only(
    cloud: Cloud, ctx: RequestContext, notes_file: Path
) -> None:
    """Play 1 records and schedules; the build requests a later play sends carry the hash."""
    scheduled = playflow.run_step(
        cloud.api, ctx, {"step": "schedule", "server": {**OK, "name": "pw-play", "admin_password": PASSWORD}}
    )
    assert PASSWORD not in json.dumps(scheduled, default=str)
    (uuid,) = scheduled["instances"]
    (raw,) = scheduled["requests"]
    (spec,) = raw["instances"]
    # The request travels without the hash (its task output shows); the hash comes apart, for
    # the compute task's no_log option, and is put back on the host.
    assert spec["admin_password_hash"] is None and "admin_password" not in spec
    assert scheduled["secrets"] == {uuid: {"admin_password_hash": stored_hash(cloud, uuid)}}
    request = ComputeRequest.model_validate(join_secrets(raw, scheduled["secrets"]))
    assert request.instances[0].admin_password_hash.get_secret_value() == stored_hash(cloud, uuid)
    assert stored_hash(cloud, uuid) not in repr(request)  # a secret in any log line
    result = ComputeManager(request.host, cloud.fake(request.host)).handle(request)
    playflow.run_step(
        cloud.api,
        ctx,
        {
            "step": "record",
            "requests": scheduled["requests"],
            "results": {request.host: {"results": [result.model_dump(mode="json")]}},
        },
    )
    server = cloud.api.get(ctx, uuid)
    assert server["status"] == "ACTIVE"
    assert verifies(PASSWORD, guest(cloud, server)["admin_password_hash"])
    assert_clear_text_nowhere(cloud, ctx, uuid, PASSWORD)


def test_rebuild_sets_a_new_password_and_without_one_keeps_the_last(
    cloud: Cloud, ctx: RequestContext, notes_file: Path
) -> None:
    server = boot(cloud, ctx, "pw-rebuild", admin_password=PASSWORD)
    first = stored_hash(cloud, server["id"])
    assert first is not None

    rebuilt = cloud.api.rebuild(ctx, server["id"], {"image": "tiny-2", "admin_password": NEW_PASSWORD})
    assert rebuilt["status"] == "ACTIVE"
    second = guest(cloud, rebuilt)["admin_password_hash"]
    assert second == stored_hash(cloud, server["id"]) != first
    assert verifies(NEW_PASSWORD, second) and not verifies(PASSWORD, second)

    again = cloud.api.rebuild(ctx, server["id"], {"image": "tiny"})
    assert guest(cloud, again)["admin_password_hash"] == second
    assert_clear_text_nowhere(cloud, ctx, server["id"], PASSWORD, NEW_PASSWORD)


SCRIPT = b"#!/bin/sh\necho hello from the user\n"
MIME = (
    b'Content-Type: multipart/mixed; boundary="B"\nMIME-Version: 1.0\n\n'
    b"--B\nContent-Type: text/x-shellscript\n\n" + SCRIPT + b"\n--B--\n"
)


@pytest.mark.parametrize(
    "user_data",
    [None, b"#cloud-config\npackages: [htop]\n", gzip.compress(b"#cloud-config\npackages: [htop]\n")],
    ids=["none", "cloud-config", "gzipped-cloud-config"],
)
def test_the_config_drive_holds_one_cloud_config_with_the_users_keys(
    cloud: Cloud, ctx: RequestContext, tmp_path: Path, user_data: bytes | None
) -> None:
    files = _drive_of_a_new_server(cloud, ctx, tmp_path, user_data)
    config = yaml.safe_load(files["user-data"])
    assert files["user-data"].startswith(b"#cloud-config\n")
    (entry,) = config["chpasswd"]["users"]
    assert entry["name"] == "root" and entry["type"] == "hash" and verifies(PASSWORD, entry["password"])
    assert config["chpasswd"]["expire"] is False
    if user_data is not None:
        assert config["packages"] == ["htop"]


@pytest.mark.parametrize("user_data", [SCRIPT, MIME], ids=["script", "mime"])
def test_the_config_drive_keeps_other_user_data_next_to_a_cloud_config_part(
    cloud: Cloud, ctx: RequestContext, tmp_path: Path, user_data: bytes
) -> None:
    files = _drive_of_a_new_server(cloud, ctx, tmp_path, user_data)
    leaves = [p for p in message_from_bytes(files["user-data"]).walk() if not p.is_multipart()]
    *users, ours = leaves
    assert [p.get_payload(decode=True) for p in users] == [SCRIPT]
    assert ours.get_content_type() == "text/cloud-config"
    (entry,) = yaml.safe_load(ours.get_payload(decode=True))["chpasswd"]["users"]
    assert entry["name"] == "root" and verifies(PASSWORD, entry["password"])


def _drive_of_a_new_server(
    cloud: Cloud, ctx: RequestContext, tmp_path: Path, user_data: bytes | None
) -> dict[str, bytes]:
    """The config drive the libvirt driver would write for a server created with PASSWORD."""
    extra = {"user_data": base64.b64encode(user_data).decode()} if user_data is not None else {}
    server = boot(cloud, ctx, "pw-drive", admin_password=PASSWORD, **extra)
    # The instance's spec as a host gets it: built from the records.
    (spec,) = cloud.api.conductor.prepare_action(ctx, server["id"], "reboot").instances
    ConfigDrive.from_instance(spec, []).write_iso(tmp_path / "disk.config")
    _, files, _ = read_iso(tmp_path / "disk.config")
    assert PASSWORD.encode() not in files["user-data"]
    return files


def _hosts_cannot_set_it(cloud: Cloud, hosts: list[str]) -> None:
    for host in hosts:
        cloud.add_host(host, supports_admin_password=False)  # registering again drops the trait


def test_a_create_no_host_can_deliver_is_refused_and_writes_nothing(
    cloud: Cloud, ctx: RequestContext
) -> None:
    _hosts_cannot_set_it(cloud, list(HOSTS))
    before = cloud.snapshot()
    for dry_run in (True, False):
        with pytest.raises(exceptions.ValidationError) as err:
            cloud.api.create(ctx, {**OK, "admin_password": PASSWORD}, dry_run=dry_run)
        assert err.value.field == "admin_password"
        assert "CUSTOM_ADMIN_PASSWORD" in str(err.value) and PASSWORD not in str(err.value)
    assert cloud.snapshot() == before
    assert cloud.snapshot()["instances"] == []
    # Without a password the same request goes through.
    boot(cloud, ctx, "no-pw")


def test_a_create_without_a_config_drive_is_refused(cloud: Cloud, ctx: RequestContext) -> None:
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError, match="config drive") as err:
        cloud.api.create(ctx, {**OK, "admin_password": PASSWORD, "config_drive": False})
    assert err.value.field == "admin_password"
    assert cloud.snapshot() == before


def test_only_hosts_that_can_deliver_are_chosen(cloud: Cloud, ctx: RequestContext) -> None:
    _hosts_cannot_set_it(cloud, ["compute-1", "compute-2"])
    servers = cloud.api.create(ctx, {**OK, "max_count": 4, "admin_password": PASSWORD})
    assert {s["host"] for s in cloud.api.list(cloud.admin)} == {"compute-3"}
    assert all(verifies(PASSWORD, guest(cloud, s)["admin_password_hash"]) for s in servers)


def test_a_rebuild_its_host_cannot_deliver_is_refused_and_changes_nothing(
    cloud: Cloud, ctx: RequestContext
) -> None:
    server = boot(cloud, ctx, "pw-host")
    _hosts_cannot_set_it(cloud, [server["host"]])
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        cloud.api.rebuild(ctx, server["id"], {"image": "tiny-2", "admin_password": PASSWORD})
    assert err.value.field == "options.admin_password" and "the server's host cannot set it" in str(err.value)
    assert server["host"] not in str(err.value)
    assert cloud.snapshot() == before


def test_a_host_refuses_a_password_it_cannot_deliver_rather_than_drop_it(
    cloud: Cloud, ctx: RequestContext
) -> None:
    """A request that reached a host anyway (its driver changed since) fails there, naming the field."""
    server = boot(cloud, ctx, "pw-late", admin_password=PASSWORD)
    (spec,) = cloud.api.conductor.prepare_action(ctx, server["id"], "reboot").instances
    spec.uuid = "7a0c3b8e-2f7e-4d7e-9a51-1d6c2e0f4b11"  # another guest, on a host that cannot
    host = "compute-9"
    driver = cloud.fake(host)
    driver.capabilities = {**driver.capabilities, "supports_admin_password": False}
    request = ComputeRequest(request_id="req-late", host=host, operation="build", instances=[spec])
    (result,) = ComputeManager(host, driver).handle(request).results
    assert not result.ok and result.fault is not None
    assert "admin_password" in result.fault.message and "cannot set it" in result.fault.message
    assert spec.uuid not in driver.list_instances()

    spec.config_drive = False
    (result,) = ComputeManager(host, cloud.fake(host)).handle(request).results
    assert not result.ok and result.fault is not None and "config drive" in result.fault.message


@pytest.mark.parametrize(
    "password,rule", [("", "1 to 255"), ("x" * 256, "1 to 255"), ("pass\x00word", "control characters")]
)
def test_bad_passwords_are_refused_by_name_without_being_quoted(
    cloud: Cloud, ctx: RequestContext, password: str, rule: str
) -> None:
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        cloud.api.create(ctx, {**OK, "admin_password": password})
    assert err.value.field == "admin_password" and rule in str(err.value)
    if password:
        assert password not in str(err.value)
    assert cloud.snapshot() == before
