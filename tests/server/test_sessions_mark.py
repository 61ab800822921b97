"""``SessionKeys`` marks the verifier of the key each node was last heard using, so
``resolve`` need not look the node up: the mark must always agree with the table."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pushjobs.errors import UnknownKey
from server.front.sessions import SessionKey, SessionKeys

NODES = ("n1", "n2")
ops = st.lists(
    st.tuples(
        st.sampled_from(["install", "restart", "resolve", "revoke", "expire"]),
        st.sampled_from(NODES),
        st.integers(0, 7),
    ),
    max_size=40,
)


def marks_agree(keys: SessionKeys) -> None:
    for key_id, verifier in keys._verifiers.items():
        assert verifier.in_use == (keys._used.get(verifier.owner) == key_id), key_id


@settings(max_examples=300, deadline=None)
@given(ops)
def test_the_mark_is_the_used_table(steps) -> None:
    keys, now = SessionKeys(grace_s=1.0), 0.0
    issued: list[SessionKey] = []
    for op, node, pick in steps:
        now += 0.5
        if op in ("install", "restart"):
            issued.append(keys.issue(node, now, restarted=op == "restart"))
        elif op == "resolve" and issued:
            key = issued[pick % len(issued)]
            try:
                verifier = keys.resolve("hmac-sha256", key.key_id)
            except UnknownKey:
                pass
            else:
                assert verifier.owner == key.node
        elif op == "revoke":
            keys.revoke(node)
        elif op == "expire":
            keys.expire(now)
        marks_agree(keys)


def test_a_node_heard_with_its_newer_key_is_signed_for_with_it() -> None:
    keys = SessionKeys(grace_s=1.0)
    old = keys.issue("n1", 0.0)
    keys.resolve("hmac-sha256", old.key_id)
    new = keys.issue("n1", 1.0)
    signer = keys.signer("n1")
    assert signer is not None and signer.key_id == old.key_id  # not heard with the new yet
    keys.resolve("hmac-sha256", new.key_id)
    signer = keys.signer("n1")
    assert signer is not None and signer.key_id == new.key_id
    keys.resolve("hmac-sha256", old.key_id)  # a late message under the old key
    signer = keys.signer("n1")
    assert signer is not None and signer.key_id == new.key_id
    marks_agree(keys)
