"""Session keys of the reply channel; API signatures checked against the registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from keys.fingerprint import key_id, self_key_id
from keys.identity import b64, generate
from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.errors import SignatureError, UnknownKey
from pushjobs.protocol.framing import DEFAULT_LIMITS
from pushjobs.protocol.messages import ApiRequest, ConfigRequest, NodeHeartbeat
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer, HmacSigner
from server.front.auth import RegistryKeys, open_api_frames
from server.front.sessions import MAX_LIVE, SessionKeys

NOW_MS = 1_700_000_000_000


def heartbeat_frames(node: str, key_id_: str, secret: bytes) -> list[bytes]:
    outbox = Outbox(node, "inc", HmacSigner(key_id_, secret))
    return outbox.frames(NodeHeartbeat, NOW_MS, command_endpoint="tcp://127.0.0.1:1")


def test_issued_key_verifies_only_its_own_node() -> None:
    from pushjobs.protocol.framing import open_frames

    sessions = SessionKeys()
    key = sessions.issue("n1", now=0.0)
    msg = open_frames(heartbeat_frames("n1", key.key_id, key.secret), sessions.resolve)
    assert msg.sender == "n1"
    with pytest.raises(SignatureError, match="does not belong"):
        open_frames(heartbeat_frames("n2", key.key_id, key.secret), sessions.resolve)


def test_a_rotated_key_keeps_working_until_the_new_one_is_used_then_for_the_grace() -> None:
    sessions = SessionKeys(grace_s=10)
    old = sessions.issue("n1", now=0.0)
    sessions.resolve("hmac-sha256", old.key_id)  # the node uses it
    new = sessions.issue("n1", now=1.0)
    # The node may never have got the new key (its request timed out): the old one holds,
    # however long, and commands are still signed with what the node was heard using.
    sessions.expire(now=1000.0)
    assert sessions.resolve("hmac-sha256", old.key_id).owner == "n1"
    signer = sessions.signer("n1")
    assert signer is not None and signer.key_id == old.key_id
    sessions.resolve("hmac-sha256", new.key_id)  # now it is heard with the new key
    signer = sessions.signer("n1")
    assert signer is not None and signer.key_id == new.key_id
    sessions.expire(now=1001.0)  # the grace starts here
    assert sessions.resolve("hmac-sha256", old.key_id).owner == "n1"
    sessions.expire(now=1011.0)
    with pytest.raises(UnknownKey, match="has retired"):
        sessions.resolve("hmac-sha256", old.key_id)
    assert sessions.resolve("hmac-sha256", new.key_id).owner == "n1"


def test_a_restarted_agent_supersedes_every_older_key_at_once() -> None:
    sessions = SessionKeys(grace_s=1)
    old = sessions.issue("n1", now=0.0)
    sessions.resolve("hmac-sha256", old.key_id)
    new = sessions.issue("n1", now=5.0, restarted=True)
    signer = sessions.signer("n1")
    assert signer is not None and signer.key_id == new.key_id
    sessions.expire(now=5.0)
    sessions.expire(now=6.0)
    with pytest.raises(UnknownKey, match="has retired"):
        sessions.resolve("hmac-sha256", old.key_id)


def test_keys_never_used_do_not_pile_up() -> None:
    sessions = SessionKeys(grace_s=1)
    keys = [sessions.issue("n1", now=0.0) for _ in range(MAX_LIVE + 3)]
    sessions.expire(now=5.0)
    for key in keys[:3]:
        with pytest.raises(UnknownKey):
            sessions.resolve("hmac-sha256", key.key_id)
    for key in keys[3:]:
        assert sessions.resolve("hmac-sha256", key.key_id).owner == "n1"


def test_revoke_drops_every_key_of_the_node() -> None:
    sessions = SessionKeys()
    a = sessions.issue("n1", now=0.0)
    b = sessions.issue("n1", now=0.0)
    assert sessions.revoke("n1")
    for key in (a, b):
        with pytest.raises(UnknownKey):
            sessions.resolve("hmac-sha256", key.key_id)
    assert not sessions.has("n1") and not sessions.revoke("n1")


def test_revoke_drops_superseded_and_retiring_keys_too_and_spares_other_nodes() -> None:
    sessions = SessionKeys(grace_s=10)
    old = sessions.issue("n1", now=0.0)
    new = sessions.issue("n1", now=0.0)
    sessions.resolve("hmac-sha256", new.key_id)  # old is superseded, valid for the grace
    piled = [sessions.issue("n1", now=0.0) for _ in range(MAX_LIVE + 1)]  # the first retire
    other = sessions.issue("n2", now=0.0)
    assert sessions.revoke("n1")
    for key in (old, new, *piled):
        with pytest.raises(UnknownKey):
            sessions.resolve("hmac-sha256", key.key_id)
    assert sessions.resolve("hmac-sha256", other.key_id).owner == "n2"


def test_keys_issued_without_secrets_held_count_sessions_only() -> None:
    # A leader with edges: they verify and sign; it only knows who holds a session.
    sessions = SessionKeys(hold_secrets=False)
    key = sessions.issue("n1", now=0.0)
    for _ in range(MAX_LIVE + 2):
        sessions.issue("n1", now=0.0)
    assert sessions.has("n1") and sessions.nodes() == ["n1"]
    assert sessions.signer("n1") is None
    with pytest.raises(UnknownKey):
        sessions.resolve("hmac-sha256", key.key_id)
    assert sessions.revoke("n1") and not sessions.has("n1")


def test_ed25519_is_not_a_session_method() -> None:
    with pytest.raises(UnknownKey):
        SessionKeys().resolve("ed25519", "whatever")


def _config_request(identity, sender: str | None = None, public: bytes | None = None):
    pub = public if public is not None else identity.public.ed25519_public
    signer = Ed25519Signer(self_key_id(identity.public.ed25519_public), identity.signing_key())
    return Outbox(sender or identity.name, "inc", signer).frames(
        ConfigRequest,
        NOW_MS,
        command_endpoint="tcp://127.0.0.1:5",
        ed25519_public=b64(pub),
        curve_public=identity.public.curve_public,
    )


def test_unknown_node_config_request_is_accepted_self_signed(tmp_path: Path) -> None:
    keys = RegistryKeys(KeyRegistry(tmp_path / "reg.json"))
    node = generate("n1", "node")
    message = open_api_frames(_config_request(node), keys, DEFAULT_LIMITS)
    assert isinstance(message, ConfigRequest) and message.sender == "n1"


def test_self_signed_request_must_carry_the_key_it_is_signed_with(tmp_path: Path) -> None:
    keys = RegistryKeys(KeyRegistry(tmp_path / "reg.json"))
    node, other = generate("n1", "node"), generate("n2", "node")
    with pytest.raises(SignatureError, match="does not match"):
        open_api_frames(
            _config_request(node, public=other.public.ed25519_public), keys, DEFAULT_LIMITS
        )


def test_a_self_signed_body_is_not_decoded_before_its_signature_holds(tmp_path: Path) -> None:
    keys = RegistryKeys(KeyRegistry(tmp_path / "reg.json"))
    node = generate("n1", "node")
    header, _body, signature = _config_request(node)
    # Garbage that would fail to decode: a signature failure proves the order of checks.
    with pytest.raises(SignatureError):
        open_api_frames([header, b"{not json", signature], keys, DEFAULT_LIMITS)


def test_only_a_config_request_may_be_self_signed(tmp_path: Path) -> None:
    keys = RegistryKeys(KeyRegistry(tmp_path / "reg.json"))
    user = generate("mallory", "user")
    signer = Ed25519Signer(self_key_id(user.public.ed25519_public), user.signing_key())
    frames = Outbox("mallory", "i", signer).frames(
        ApiRequest, NOW_MS, request_id="r", method="job.list"
    )
    with pytest.raises(UnknownKey, match="only a config request"):
        open_api_frames(frames, keys, DEFAULT_LIMITS)


def test_a_self_key_id_that_is_not_a_key_is_unknown(tmp_path: Path) -> None:
    keys = RegistryKeys(KeyRegistry(tmp_path / "reg.json"))
    node = generate("n1", "node")
    _header, body, signature = _config_request(node)
    for kid in (b"pub:AAAA", b"pub:QUJDRA==", b"0123456789abcdef"):
        with pytest.raises(UnknownKey):
            open_api_frames([b"PJ1 ed25519 " + kid, body, signature], keys, DEFAULT_LIMITS)


def test_unknown_user_api_request_is_an_unknown_key(tmp_path: Path) -> None:
    keys = RegistryKeys(KeyRegistry(tmp_path / "reg.json"))
    user = generate("alice", "user")
    signer = Ed25519Signer(key_id(user.public.ed25519_public), user.signing_key())
    frames = Outbox("alice", "i", signer).frames(
        ApiRequest, NOW_MS, request_id="r", method="job.list"
    )
    with pytest.raises(UnknownKey):
        open_api_frames(frames, keys, DEFAULT_LIMITS)


def test_registered_user_is_resolved_and_index_follows_the_file(tmp_path: Path) -> None:
    registry = KeyRegistry(tmp_path / "reg.json")
    keys = RegistryKeys(registry)
    user = generate("alice", "user")
    signer = Ed25519Signer(key_id(user.public.ed25519_public), user.signing_key())
    outbox = Outbox("alice", "i", signer)
    registry.add(user.public, state=KeyState.ACCEPTED, role="writer")
    msg = open_api_frames(
        outbox.frames(ApiRequest, NOW_MS, request_id="r", method="job.list"), keys, DEFAULT_LIMITS
    )
    assert msg.sender == "alice"
    registry.delete(["alice"])
    with pytest.raises(UnknownKey):
        open_api_frames(
            outbox.frames(ApiRequest, NOW_MS, request_id="r2", method="job.list"),
            keys,
            DEFAULT_LIMITS,
        )


def test_a_user_cannot_sign_as_another_sender(tmp_path: Path) -> None:
    registry = KeyRegistry(tmp_path / "reg.json")
    user = generate("alice", "user")
    registry.add(user.public, state=KeyState.ACCEPTED, role="admin")
    signer = Ed25519Signer(key_id(user.public.ed25519_public), user.signing_key())
    frames = Outbox("bob", "i", signer).frames(ApiRequest, NOW_MS, request_id="r", method="x")
    with pytest.raises(SignatureError, match="does not belong"):
        open_api_frames(frames, RegistryKeys(registry), DEFAULT_LIMITS)


def test_a_node_heard_under_a_retired_key_is_noted_once_per_take() -> None:
    from pushjobs.protocol.framing import open_frames

    sessions = SessionKeys(grace_s=1)
    revoked = sessions.issue("n1", now=0.0)
    sessions.revoke("n1")
    rotated = sessions.issue("n2", now=0.0)
    sessions.resolve("hmac-sha256", sessions.issue("n2", now=0.0).key_id)  # n2 moved on
    sessions.expire(now=0.5)
    sessions.expire(now=2.0)  # n2's first key is past its grace
    for node, key in (("n1", revoked), ("n2", rotated), ("n1", revoked)):
        with pytest.raises(UnknownKey, match="has retired"):
            open_frames(heartbeat_frames(node, key.key_id, key.secret), sessions.resolve)
    with pytest.raises(UnknownKey, match="unknown session key"):
        sessions.resolve("hmac-sha256", "s-never-issued")
    assert sessions.take_stale() == {"n1", "n2"}
    assert sessions.take_stale() == set()
