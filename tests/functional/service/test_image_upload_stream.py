"""``PUT /image/v2/images/{id}/file`` through a real ``novakit serve``, with bodies larger than
the service reads ahead and hands over at once: chunked in odd sizes or sent with a length, the
image gets its size, ``checksum`` (MD5) and ``os_hash_value`` (SHA-512) and its download is the
upload; the image is ``saving`` while the body comes, ``active`` after; an upload refused (409)
with a large body changes nothing. SQLite only: the route and the store are the same on both
back ends (``test_images.py`` runs the upload on PostgreSQL too)."""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.functional.service.conftest import Served, serve_cloud

pytestmark = pytest.mark.xdist_group("image_upload_stream")

DATA = "application/octet-stream"


@dataclass
class Uploads:
    served: Served
    token: str
    store: Path

    def headers(self, **more: str) -> dict[str, str]:
        return {"X-Auth-Token": self.token, **more}

    def make(self) -> str:
        body = {"name": "streamed", "disk_format": "raw", "container_format": "bare"}
        with self.served.client() as http:
            made = http.post("/image/v2/images", headers=self.headers(), json=body)
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    def put(self, image_id: str, content: Any, **headers: str) -> httpx.Response:
        with httpx.Client(base_url=self.served.url, timeout=120) as http:
            return http.put(
                f"/image/v2/images/{image_id}/file",
                headers=self.headers(**{"Content-Type": DATA, **headers}),
                content=content,
            )

    def show(self, image_id: str) -> dict[str, Any]:
        with self.served.client() as http:
            shown = http.get(f"/image/v2/images/{image_id}", headers=self.headers())
        assert shown.status_code == 200, shown.text
        return dict(shown.json())

    def download(self, image_id: str) -> httpx.Response:
        with httpx.Client(base_url=self.served.url, timeout=120) as http:
            return http.get(f"/image/v2/images/{image_id}/file", headers=self.headers())


@pytest.fixture(scope="module")
def uploads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Uploads]:
    directory = tmp_path_factory.mktemp("serve")
    with serve_cloud("sqlite", directory, "upload") as served:
        yield Uploads(served, served.issue(), directory / "state" / "images")


def _odd_pieces(data: bytes) -> Iterator[bytes]:
    sizes = [1, 65_521, 3, 1_048_573, 131_101, 4_194_319, 17]
    start, n = 0, 0
    while start < len(data):
        yield data[start : start + sizes[n % len(sizes)]]
        start, n = start + sizes[n % len(sizes)], n + 1


def _assert_stored(u: Uploads, image_id: str, data: bytes) -> None:
    shown = u.show(image_id)
    assert (shown["status"], shown["size"]) == ("active", len(data))
    assert shown["checksum"] == hashlib.md5(data).hexdigest()
    assert (shown["os_hash_algo"], shown["os_hash_value"]) == ("sha512", hashlib.sha512(data).hexdigest())
    down = u.download(image_id)
    assert down.status_code == 200 and down.content == data
    assert down.headers["content-md5"] == shown["checksum"]


def test_a_chunked_body_in_odd_pieces(uploads: Uploads) -> None:
    data = os.urandom(11 * 1024 * 1024 + 12_345)
    image_id = uploads.make()
    assert uploads.put(image_id, _odd_pieces(data)).status_code == 204
    _assert_stored(uploads, image_id, data)


def test_a_body_with_its_length(uploads: Uploads) -> None:
    data = os.urandom(9 * 1024 * 1024 + 1)
    image_id = uploads.make()
    assert uploads.put(image_id, data, **{"Content-Length": str(len(data))}).status_code == 204
    _assert_stored(uploads, image_id, data)


def test_saving_while_the_body_comes_then_active(uploads: Uploads) -> None:
    data = os.urandom(3 * 1024 * 1024)
    half = len(data) // 2
    image_id = uploads.make()
    url = urlsplit(uploads.served.url)
    with socket.create_connection((url.hostname, url.port)) as sock:
        sock.sendall(
            (
                f"PUT /image/v2/images/{image_id}/file HTTP/1.1\r\nHost: {url.hostname}\r\n"
                f"X-Auth-Token: {uploads.token}\r\nContent-Type: {DATA}\r\n"
                f"Content-Length: {len(data)}\r\n\r\n"
            ).encode()
            + data[:half]
        )
        partial = uploads.store / f".{image_id}.partial"
        deadline = time.monotonic() + 30
        while not (partial.exists() and partial.stat().st_size == half) and time.monotonic() < deadline:
            time.sleep(0.02)
        # What was received is on disk before the rest comes (what heal's progress rule reads).
        assert partial.stat().st_size == half
        assert (uploads.show(image_id)["status"], uploads.show(image_id)["size"]) == ("saving", None)
        sock.sendall(data[half:])
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 204"), answer
    _assert_stored(uploads, image_id, data)


def test_a_refused_upload_with_a_large_body_changes_nothing(uploads: Uploads) -> None:
    data = os.urandom(1024 * 1024)
    image_id = uploads.make()
    assert uploads.put(image_id, data).status_code == 204
    before = sorted(os.listdir(uploads.store))
    again = uploads.put(image_id, _odd_pieces(os.urandom(8 * 1024 * 1024)))
    assert again.status_code == 409, again.text
    assert sorted(os.listdir(uploads.store)) == before
    _assert_stored(uploads, image_id, data)
