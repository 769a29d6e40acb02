"""One answer to "is this availability zone known" at create and at scheduling (issue 30).

Hosts in no zone aggregate are in ``scheduler.default_availability_zone``. With another default
configured, asking for it boots a server on such a host, and asking for Nova's ``nova`` (no
longer a zone of this fleet) is refused at create, naming the field, with nothing recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from novakit import exceptions
from novakit.compute.api import API
from novakit.config import load_config
from novakit.context import RequestContext
from novakit.db.engine import Database
from novakit.placement import aggregates
from tests.functional.cloud import Cloud, make_cloud

OK = {"flavor": "m1.small", "image": "tiny"}


@pytest.fixture
def zoned(db: Database, tmp_path: Path) -> Cloud:
    cloud = make_cloud(db, tmp_path)
    cloud.conf = load_config(
        db_url=db.url,
        state_dir=tmp_path / "state",
        quota={"instances": -1, "cores": -1, "ram": -1},
        scheduler={"default_availability_zone": "az-default"},
    )
    cloud.api = API(db, cloud.conf)
    return cloud


def test_the_configured_default_zone_is_accepted_at_create(zoned: Cloud, ctx: RequestContext) -> None:
    [server] = zoned.api.create(ctx, {"name": "web", "availability_zone": "az-default", **OK})
    assert server["status"] == "ACTIVE"
    assert zoned.api.get(ctx, server["id"])["availability_zone"] == "az-default"


def test_nova_is_refused_at_create_when_the_default_is_another(zoned: Cloud, ctx: RequestContext) -> None:
    before = zoned.snapshot()
    with pytest.raises(exceptions.ValidationError) as err:
        zoned.api.create(ctx, {"name": "web", "availability_zone": "nova", **OK})
    assert err.value.field == "availability_zone"
    assert "'nova'" in str(err.value) and "az-default" in str(err.value)
    assert zoned.snapshot() == before


def test_a_zone_aggregate_and_the_default_are_both_known(zoned: Cloud, ctx: RequestContext) -> None:
    aggregates.ensure_aggregate(zoned.db, "rack-1", availability_zone="az-1")
    [host, *_] = sorted(h for h in ("compute-1", "compute-2", "compute-3"))
    aggregates.add_provider_to_aggregate(zoned.db, host, "rack-1")
    [in_zone] = zoned.api.create(ctx, {"name": "a", "availability_zone": "az-1", **OK})
    assert zoned.api.get(zoned.admin, in_zone["id"])["host"] == host
    [default] = zoned.api.create(ctx, {"name": "b", "availability_zone": "az-default", **OK})
    assert zoned.api.get(zoned.admin, default["id"])["host"] != host
    with pytest.raises(exceptions.ValidationError, match="az-1, az-default"):
        zoned.api.create(ctx, {"name": "c", "availability_zone": "mars", **OK})
