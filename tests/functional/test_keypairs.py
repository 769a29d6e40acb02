"""Key pairs (issue 26): Nova's os-keypairs, and the key a server boots with, on both back ends.

A pair is a user's: generated (the private key handed back once, stored nowhere) or imported;
listed, shown and deleted by its user, or by an admin naming the user. ``key_name`` on create
is the requesting user's pair, checked like the other names; the server keeps the key it was
given, its guest gets it in the config drive's ``meta_data.json`` and in the cloud-config of
its user data, and the fake driver records both, as the tiny guest prints the fingerprint.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from novakit import exceptions, quota
from novakit.context import RequestContext
from novakit.keypairs import registry as keypairs
from novakit.virt import guest_ready_line
from tests.functional.cloud import Cloud, boot
from tests.functional.test_admin_password import db_holds, guest
from tests.functional.test_catalog_modules import run  # noqa: F401 (fixture)

# Made with ssh-keygen; the fingerprints are what ``ssh-keygen -l -E md5`` printed for them.
ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK4sOE2Ymel1yCVERrMmQ7iJSKVP+E1pnNPpjKlc5bN0 alice@laptop"
ED25519_FP = "9e:9e:a5:35:6b:0e:88:6d:a1:a4:30:da:cc:5b:dc:00"
RSA = (
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQDkQJVfo6LzcoRLUXW4TUBy3F90+6wV8tWJfTRDfSBBvh2i3lOgorUSghWjdV7wMKj"
    "zUuMUhNTJILOQe4KzVCJnLampIAIMkSCqzzpJqiCkfn34lsh7YstS1Cdh+bHUocDyKLdH9TtFjoD84k3J2gynsJ6HpwLBoUZjZdiki3nZ"
    "FXaAUiIxhzRtAnhUOaDlGsFE1WCkUoZuCZwiylWm+SAmqio4OuP1ipdzK1r54lRaTQoqZrAFQfSd2/xq0TBsFMb6smM1pE/lE5J0Bj5v/s"
    "xMrp0WBk9f5Xn0Bbqnse5UJJp66Z10fJmW4nFDebCvWxQ5zSbGKLbPYTq4ey+Avro5 bob@desk"
)
RSA_FP = "93:2e:9c:b1:a3:5c:03:dc:bb:6c:43:69:e1:d9:5f:41"


def create(cloud: Cloud, ctx: RequestContext, **data: Any) -> dict[str, Any]:
    return keypairs.create(cloud.db, cloud.conf, ctx, data)


# --- the resource --------------------------------------------------------------------------


def test_an_imported_key_gets_nova_s_fingerprint_and_is_listed_shown_and_deleted(
    cloud: Cloud, ctx: RequestContext
) -> None:
    made = create(cloud, ctx, name="laptop", public_key=ED25519 + "\n")  # as read from a .pub file
    assert made["fingerprint"] == ED25519_FP and made["public_key"] == ED25519
    assert made["type"] == "ssh" and made["user_id"] == ctx.user_id and "private_key" not in made
    assert create(cloud, ctx, name="desk", public_key=RSA)["fingerprint"] == RSA_FP

    assert [k["name"] for k in keypairs.list_keypairs(cloud.db, ctx)] == ["desk", "laptop"]
    shown = keypairs.show(cloud.db, ctx, "laptop")
    assert shown["fingerprint"] == ED25519_FP and shown["created_at"] is not None

    keypairs.delete(cloud.db, ctx, "laptop")
    assert [k["name"] for k in keypairs.list_keypairs(cloud.db, ctx)] == ["desk"]
    with pytest.raises(exceptions.KeypairNotFound, match="laptop"):
        keypairs.show(cloud.db, ctx, "laptop")
    with pytest.raises(exceptions.KeypairNotFound):
        keypairs.delete(cloud.db, ctx, "laptop")


@pytest.mark.parametrize(
    ("algorithm", "key_class"), [(None, ed25519.Ed25519PrivateKey), ("rsa", rsa.RSAPrivateKey)]
)
def test_a_generated_pair_hands_back_its_private_key_once_and_stores_it_nowhere(
    cloud: Cloud, ctx: RequestContext, algorithm: str | None, key_class: type
) -> None:
    made = create(cloud, ctx, name="made", **({"algorithm": algorithm} if algorithm else {}))
    private = serialization.load_ssh_private_key(made["private_key"].encode(), password=None)
    assert isinstance(private, key_class)
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    assert made["public_key"].split()[:2] == public.decode().split()
    shown = keypairs.show(cloud.db, ctx, "made")
    assert "private_key" not in shown and shown["fingerprint"] == made["fingerprint"]
    body = "".join(made["private_key"].splitlines()[1:-1])
    assert db_holds(cloud, body[:60]) == []
    if algorithm == "rsa":
        assert isinstance(private, rsa.RSAPrivateKey) and private.key_size >= 3072


def test_names_are_unique_per_user_and_another_user_s_pairs_are_not_seen(
    cloud: Cloud, ctx: RequestContext
) -> None:
    create(cloud, ctx, name="k", public_key=ED25519)
    before = cloud.snapshot()
    with pytest.raises(exceptions.KeyPairExists, match="'k' already exists") as err:
        create(cloud, ctx, name="k", public_key=RSA)
    assert err.value.code == 409
    assert cloud.snapshot() == before
    bob = RequestContext(project_id=ctx.project_id, user_id="bob", roles=["member"])
    assert create(cloud, bob, name="k", public_key=RSA)["fingerprint"] == RSA_FP  # his own "k"
    assert [k["fingerprint"] for k in keypairs.list_keypairs(cloud.db, ctx)] == [ED25519_FP]
    for call in (
        lambda: keypairs.list_keypairs(cloud.db, ctx, user_id="bob"),
        lambda: keypairs.show(cloud.db, ctx, "k", user_id="bob"),
        lambda: keypairs.delete(cloud.db, ctx, "k", user_id="bob"),
        lambda: create(cloud, ctx, name="planted", public_key=ED25519, user_id="bob"),
    ):
        with pytest.raises(exceptions.PolicyNotAuthorized, match="keypair:any_user"):
            call()
    assert keypairs.show(cloud.db, bob, "k")["fingerprint"] == RSA_FP


def test_an_admin_acts_on_another_user_s_pairs(cloud: Cloud, ctx: RequestContext) -> None:
    made = create(cloud, cloud.admin, name="given", public_key=ED25519, user_id=ctx.user_id)
    assert made["user_id"] == ctx.user_id
    assert [k["name"] for k in keypairs.list_keypairs(cloud.db, ctx)] == ["given"]
    assert [k["name"] for k in keypairs.list_keypairs(cloud.db, cloud.admin, user_id=ctx.user_id)] == [
        "given"
    ]
    assert keypairs.list_keypairs(cloud.db, cloud.admin) == []  # the admin's own
    keypairs.delete(cloud.db, cloud.admin, "given", user_id=ctx.user_id)
    assert keypairs.list_keypairs(cloud.db, ctx) == []


@pytest.mark.parametrize(
    ("data", "field", "rule"),
    [
        ({"type": "x509", "public_key": ED25519}, "type", "x509 key pairs are not supported"),
        ({"type": "gpg"}, "type", "only ssh is supported"),
        ({"public_key": "ssh-dss AAAAB3NzaC1kc3MAAACBAP"}, "public_key", "is not one of ssh-ed25519"),
        ({"public_key": "hello world"}, "public_key", "key type 'hello' is not one of"),
        ({"public_key": ED25519[:60]}, "public_key", "truncated"),
        ({"public_key": RSA[:300] + " bob@desk"}, "public_key", "truncated"),
        ({"public_key": "ssh-ed25519"}, "public_key", "truncated"),
        ({"public_key": "ssh-ed25519 !!!notbase64"}, "public_key", "not valid base64"),
        ({"public_key": 'command="/bin/sh" ' + ED25519}, "public_key", "authorized_keys options"),
        ({"public_key": ED25519 + "\n" + RSA}, "public_key", "one line holding one key"),
        ({"public_key": "ssh-ed25519 AAAA\nC3Nz"}, "public_key", "no newlines"),
        ({"public_key": "   "}, "public_key", "must not be empty"),
        ({"public_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n"}, "public_key", "is a private key"),
        ({"public_key": RSA.replace("ssh-rsa", "ssh-ed25519", 1)}, "public_key", "of another key type"),
        ({"public_key": ED25519, "algorithm": "rsa"}, "algorithm", "generated pair only"),
        ({"algorithm": "dsa"}, "algorithm", "Input should be 'ed25519' or 'rsa'"),
        ({"name": "bad/name"}, "name", "may hold only letters"),
        ({"name": " spaced"}, "name", "must not begin or end"),
        ({"name": ""}, "name", "1 to 255"),
        ({"fingerprint": "aa"}, "fingerprint", "is not a known field"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_written(
    cloud: Cloud, ctx: RequestContext, data: dict[str, Any], field: str, rule: str
) -> None:
    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        create(cloud, ctx, **{"name": "k", **data})
    assert err.value.field == field and rule in err.value.rule, err.value.message
    assert cloud.snapshot() == before


def test_the_key_pairs_quota_counts_a_user_s_pairs(cloud: Cloud, ctx: RequestContext) -> None:
    assert cloud.conf.quota.key_pairs == 100  # Nova's default
    quota.set_quota(cloud.db, ctx.project_id, "key_pairs", 2)
    create(cloud, ctx, name="one", public_key=ED25519)
    create(cloud, ctx, name="two", public_key=RSA)
    before = cloud.snapshot()
    with pytest.raises(exceptions.OverQuota, match="key_pairs .* in use 2, limit 2"):
        create(cloud, ctx, name="three")
    with pytest.raises(exceptions.OverQuota):
        keypairs.create(cloud.db, cloud.conf, ctx, {"name": "three"}, dry_run=True)
    assert cloud.snapshot() == before
    # Another user of the project has a count of his own.
    bob = RequestContext(project_id=ctx.project_id, user_id="bob", roles=["member"])
    create(cloud, bob, name="one")
    keypairs.delete(cloud.db, ctx, "one")
    create(cloud, ctx, name="three")


def test_a_dry_run_checks_everything_and_writes_and_generates_nothing(
    cloud: Cloud, ctx: RequestContext
) -> None:
    before = cloud.snapshot()
    would = keypairs.create(cloud.db, cloud.conf, ctx, {"name": "k"}, dry_run=True)
    assert would["name"] == "k" and "private_key" not in would and would["fingerprint"] is None
    assert (
        keypairs.create(cloud.db, cloud.conf, ctx, {"name": "k", "public_key": RSA}, dry_run=True)[
            "fingerprint"
        ]
        == RSA_FP
    )
    # A dry delete of a missing pair is refused as a real one.
    with pytest.raises(exceptions.KeypairNotFound):
        keypairs.delete(cloud.db, ctx, "k", dry_run=True)
    assert cloud.snapshot() == before


# --- booting with a key -------------------------------------------------------------------


def test_a_server_booted_with_a_key_delivers_it_and_keeps_it_after_the_pair_is_deleted(
    cloud: Cloud, ctx: RequestContext
) -> None:
    create(cloud, ctx, name="laptop", public_key=ED25519)
    server = boot(cloud, ctx, "keyed", key_name="laptop")
    assert cloud.api.get(ctx, server["id"])["key_name"] == "laptop"
    got = guest(cloud, server)
    assert got["public_keys"] == {"laptop": ED25519}
    assert got["ssh_authorized_keys"] == [ED25519]
    # The guest's marker ends with the key's fingerprint, as the tiny guest prints it.
    assert guest_ready_line("keyed", server["id"], key_fingerprint=ED25519_FP) in got["console"]

    keypairs.delete(cloud.db, ctx, "laptop")
    assert cloud.api.get(ctx, server["id"])["key_name"] == "laptop"
    # A rebuild without a key_name keeps the key the server was booted with, pair gone or not.
    cloud.api.rebuild(ctx, server["id"], {"image": "tiny-2"})
    assert guest(cloud, server)["ssh_authorized_keys"] == [ED25519]


def test_a_server_without_a_key_gets_none(cloud: Cloud, ctx: RequestContext) -> None:
    server = boot(cloud, ctx, "keyless")
    assert cloud.api.get(ctx, server["id"])["key_name"] is None
    got = guest(cloud, server)
    assert "public_keys" not in got and "ssh_authorized_keys" not in got
    assert guest_ready_line("keyless", server["id"]) in got["console"]


def test_the_key_joins_the_user_s_own_cloud_config(cloud: Cloud, ctx: RequestContext) -> None:
    create(cloud, ctx, name="laptop", public_key=ED25519)
    own = "#cloud-config\nssh_authorized_keys:\n  - " + RSA + "\npackages: [htop]\n"
    server = boot(cloud, ctx, "merged", key_name="laptop", user_data=base64.b64encode(own.encode()).decode())
    assert guest(cloud, server)["ssh_authorized_keys"] == [RSA, ED25519]
    # A script stays a script: the key rides in a cloud-config part beside it.
    script = base64.b64encode(b"#!/bin/sh\necho hi\n").decode()
    other = boot(cloud, ctx, "scripted", key_name="laptop", user_data=script)
    assert guest(cloud, other)["ssh_authorized_keys"] == [ED25519]


def test_an_unknown_key_name_is_refused_naming_the_field_and_nothing_is_written(
    cloud: Cloud, ctx: RequestContext
) -> None:
    bob = RequestContext(project_id=ctx.project_id, user_id="bob", roles=["member"])
    create(cloud, bob, name="bobs", public_key=RSA)
    before = cloud.snapshot()
    for name in ("doesnotexist", "bobs"):  # another user's pair is not the caller's to boot with
        with pytest.raises(exceptions.ValidationError, match="Invalid key_name provided") as err:
            cloud.api.create(ctx, {"name": "kn", "flavor": "m1.small", "image": "tiny", "key_name": name})
        assert err.value.field == "key_name"
        with pytest.raises(exceptions.ValidationError, match="Invalid key_name provided"):
            cloud.api.create(
                ctx, {"name": "kn", "flavor": "m1.small", "image": "tiny", "key_name": name}, dry_run=True
            )
    assert cloud.snapshot() == before


def test_a_rebuild_can_take_a_new_key(cloud: Cloud, ctx: RequestContext) -> None:
    create(cloud, ctx, name="old", public_key=ED25519)
    create(cloud, ctx, name="new", public_key=RSA)
    server = boot(cloud, ctx, "rekeyed", key_name="old")
    cloud.api.rebuild(ctx, server["id"], {"image": "tiny", "key_name": "new"})
    assert cloud.api.get(ctx, server["id"])["key_name"] == "new"
    got = guest(cloud, server)
    assert got["public_keys"] == {"new": RSA} and got["ssh_authorized_keys"] == [RSA]
    assert guest_ready_line("rekeyed", server["id"], key_fingerprint=RSA_FP) in got["console"]

    before = cloud.snapshot()
    with pytest.raises(exceptions.ValidationError, match="Invalid key_name provided") as err:
        cloud.api.rebuild(ctx, server["id"], {"image": "tiny", "key_name": "missing"})
    assert err.value.field == "options.key_name"
    assert cloud.snapshot() == before


def test_the_config_drive_files_carry_the_key_as_nova_s_do(cloud: Cloud, ctx: RequestContext) -> None:
    from novakit.host.messages import FlavorSpec, ImageSpec, InstanceSpec
    from novakit.virt.libvirt.configdrive import ConfigDrive

    spec = InstanceSpec(
        uuid="6f1a0d4e-0000-4000-8000-000000000001",
        name="cd",
        hostname="cd",
        project_id="p",
        user_id="u",
        flavor=FlavorSpec(name="f", vcpus=1, memory_mb=64, root_gb=1),
        image=ImageSpec(id="i", name="i"),
        key_name="laptop",
        key_data=ED25519,
    )
    files = ConfigDrive.from_instance(spec, []).files()
    meta = json.loads(files["meta_data.json"])
    assert meta["public_keys"] == {"laptop": ED25519}
    assert meta["keys"] == [{"name": "laptop", "type": "ssh", "data": ED25519}]
    assert yaml.safe_load(files["meta-data"])["public-keys"] == [ED25519]
    assert yaml.safe_load(files["user-data"]) == {"ssh_authorized_keys": [ED25519]}
    assert files["user-data"].startswith(b"#cloud-config\n")


# --- the keypair module (in process, as Ansible runs it) -----------------------------------


def test_the_keypair_module_imports_generates_keeps_and_deletes(
    cloud: Cloud,
    run: Any,  # noqa: F811
    ctx: RequestContext,
    tmp_path: Any,
) -> None:
    before = cloud.snapshot()
    plan = run("keypair", {"name": "laptop", "public_key": ED25519}, check=True)
    assert plan["changed"] and "keypair" not in plan and cloud.snapshot() == before
    made = run("keypair", {"name": "laptop", "public_key": ED25519})
    assert made["changed"] and made["keypair"]["fingerprint"] == ED25519_FP
    pub = tmp_path / "laptop.pub"
    pub.write_text(ED25519 + "\n")
    assert run("keypair", {"name": "laptop", "public_key_file": str(pub)})["changed"] is False
    assert run("keypair", {"name": "laptop"})["changed"] is False  # no key asked: kept as it is
    clash = run("keypair", {"name": "laptop", "public_key": RSA})
    assert clash["failed"] and "cannot change" in clash["msg"]
    bad = run("keypair", {"name": "bad", "public_key": ED25519[:50]})
    assert bad["failed"] and "public_key" in bad["msg"] and "truncated" in bad["msg"]

    generated = run("keypair", {"name": "deploy", "algorithm": "rsa"})
    assert generated["changed"] and "PRIVATE KEY" in generated["keypair"]["private_key"]
    assert "private_key" not in json.dumps(generated["diff"])
    again = run("keypair", {"name": "deploy"})
    assert again["changed"] is False and "private_key" not in again["keypair"]

    # An admin names another user's pair; a member may not.
    given = run("keypair", {"name": "given", "public_key": RSA, "user_id": ctx.user_id})
    assert given["keypair"]["user_id"] == ctx.user_id
    assert [k["name"] for k in keypairs.list_keypairs(cloud.db, ctx)] == ["given"]
    member = {"project": ctx.project_id, "user": ctx.user_id, "roles": ["member"]}
    refused = run("keypair", {**member, "name": "x", "public_key": RSA, "user_id": "admin"})
    assert refused["failed"] and "keypair:any_user" in refused["msg"]

    assert run("keypair", {"name": "laptop", "state": "absent"}, check=True)["changed"]
    assert run("keypair", {"name": "laptop", "state": "absent"})["changed"]
    assert run("keypair", {"name": "laptop", "state": "absent"})["changed"] is False
    assert [k["name"] for k in keypairs.list_keypairs(cloud.db, cloud.admin)] == ["deploy"]


def test_the_server_modules_take_key_name(cloud: Cloud, run: Any) -> None:  # noqa: F811
    create(cloud, cloud.admin, name="old", public_key=ED25519)
    create(cloud, cloud.admin, name="new", public_key=RSA)
    made = run("server", {"name": "mod", "flavor": "m1.small", "image": "tiny", "key_name": "old"})
    assert made["server"]["key_name"] == "old", made
    refused = run("server", {"name": "other", "flavor": "m1.small", "image": "tiny", "key_name": "nope"})
    assert refused["failed"] and "Invalid key_name provided" in refused["msg"]
    rebuilt = run("server_action", {"server": "mod", "action": "rebuild", "image": "tiny", "key_name": "new"})
    assert rebuilt["changed"], rebuilt
    server = cloud.api.get(cloud.admin, "mod")
    assert server["key_name"] == "new" and guest(cloud, server)["ssh_authorized_keys"] == [RSA]
