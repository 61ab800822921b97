from __future__ import annotations

import pytest

from pushjobs.errors import TargetError
from server.targeting import NodeFacts, select

FLEET = [
    NodeFacts("web-01", {"os": "linux", "hostname": "web-01.eu"}, ("web", "eu")),
    NodeFacts("web-02", {"os": "linux", "hostname": "web-02.us"}, ("web", "us")),
    NodeFacts("db-1", {"os": "freebsd"}, ("db", "eu")),
]


@pytest.mark.parametrize(
    ("selectors", "expected"),
    [
        (["web-01"], ["web-01"]),
        (["unknown-node"], ["unknown-node"]),
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
    assert select(selectors, FLEET) == expected


@pytest.mark.parametrize(
    ("selectors", "needle"),
    [
        (["os=windows"], "no node matches 'os=windows'"),
        (["xyz-*"], "no node matches 'xyz-*'"),
        (["os="], "bad query term"),
        (["=linux"], "bad query term"),
        (["os=linux,web"], "bad query term 'web'"),
        ([""], "empty node selector"),
        ([], "no node selected"),
    ],
)
def test_bad_selectors(selectors, needle):
    with pytest.raises(TargetError) as info:
        select(selectors, FLEET)
    assert needle in str(info.value)
