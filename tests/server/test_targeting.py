from __future__ import annotations

import re

import pytest

from pushjobs.errors import NotFound, TargetError
from server.core.targeting import NodeFacts, select

FLEET = [
    NodeFacts("web-01", {"os": "linux", "hostname": "web-01.eu"}, ("web", "eu")),
    NodeFacts("web-02", {"os": "linux", "hostname": "web-02.us"}, ("web", "us")),
    NodeFacts("db-1", {"os": "freebsd"}, ("db", "eu")),
]
REGISTERED = {"web-01", "registered-only"}


@pytest.mark.parametrize(
    ("selectors", "expected"),
    [
        (["web-01"], ["web-01"]),
        (["registered-only"], ["registered-only"]),  # not seen since a restart: known
        (["web-*"], ["web-01", "web-02"]),
        (["db-[0-9]"], ["db-1"]),
        (["os=linux"], ["web-01", "web-02"]),
        (["os=*bsd"], ["db-1"]),
        (["tag=eu"], ["web-01", "db-1"]),
        (["tag=web,tag=eu"], ["web-01"]),
        (["os=linux,hostname=*.us"], ["web-02"]),
        (["name=db-*"], ["db-1"]),
        (["web-02", "web-*", "db-1"], ["web-02", "web-01", "db-1"]),
    ],
)
def test_select(selectors, expected):
    assert select(selectors, FLEET, exists=REGISTERED.__contains__) == expected


def test_selectors_matching_nothing_are_not_found():
    for selector in ("os=windows", "xyz-*"):
        with pytest.raises(NotFound, match=f"no node matches '{re.escape(selector)}'"):
            select([selector], FLEET, exists=REGISTERED.__contains__)


@pytest.mark.parametrize(
    ("selectors", "needle"),
    [
        (["os="], "bad query term"),
        (["=linux"], "bad query term"),
        (["os=linux,web"], "bad query term 'web'"),
        ([""], "empty node selector"),
        ([], "no node selected"),
    ],
)
def test_bad_selectors(selectors, needle):
    with pytest.raises(TargetError) as info:
        select(selectors, FLEET, exists=REGISTERED.__contains__)
    assert needle in str(info.value)


def test_names_no_node_has_are_all_named_before_anything_is_selected():
    with pytest.raises(NotFound) as info:
        select(["web-01", "web-99", "os=linux", "db-7"], FLEET, exists=REGISTERED.__contains__)
    assert str(info.value) == "no node named 'web-99', 'db-7' (see pushjobs node list)"
