"""An image's data written by ``image_data.upload``: chunks of any size (odd ones, empty ones,
more than one digest batch, a background flush) give the image its size and digests (MD5,
SHA-256 for the hosts, SHA-512 for Glance's ``os_hash_value``) and a file equal to what was
sent; an upload whose chunks fail half way leaves no file, no thread, and the image queued."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from novakit.catalog import image_data, images
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.engine import Database

OWNER = RequestContext(project_id="web", user_id="alice", roles=["member"])


def _queued(db: Database, name: str) -> str:
    made = images.create_queued(db, OWNER, {"name": name, "disk_format": "raw", "container_format": "bare"})
    return str(made["id"])


def _odd_chunks(data: bytes) -> Iterator[bytes]:
    """``data`` in chunks of sizes that match no batch: 1 byte, primes, an empty one, large ones."""
    sizes = [1, 0, 4093, 65_537, 7, 1_000_003, 0, 12_289]
    start, n = 0, 0
    while start < len(data):
        size = sizes[n % len(sizes)]
        yield data[start : start + size]
        start, n = start + size, n + 1


def test_odd_chunks_give_the_right_size_digests_and_file(
    db: Database, conf: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small batches, a short backlog and frequent flushes: every path of the writer is taken.
    monkeypatch.setattr(image_data, "DIGEST_BATCH", 100_000)
    monkeypatch.setattr(image_data, "DIGEST_BACKLOG", 2)
    monkeypatch.setattr(image_data, "FLUSH_EVERY", 300_000)
    data = os.urandom(5_000_011)
    store = image_data.store_of(conf)
    image_id = _queued(db, "odd")

    done = image_data.upload(db, OWNER, image_id, _odd_chunks(data), store)

    assert (done["status"], done["size"]) == ("active", len(data))
    assert done["md5"] == hashlib.md5(data).hexdigest()
    assert done["sha512"] == hashlib.sha512(data).hexdigest()
    assert done["checksum"] == hashlib.sha256(data).hexdigest()  # what the hosts verify
    shown, path = image_data.data(db, OWNER, image_id, store)
    assert path is not None and path.read_bytes() == data
    assert [f for f in os.listdir(store) if f.startswith(".")] == []  # no partial file left


def test_an_empty_upload_is_an_image_of_no_bytes(db: Database, conf: Config) -> None:
    store = image_data.store_of(conf)
    image_id = _queued(db, "empty")
    done = image_data.upload(db, OWNER, image_id, iter([b"", b""]), store)
    assert (done["status"], done["size"]) == ("active", 0)
    assert done["md5"] == hashlib.md5(b"").hexdigest()
    assert done["sha512"] == hashlib.sha512(b"").hexdigest()
    assert (Path(store) / image_id).read_bytes() == b""


class _Broken(Exception):
    pass


def test_chunks_failing_half_way_leave_nothing_behind(
    db: Database, conf: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(image_data, "DIGEST_BATCH", 50_000)
    store = image_data.store_of(conf)
    image_id = _queued(db, "broken")
    before = threading.active_count()

    def chunks() -> Iterator[bytes]:
        for _ in range(20):
            yield os.urandom(30_000)
        raise _Broken

    with pytest.raises(_Broken):
        image_data.upload(db, OWNER, image_id, chunks(), store)

    with db.reader() as session:
        assert images.find(session, OWNER, image_id).status == "queued"
    assert os.listdir(store) == []
    assert threading.active_count() == before  # the digests' and the flush's threads ended
    # The upload is made again, whole.
    data = os.urandom(200_000)
    done = image_data.upload(db, OWNER, image_id, _odd_chunks(data), store)
    assert (done["status"], done["size"], done["md5"]) == ("active", len(data), hashlib.md5(data).hexdigest())
