"""Notifications as Nova emits them: JSON lines in the configured file, and to subscribers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from novakit import notifications
from novakit.context import RequestContext
from novakit.heal.manager import heal
from tests.functional.cloud import HOSTS, Cloud, boot

USER_DATA = "I2Nsb3VkLWNvbmZpZwpwYXNzd29yZDogaHVudGVyMgo="  # "#cloud-config\npassword: hunter2\n"


@pytest.fixture
def notes(cloud: Cloud, tmp_path: Path) -> Iterator[tuple[Path, list[dict[str, Any]]]]:
    """The file the cloud writes notifications to, and what a subscriber received."""
    path = tmp_path / "notifications" / "novakit.jsonl"
    cloud.conf.notifications_file = path  # before the conductor is made, which reads it
    received: list[dict[str, Any]] = []
    unsubscribe = notifications.subscribe(received.append)
    yield path, received
    unsubscribe()


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _of(notes: list[dict[str, Any]], uuid: str) -> list[str]:
    return [n["event_type"] for n in notes if n["payload"]["instance_id"] == uuid]


def test_a_boot_and_an_action_are_announced_in_the_file_and_to_subscribers(
    cloud: Cloud, ctx: RequestContext, notes: tuple[Path, list[dict[str, Any]]]
) -> None:
    path, received = notes
    server = cloud.api.create(
        ctx, {"name": "loud", "flavor": "m1.small", "image": "tiny", "user_data": USER_DATA}
    )[0]
    cloud.api.stop(ctx, server["id"])

    written = _lines(path)
    assert written == received  # the same notifications, in the same order
    assert _of(written, server["id"]) == [
        "instance.create.start",
        "instance.update",
        "instance.create.end",
        "instance.power_off.start",
        "instance.update",
        "instance.power_off.end",
    ]
    updates = [n["payload"] for n in written if n["event_type"] == "instance.update"]
    assert [(u["old_state"], u["state"], u["new_task_state"]) for u in updates] == [
        ("building", "active", None),
        ("active", "stopped", None),
    ]
    assert updates[1]["old_task_state"] == "powering-off"
    # Notifications are the operator's feed: they name the host.
    host = cloud.api.get(cloud.admin, server["id"])["host"]
    assert host and all(
        n["payload"].get("host") == host
        for n in written
        if n["event_type"] in ("instance.create.end", "instance.power_off.end")
    )
    assert all(n["publisher_id"] and n["timestamp"] for n in written)
    text = path.read_text()
    assert USER_DATA not in text and "hunter2" not in text


def test_a_failed_build_and_every_lifecycle_action_have_their_notifications(
    cloud: Cloud, ctx: RequestContext, notes: tuple[Path, list[dict[str, Any]]]
) -> None:
    path, received = notes
    for host in HOSTS:
        cloud.add_host(host, failure_mode="abort_spawn")
    doomed = cloud.api.create(ctx, {"name": "doomed", "flavor": "m1.small", "image": "tiny"})[0]
    assert _of(received, doomed["id"]) == ["instance.create.start", "instance.create.error"]
    assert "aborted" in received[-1]["payload"]["fault"]

    for host in HOSTS:
        cloud.add_host(host)
    server = cloud.api.create(ctx, {"name": "busy", "flavor": "m1.small", "image": "tiny"})[0]
    for action in ("pause", "unpause", "suspend", "resume", "reboot", "delete"):
        getattr(cloud.api, action)(ctx, server["id"])
    names = [n for n in _of(_lines(path), server["id"]) if n != "instance.update"]
    assert names[2:] == [
        f"instance.{a}.{phase}"
        for a in ("pause", "unpause", "suspend", "resume", "reboot", "delete")
        for phase in ("start", "end")
    ]


def test_heal_announces_the_state_it_corrects(
    cloud: Cloud, ctx: RequestContext, notes: tuple[Path, list[dict[str, Any]]]
) -> None:
    path, _ = notes
    server = boot(cloud, ctx, "lost")
    cloud.fake(server["host"]).vanish(server["id"])
    heal(cloud.db, cloud.conf)
    last = _lines(path)[-1]
    assert last["event_type"] == "instance.update"
    assert (last["payload"]["old_state"], last["payload"]["state"]) == ("active", "error")


def test_an_action_run_through_the_playbook_path_is_announced_as_in_direct_mode(
    cloud: Cloud, ctx: RequestContext, notes: tuple[Path, list[dict[str, Any]]]
) -> None:
    """The playbooks start an action with act(..., defer=True), a compute host runs it and the conductor
    records the answer: the same start, update and end as the direct path; lock, which needs no
    host, is announced too."""
    path, received = notes
    server = cloud.api.create(ctx, {"name": "played", "flavor": "m1.small", "image": "tiny"})[0]
    request = cloud.api.act(ctx, server["id"], "stop", defer=True).request
    assert _of(received, server["id"])[-1] == "instance.power_off.start"  # before any host acted
    result = cloud.api.conductor.rpc.send(request)
    cloud.api.conductor.record_action_result(ctx, request, result)
    cloud.api.lock(ctx, server["id"])

    assert _of(_lines(path), server["id"])[3:] == [
        "instance.power_off.start",
        "instance.update",
        "instance.power_off.end",
        "instance.lock.start",
        "instance.lock.end",
    ]
    assert cloud.api.get(ctx, server["id"])["status"] == "SHUTOFF"
