"""Image uploads whose process was killed: the image back to ``queued``, its partial file gone.

``novakit.catalog.image_data`` decides which uploads are abandoned (no progress of the row nor
of the partial file for ``compute.build_timeout``) and settles one by a write that expects the
change heal read; a fleet-wide run of heal calls it (no host is asked: the store is the
controller's, ``image_data.store_of``). Glance leaves such an image ``saving`` for its owner to
delete; novakit makes it ``queued`` again, so that the upload can simply be made again.
"""

from __future__ import annotations

import datetime as dt

from novakit.catalog import image_data
from novakit.config import Config
from novakit.db.engine import Database
from novakit.heal.base import Correction


def interrupted_uploads(db: Database, conf: Config, now: dt.datetime, dry_run: bool) -> list[Correction]:
    store = image_data.store_of(conf)
    out = []
    for image_id, changed in image_data.abandoned_uploads(db, store, now, conf.compute.build_timeout):
        correction = Correction(
            kind="upload_recovered",
            instance=image_id,
            before="saving",
            after="queued",
            detail="its upload stopped (the process that wrote it is gone): the partial data removed",
        )
        if not dry_run:
            correction.applied = image_data.recover_upload(db, image_id, changed, store)
            if not correction.applied:
                correction.error = "skipped: the image changed since heal read it"
        out.append(correction)
    return out
