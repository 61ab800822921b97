"""A body stamped from a template is byte for byte what ``encode`` writes."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from pushjobs.protocol import messages as m
from pushjobs.protocol.codec import decode, encode
from pushjobs.protocol.template import SEQUENCE_MARK, BodyTemplate
from tests.protocol.strategies import for_class, ident, nonneg

WITH_NODE = [c for c in m.MESSAGE_TYPES if "node" in {f.name for f in dataclasses.fields(c)}]


@given(
    message=st.one_of([for_class(c) for c in WITH_NODE]),
    copies=st.lists(st.tuples(nonneg, nonneg, ident), min_size=1, max_size=5),
)
def test_every_copy_is_what_encode_writes(message, copies):
    template = BodyTemplate.of(message)
    if template is None:  # only when a marker shows elsewhere in the body
        return
    for sequence, timestamp, node in copies:
        real = dataclasses.replace(message, sequence=sequence, timestamp=timestamp, node=node)
        assert template.body(sequence, timestamp, node) == encode(real)


def test_commit_run_and_abort_have_templates_and_hostile_names_stay_in_their_place():
    options = m.RunOptions(env={"A": 'x"y'}, capture=True)
    commit = m.Commit(
        sender="s", incarnation="i", sequence=1, timestamp=2, node="n", job_id="j",
        command="echo \"$HOME\" \\ \u00e9", options=options,
    )  # fmt: skip
    run = m.Run(sender="s", incarnation="i", sequence=1, timestamp=2, node="n", job_id="j")
    abort = m.Abort(sender="s", incarnation="i", sequence=1, timestamp=2, node="n", job_id="j")
    for message in (commit, run, abort):
        template = BodyTemplate.of(message)
        assert template is not None, message
        for node in ('a"b', "c\\d", "\x00\x1f", "\u2603\U0001f600", '","node":"x'):
            body = template.body(7, 8, node)
            decoded = decode(body)
            assert decoded == dataclasses.replace(message, sequence=7, timestamp=8, node=node)


def test_a_body_that_shows_a_marker_elsewhere_gets_no_template():
    commit = m.Commit(
        sender="s", incarnation="i", sequence=1, timestamp=2, node="n", job_id="j",
        command=f"echo {SEQUENCE_MARK}",
    )  # fmt: skip
    assert BodyTemplate.of(commit) is None
    ping = m.Ping(sender="s", incarnation="i", sequence=1, timestamp=2, node="n")
    assert BodyTemplate.of(ping) is not None
    ack = m.AckCommit(sender="s", incarnation="i", sequence=1, timestamp=2, job_id="j")
    assert BodyTemplate.of(ack) is None  # no node to stamp
