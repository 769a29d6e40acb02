"""An image's data (Glance's image file): uploaded into the image store, downloaded from it.

The image store is a directory of the controller (``store_of``: ``images`` in the state
directory), one file per image, named for its id. A compute host boots an uploaded image
through its image cache, which reads only from its own ``image_store`` (the libvirt driver's
option): on a controller that is also a compute host, give the driver this directory; else
copy the files to the hosts' stores as with any image registered by location.

An upload is written chunk by chunk into a private partial file beside its final name while
its size, MD5 (Glance's ``checksum``), SHA-256 (what the hosts verify) and SHA-512 (Glance's
``os_hash_value``) are computed; it becomes the image's file only when the last chunk is on
disk (fsync, then rename). Each chunk is written as it comes (so the partial file shows the
upload's progress); the three digests are computed in threads of their own, each fed the
chunks in batches (hashlib lets go of the GIL on large data, so they run beside the writes and
beside the event loop that receives the body), and the file is flushed to disk in the
background as it grows, so that the final fsync has little left to do. The three digests of
1 GiB cost about 4 s of CPU (MD5 1.7 s, SHA-512 1.6 s, SHA-256 0.7 s on the machine of
``bench/results/fleet_scale.md``): they, not the writes, bound an upload's speed.

The image moves ``queued`` → ``saving`` → ``active`` (``images.TRANSITIONS``); if the upload
fails anywhere (the client goes away, the disk fills, the image was deleted meanwhile), no file
is left and the image is ``queued`` again, as Glance leaves it.

An upload whose process was killed leaves the image ``saving`` and its partial file behind.
Heal settles it (``abandoned_uploads``, ``recover_upload``): once neither the row nor the partial
file (every chunk written moves its mtime) has changed for ``compute.build_timeout``, the
image is ``queued`` again, by a write that expects the change heal read, and the partial file
is removed; the upload can be made again. A live upload that writes again meanwhile keeps its
image, and a stalled one that wakes up after heal finds its image no longer ``saving`` (409),
and removes its own file.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy import update as sql_update
from sqlalchemy.orm import Session

from novakit import exceptions, policy
from novakit.catalog import images
from novakit.config import Config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.db.models import Image
from novakit.files import FILE_MODE, private_dir

#: the digests an upload records: Glance's ``checksum`` (MD5: older clients and the download's
#: ``Content-MD5`` check it), ``os_hash_value`` (SHA-512, Glance's default ``hashing_algorithm``;
#: openstacksdk checks a download against it), and the SHA-256 the compute hosts verify. The
#: SHA-256 as ``os_hash_value`` instead (an operator's choice in Glance) would save 40% of the
#: digests' work; novakit keeps Glance's default, what clients of an unconfigured Glance see.
DIGESTS = ("md5", "sha256", "sha512")
#: bytes of chunks handed to the digests' threads at once: few hand-overs between threads
DIGEST_BATCH = 4 << 20
#: batches handed over and not yet digested before the writer waits: what an upload holds in
#: memory beyond the chunks it is given (DIGEST_BATCH times this)
DIGEST_BACKLOG = 4
#: bytes written between two flushes in the background (the writes do not wait for them)
FLUSH_EVERY = 64 << 20


def store_of(conf: Config) -> Path:
    """The directory uploaded images are written to."""
    return conf.state_dir / "images"


def upload(
    db: Database, ctx: RequestContext, image_id: str, chunks: Iterable[bytes], store: Path
) -> dict[str, Any]:
    """Write ``chunks`` as the data of queued image ``image_id`` (its owner's or an admin's)
    and make it active; the image as ``ctx`` sees it. Its disk and container formats must be
    set first (Glance's rule); an image not queued is refused (409)."""

    def begin(session: Session) -> str:
        row = images.owned(session, ctx, image_id)
        if not row.disk_format or not row.container_format:
            raise exceptions.ValidationError(
                "disk_format", "and container_format must be set before the image's data is uploaded"
            )
        images.transition(session, row.uuid, "upload")
        return row.uuid

    image_id = db.run_in_transaction(begin)  # the image's uuid (a file name), however it was named
    root = private_dir(store)
    partial, final = _partial(root, image_id), root / image_id
    placed = False
    try:
        size, sums = _write(partial, chunks)
        os.replace(partial, final)
        placed = True
        db.run_in_transaction(lambda s: _uploaded(s, image_id, final, size, sums))
    except BaseException:
        partial.unlink(missing_ok=True)
        if placed:
            final.unlink(missing_ok=True)
        # Best effort: the upload's own error is what the caller hears.
        with contextlib.suppress(Exception):
            db.run_in_transaction(lambda s: images.transition(s, image_id, "upload_failed"))
        raise
    with db.reader() as session:
        return images.view(images.find(session, ctx, image_id), ctx)


def _partial(store: Path, image_id: str) -> Path:
    return store / f".{image_id}.partial"


def abandoned_uploads(
    db: Database, store: Path, now: dt.datetime, timeout: int
) -> list[tuple[str, dt.datetime]]:
    """The ``saving`` images whose upload made no progress for ``timeout`` seconds before
    ``now`` (naive UTC), each with the row's last change (what ``recover_upload`` expects)."""
    with db.reader() as session:
        rows = session.execute(select(Image.uuid, Image.updated_at).where(Image.status == "saving")).all()
    stuck = []
    for image_id, changed in rows:
        if changed is None:  # no change recorded: not an upload (its transition sets it)
            continue
        last = changed
        with contextlib.suppress(FileNotFoundError):
            written = dt.datetime.fromtimestamp(_partial(store, image_id).stat().st_mtime, dt.UTC)
            last = max(last, written.replace(tzinfo=None))
        if (now - last).total_seconds() >= timeout:
            stuck.append((image_id, changed))
    return stuck


def recover_upload(db: Database, image_id: str, changed: dt.datetime, store: Path) -> bool:
    """An abandoned upload's image back to ``queued`` and its partial file removed; False when
    the image changed since heal read it (its upload came back, or it was deleted)."""

    def write(session: Session) -> bool:
        done = session.execute(
            sql_update(Image)
            .where(Image.uuid == image_id, Image.status == "saving", Image.updated_at == changed)
            .values(status=images.TRANSITIONS["upload_failed"][1])
            .execution_options(synchronize_session=False)
        )
        return getattr(done, "rowcount", 0) == 1

    if not db.run_in_transaction(write):
        return False
    _partial(store, image_id).unlink(missing_ok=True)
    return True


def _write(path: Path, chunks: Iterable[bytes]) -> tuple[int, dict[str, str]]:
    """``chunks`` written into a new file at ``path`` and on disk: their size and digests."""
    size = unflushed = 0
    batch: list[bytes] = []
    batched = 0
    flusher = ThreadPoolExecutor(1, thread_name_prefix="upload-flush")
    flushing: Future[None] | None = None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        with _Digests() as digests:
            for chunk in chunks:
                _write_all(fd, chunk)
                size += len(chunk)
                batch.append(chunk)
                batched += len(chunk)
                if batched >= DIGEST_BATCH:
                    digests.update(batch)
                    batch, batched = [], 0
                unflushed += len(chunk)
                if unflushed >= FLUSH_EVERY and (flushing is None or flushing.done()):
                    if flushing is not None:
                        flushing.result()  # a failed flush fails the upload now
                    flushing, unflushed = flusher.submit(os.fdatasync, fd), 0
            digests.update(batch)
            sums = digests.hexdigests()
        if flushing is not None:
            flushing.result()
        os.fsync(fd)
    finally:
        flusher.shutdown(wait=True)  # before the descriptor is closed (and its number reused)
        os.close(fd)
    return size, sums


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Digests:
    """The upload's digests, each computed in a thread of its own from batches of chunks, in
    order; ``update`` waits when ``DIGEST_BACKLOG`` batches are still being digested."""

    def __init__(self) -> None:
        self._hashers = {name: hashlib.new(name, usedforsecurity=name != "md5") for name in DIGESTS}
        self._threads = {name: ThreadPoolExecutor(1, thread_name_prefix=f"upload-{name}") for name in DIGESTS}
        self._backlog: deque[list[Future[None]]] = deque()

    def __enter__(self) -> _Digests:
        return self

    def __exit__(self, *exc: object) -> None:
        for thread in self._threads.values():
            thread.shutdown(wait=True, cancel_futures=True)

    def update(self, batch: list[bytes]) -> None:
        if not batch:
            return
        while len(self._backlog) >= DIGEST_BACKLOG:
            for digesting in self._backlog.popleft():
                digesting.result()
        self._backlog.append(
            [self._threads[name].submit(_digest, hasher, batch) for name, hasher in self._hashers.items()]
        )

    def hexdigests(self) -> dict[str, str]:
        while self._backlog:
            for digesting in self._backlog.popleft():
                digesting.result()
        return {name: hasher.hexdigest() for name, hasher in self._hashers.items()}


def _digest(hasher: Any, batch: list[bytes]) -> None:
    for chunk in batch:
        hasher.update(chunk)


def _uploaded(session: Session, image_id: str, path: Path, size: int, sums: dict[str, str]) -> None:
    images.transition(session, image_id, "uploaded")
    row = images.by_uuid(session, image_id)
    assert row is not None
    row.location, row.size, row.checksum = str(path), size, sums["sha256"]
    properties = dict(row.properties or {})
    properties[images.STORED["md5"]] = sums["md5"]
    properties[images.STORED["sha512"]] = sums["sha512"]
    row.properties = properties


def data(db: Database, ctx: RequestContext, image_id: str, store: Path) -> tuple[dict[str, Any], Path | None]:
    """The image ``ctx`` may download and its file in the store; None when the store holds no
    data of it (a queued image; an image registered at a host's location). A deactivated
    image's data is an admin's only (Glance's)."""
    with db.reader() as session:
        row = images.find(session, ctx, image_id)
        if row.status == "deactivated" and not policy.allowed(ctx, "image:deactivate"):
            raise exceptions.Forbidden(reason=f"image {image_id} is deactivated: nobody downloads its data")
        shown, location = images.view(row, ctx), row.location
    return shown, _stored(location, store)


def delete(db: Database, ctx: RequestContext, image_id: str, store: Path) -> None:
    """Delete an image (``images.delete``) and the data the store holds of it."""
    path = _stored(images.delete(db, ctx, image_id), store)
    if path is not None:
        path.unlink(missing_ok=True)


def _stored(location: str, store: Path) -> Path | None:
    """``location`` when it is a file of the image store (never a path elsewhere)."""
    if not location:
        return None
    path = Path(location.removeprefix("file://"))
    root = store.resolve()
    return path if path.resolve().parent == root and path.is_file() else None
