"""The ``name`` filter of a server listing is a regular expression searched in each name (Nova's);
what a leading ``^`` fixes is compared by the database first (``db.api.literal_prefix``), which
must never change the answer."""

from __future__ import annotations

import re

import pytest

from novakit.context import RequestContext
from novakit.db.api import literal_prefix
from tests.functional.cloud import Cloud

NAMES = ["web-1", "web-10", "web.1", "webx", "Web-1", "we", "db-web-1", "w"]


@pytest.mark.parametrize(
    ("regex", "prefix"),
    [
        ("^web-", "web-"),
        ("web-", ""),  # searched anywhere: nothing fixed
        ("^web.1", "web"),  # a dot is any character
        ("^web-?1", "web"),  # what a quantifier makes optional is not fixed
        ("^webx*", "web"),
        ("^web{2}", "we"),
        ("^web|^db", ""),  # an alternative: either may match
        ("^(web)", ""),
        ("^(?i)web", ""),  # a flag: case is not fixed
        ("^\\w", ""),
        ("^web-1$", "web-1"),
        ("^web+", "web"),
    ],
)
def test_what_a_pattern_fixes_at_the_start(regex: str, prefix: str) -> None:
    assert literal_prefix(regex) == prefix


@pytest.mark.parametrize(
    "regex",
    [
        "^web-",
        "^web.1",
        "^web-1$",
        "^web-?1",
        "^webx*",
        "^web|^db",
        "web-1",
        "^Web",
        "^w",
        "^we$",
    ],
)
def test_a_listing_by_name_matches_as_the_regular_expression_does(
    cloud: Cloud, ctx: RequestContext, regex: str
) -> None:
    for name in NAMES:
        assert (
            cloud.api.create(ctx, {"name": name, "flavor": "m1.small", "image": "tiny"})[0]["status"]
            == "ACTIVE"
        )
    listed = {s["name"] for s in cloud.api.list_servers(ctx, {"name": regex})}
    assert listed == {n for n in NAMES if re.search(regex, n)}
