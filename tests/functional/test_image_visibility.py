"""Glance's image visibility: who lists, shows and boots from which image.

Project A snapshots a server; project B must not see the snapshot anywhere (list, show, boot,
rebuild, rescue, a volume made of it), in the same words as for an image that does not exist,
until A shares it and B accepts, or A makes it community. Members never see where an image's
file is (``location``) or which host wrote it (``properties.image_host``).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, insert, select

from novakit import exceptions
from novakit.catalog import image_members, images
from novakit.context import RequestContext
from novakit.db import migration
from novakit.db.models import Image
from novakit.volume import volumes
from tests.functional.cloud import Cloud, boot

LOCATION = "/var/lib/novakit/images/base.qcow2"


@pytest.fixture
def alice() -> RequestContext:
    return RequestContext("project-a", "alice", ["member"])


@pytest.fixture
def bob() -> RequestContext:
    return RequestContext("project-b", "bob", ["member"])


def _snapshot(
    cloud: Cloud, ctx: RequestContext, server: str = "web", name: str = "web-snap"
) -> dict[str, Any]:
    boot(cloud, ctx, server)
    cloud.api.act(ctx, server, "create_image", {"name": name})
    return next(i for i in images.list_images(cloud.db, ctx) if i["name"] == name)


def _names(cloud: Cloud, ctx: RequestContext, **kw: Any) -> set[str]:
    return {i["name"] for i in images.list_images(cloud.db, ctx, **kw)}


def _not_found_alike(cloud: Cloud, call: Any, ref: str) -> None:
    """Refused exactly as an image that does not exist, and nothing changed."""
    before = cloud.snapshot()
    with pytest.raises(exceptions.ImageNotFound) as refused:
        call()
    assert str(refused.value) == f"Image {ref} could not be found."
    assert cloud.snapshot() == before


def test_a_snapshot_is_private_to_its_project(
    cloud: Cloud, alice: RequestContext, bob: RequestContext
) -> None:
    snap = _snapshot(cloud, alice)
    assert (snap["visibility"], snap["owner"]) == ("private", "project-a")
    assert "web-snap" in _names(cloud, alice)
    assert "web-snap" not in _names(cloud, bob)
    assert "web-snap" not in _names(cloud, bob, visibility="community")
    boot(cloud, bob, "mine")
    for ref in (snap["id"], "web-snap"):
        _not_found_alike(cloud, lambda: images.show(cloud.db, bob, ref), ref)  # noqa: B023
        _not_found_alike(
            cloud,
            lambda: cloud.api.create(bob, {"name": "steal", "flavor": "m1.small", "image": ref}),  # noqa: B023
            ref,
        )
        _not_found_alike(cloud, lambda: cloud.api.act(bob, "mine", "rebuild", {"image": ref}), ref)  # noqa: B023
        _not_found_alike(cloud, lambda: cloud.api.act(bob, "mine", "rescue", {"image": ref}), ref)  # noqa: B023
        _not_found_alike(
            cloud,
            lambda: volumes.create(cloud.api.conductor, bob, "v", 20, image=ref),  # noqa: B023
            ref,
        )
    # Its own project boots from it; an admin sees it too.
    assert cloud.api.create(alice, {"name": "copy", "flavor": "m1.small", "image": "web-snap"})[0][
        "status"
    ] == ("ACTIVE")
    assert images.show(cloud.db, cloud.admin, snap["id"])["owner"] == "project-a"


def test_members_never_see_where_an_image_is_or_which_host_wrote_it(
    cloud: Cloud, alice: RequestContext
) -> None:
    images.create(cloud.db, cloud.admin, {"name": "base", "location": LOCATION})
    snap = _snapshot(cloud, alice)
    for shown in (*images.list_images(cloud.db, alice), images.show(cloud.db, alice, snap["id"])):
        assert "location" not in shown, shown
        assert "image_host" not in shown["properties"], shown
        assert not any(host in str(shown) for host in ("compute-1", "compute-2", "compute-3")), shown
        assert "/var/lib/novakit" not in str(shown) and str(cloud.fake_dir) not in str(shown)
    operator = images.show(cloud.db, cloud.admin, snap["id"])
    assert operator["location"] and operator["properties"]["image_host"].startswith("compute-")
    assert images.show(cloud.db, cloud.admin, "base")["location"] == LOCATION


def test_an_image_shared_with_a_project_is_its_once_it_accepts(
    cloud: Cloud, alice: RequestContext, bob: RequestContext
) -> None:
    snap = _snapshot(cloud, alice)
    # Only a shared image has members.
    with pytest.raises(exceptions.ValidationError, match="only a shared image has members"):
        image_members.add_member(cloud.db, alice, snap["id"], "project-b")
    # Another project can neither share nor see it.
    _not_found_alike(cloud, lambda: images.set_visibility(cloud.db, bob, snap["id"], "shared"), snap["id"])
    images.set_visibility(cloud.db, alice, snap["id"], "shared")
    added = image_members.add_member(cloud.db, alice, snap["id"], "project-b")
    assert (added["member_id"], added["status"]) == ("project-b", "pending")
    # Pending: not B's to list or boot, but B may answer.
    assert "web-snap" not in _names(cloud, bob)
    _not_found_alike(
        cloud,
        lambda: cloud.api.create(bob, {"name": "b1", "flavor": "m1.small", "image": snap["id"]}),
        snap["id"],
    )
    assert [m["status"] for m in image_members.list_members(cloud.db, bob, snap["id"])] == ["pending"]
    image_members.set_member_status(cloud.db, bob, snap["id"], "accepted")
    assert "web-snap" in _names(cloud, bob)
    assert (
        cloud.api.create(bob, {"name": "b1", "flavor": "m1.small", "image": snap["id"]})[0]["status"]
        == "ACTIVE"
    )
    shown = images.show(cloud.db, bob, snap["id"])
    assert "location" not in shown and "image_host" not in shown["properties"]
    # A third project sees nothing of it, and cannot accept it for itself.
    carol = RequestContext("project-c", "carol", ["member"])
    assert "web-snap" not in _names(cloud, carol)
    _not_found_alike(
        cloud, lambda: image_members.set_member_status(cloud.db, carol, snap["id"], "accepted"), snap["id"]
    )
    # B may not change it, nor name another project's membership.
    with pytest.raises(exceptions.Forbidden):
        images.set_visibility(cloud.db, bob, snap["id"], "community")
    with pytest.raises(exceptions.PolicyNotAuthorized):
        image_members.set_member_status(cloud.db, bob, snap["id"], "accepted", member="project-c")
    # Rejected: gone again for B.
    image_members.set_member_status(cloud.db, bob, snap["id"], "rejected")
    assert "web-snap" not in _names(cloud, bob)
    # The owner lists and removes members.
    assert [
        (m["member_id"], m["status"]) for m in image_members.list_members(cloud.db, alice, snap["id"])
    ] == [("project-b", "rejected")]
    with pytest.raises(exceptions.Conflict):
        image_members.add_member(cloud.db, alice, snap["id"], "project-b")
    image_members.remove_member(cloud.db, alice, snap["id"], "project-b")
    assert image_members.list_members(cloud.db, alice, snap["id"]) == []
    _not_found_alike(cloud, lambda: image_members.list_members(cloud.db, bob, snap["id"]), snap["id"])


def test_a_shared_image_made_private_again_is_not_its_members(
    cloud: Cloud, alice: RequestContext, bob: RequestContext
) -> None:
    snap = _snapshot(cloud, alice)
    images.set_visibility(cloud.db, alice, snap["id"], "shared")
    image_members.add_member(cloud.db, alice, snap["id"], "project-b")
    image_members.set_member_status(cloud.db, bob, snap["id"], "accepted")
    images.set_visibility(cloud.db, alice, snap["id"], "private")
    assert "web-snap" not in _names(cloud, bob)


def test_a_community_image_is_found_by_name_and_listed_only_when_asked(
    cloud: Cloud, alice: RequestContext, bob: RequestContext
) -> None:
    snap = _snapshot(cloud, alice)
    images.set_visibility(cloud.db, alice, snap["id"], "community")
    assert "web-snap" not in _names(cloud, bob)
    assert _names(cloud, bob, visibility="community") == {"web-snap"}
    assert images.show(cloud.db, bob, "web-snap")["visibility"] == "community"
    assert (
        cloud.api.create(bob, {"name": "b1", "flavor": "m1.small", "image": "web-snap"})[0]["status"]
        == "ACTIVE"
    )


def test_only_an_admin_makes_an_image_public_and_an_admins_images_are_public_unless_said(
    cloud: Cloud, alice: RequestContext, bob: RequestContext
) -> None:
    snap = _snapshot(cloud, alice)
    before = cloud.snapshot()
    with pytest.raises(exceptions.PolicyNotAuthorized, match="image:publicize"):
        images.set_visibility(cloud.db, alice, snap["id"], "public")
    assert cloud.snapshot() == before
    assert images.set_visibility(cloud.db, cloud.admin, snap["id"], "public")["visibility"] == "public"
    assert "web-snap" in _names(cloud, bob)
    # A public image is not another project's to change.
    with pytest.raises(exceptions.Forbidden, match="only its owner"):
        images.set_visibility(cloud.db, bob, snap["id"], "private")

    assert (
        images.create(cloud.db, cloud.admin, {"name": "pub", "location": LOCATION})["visibility"] == "public"
    )
    hidden = images.create(
        cloud.db, cloud.admin, {"name": "hidden", "location": LOCATION, "visibility": "private"}
    )
    assert (hidden["visibility"], hidden["owner"]) == ("private", cloud.admin.project_id)
    assert "pub" in _names(cloud, bob) and "hidden" not in _names(cloud, bob)


def test_a_private_image_of_another_project_does_not_take_a_snapshots_name(
    cloud: Cloud, alice: RequestContext, bob: RequestContext
) -> None:
    _snapshot(cloud, alice, "web", "backup")
    theirs = _snapshot(cloud, bob, "db", "backup")
    assert theirs["owner"] == "project-b"
    assert {i["owner"] for i in images.list_images(cloud.db, cloud.admin) if i["name"] == "backup"} == {
        "project-a",
        "project-b",
    }
    # Each project boots its own by name.
    assert (
        cloud.api.create(bob, {"name": "b2", "flavor": "m1.small", "image": "backup"})[0]["image"]
        == theirs["id"]
    )


def test_a_shelved_image_is_private_and_its_server_unshelves(
    cloud: Cloud, alice: RequestContext, bob: RequestContext
) -> None:
    boot(cloud, alice, "web")
    cloud.api.act(alice, "web", "shelve")
    shelved = [i for i in images.list_images(cloud.db) if i["properties"].get("image_type") == "shelved"]
    assert [(i["visibility"], i["owner"]) for i in shelved] == [("private", "project-a")]
    assert not [
        i for i in images.list_images(cloud.db, bob) if i["properties"].get("image_type") == "shelved"
    ]
    _not_found_alike(
        cloud,
        lambda: cloud.api.create(bob, {"name": "b", "flavor": "m1.small", "image": shelved[0]["id"]}),
        shelved[0]["id"],
    )
    cloud.api.act(alice, "web", "unshelve")
    assert cloud.api.get(alice, "web")["status"] == "ACTIVE"


def test_the_upgrade_makes_the_snapshots_written_before_it_private(tmp_path: Path) -> None:
    """Before 0009 every image was written public, snapshots too: they become their project's."""
    engine = create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    migration.upgrade(engine, "0008")
    row = {
        "disk_format": "raw",
        "container_format": "bare",
        "size": 1,
        "location": "/x",
        "min_disk": 0,
        "min_ram": 0,
        "status": "active",
        "visibility": "public",
        "created_at": dt.datetime(2026, 1, 1),
    }
    with engine.begin() as conn:
        conn.execute(
            insert(Image.__table__),
            [
                {**row, "uuid": "u-base", "name": "base", "project_id": "admin", "properties": {}},
                {
                    **row,
                    "uuid": "u-snap",
                    "name": "snap",
                    "project_id": "p1",
                    "properties": {"image_type": "snapshot"},
                },
                {
                    **row,
                    "uuid": "u-shelved",
                    "name": "sh",
                    "project_id": "p1",
                    "properties": {"image_type": "shelved"},
                },
            ],
        )
    migration.upgrade(engine)
    with engine.connect() as conn:
        got = dict(conn.execute(select(Image.__table__.c.uuid, Image.__table__.c.visibility)).all())
    engine.dispose()
    assert got == {"u-base": "public", "u-snap": "private", "u-shelved": "private"}
