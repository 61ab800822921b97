"""Secret env values (issue 15, case 8): sealed in the log, opened only into a commit,
never shown, and usable by a successor server that shares the identity key."""

from __future__ import annotations

import orjson
import pytest

from keys.identity import generate
from pushjobs.errors import KeyFileError
from pushjobs.protocol.framing import Limits, open_frames
from pushjobs.protocol.messages import Commit
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer, HmacSigner, HmacVerifier
from server.core import records
from server.core.effects import Send
from server.core.job import Job
from server.core.sealing import MARKER, REDACTED, SecretBox, redacted
from server.shell.commands import CommandSender
from tests.server.test_commands import SECRET, T0, SentCommands, known_nodes

VALUE = "hunter2-correct-horse"


def box() -> SecretBox:
    return SecretBox.from_seed(b"s" * 32)


def test_a_sealed_value_opens_only_under_its_key_and_its_name() -> None:
    sealed = box().seal("DB_PASSWORD", VALUE)
    assert sealed.startswith(MARKER) and VALUE not in sealed
    assert box().open("DB_PASSWORD", sealed) == VALUE
    assert box().seal("DB_PASSWORD", VALUE) != sealed  # a fresh nonce every time
    with pytest.raises(KeyFileError, match="cannot be opened"):
        SecretBox.from_seed(b"t" * 32).open("DB_PASSWORD", sealed)
    with pytest.raises(KeyFileError, match="cannot be opened"):
        box().open("OTHER_NAME", sealed)  # moved to another variable
    with pytest.raises(KeyFileError, match="not a sealed value"):
        box().open("DB_PASSWORD", VALUE)
    with pytest.raises(KeyFileError):
        box().open("DB_PASSWORD", MARKER + "!!!")


def test_every_server_of_an_installation_derives_the_same_key() -> None:
    identity = generate("server", "server")
    first = SecretBox.for_signer(Ed25519Signer("kid", identity.signing_key()))
    second = SecretBox.from_seed(identity.ed25519_secret)
    assert first is not None
    assert second.open("X", first.seal("X", VALUE)) == VALUE
    assert SecretBox.for_signer(HmacSigner("kid", b"k" * 32)) is None


def test_redacted_names_every_secret_and_shows_no_value() -> None:
    options = {"env": {"A": "1"}, "secret_env": box().seal_env({"DB_PASSWORD": VALUE})}
    shown = redacted(options)
    assert shown == {"env": {"A": "1"}, "secret_env": {"DB_PASSWORD": REDACTED}}
    assert "secret_env" in options and options["secret_env"]["DB_PASSWORD"].startswith(MARKER)
    assert redacted({"env": {}}) == {"env": {}}


def secret_job() -> Job:
    sealed = box().seal_env({"DB_PASSWORD": VALUE})
    return Job.new("j1", "deploy", ["a"], T0, options={"env": {"A": "1"}, "secret_env": sealed})


def test_the_api_view_redacts_and_the_log_keeps_the_value_sealed() -> None:
    job = secret_job()
    assert job.snapshot()["options"]["secret_env"] == {"DB_PASSWORD": REDACTED}
    written = b"".join(value for _, value in records.snapshot_records(job, 1))
    assert VALUE.encode() not in written and b"DB_PASSWORD" in written
    assert MARKER.encode() in written


def sender(channels: SentCommands, secrets: SecretBox | None) -> CommandSender:
    return CommandSender(
        Outbox("server", "inc", HmacSigner("server-key", SECRET)),
        Limits(),
        channels,  # type: ignore[arg-type]
        known_nodes(),
        curve_of=lambda node: "curve-" + node,
        signer_of=lambda node: HmacSigner("session-a", SECRET),
        secrets=secrets,
    )


def sent_commit(channels: SentCommands) -> Commit:
    [(_, _, frames)] = channels.sent
    message = open_frames(frames, lambda method, kid: HmacVerifier(SECRET, owner="server"))
    assert isinstance(message, Commit)
    return message


def test_a_successor_rebuilds_the_commit_from_the_log_with_the_value_in_clear() -> None:
    header = orjson.loads(records.snapshot_records(secret_job(), 1)[0][1])
    header["nodes"] = {"a": secret_job().snapshot()["nodes"]["a"]}
    successor = Job.restore(header)  # as recovery.py rebuilds it
    channels = SentCommands()
    sender(channels, box()).send(Send("commit", "j1", "a"), successor, T0)
    commit = sent_commit(channels)
    assert commit.options.secret_env == {"DB_PASSWORD": VALUE}
    assert commit.options.env == {"A": "1"}


def test_a_value_this_server_cannot_open_leaves_the_commit_unsent_and_counted() -> None:
    channels = SentCommands()
    other = sender(channels, SecretBox.from_seed(b"t" * 32))
    other.send(Send("commit", "j1", "a"), secret_job(), T0)
    assert channels.sent == [] and other.counters["unsealable"] == 1
    keyless = sender(channels, None)
    keyless.send(Send("commit", "j1", "a"), secret_job(), T0)
    assert channels.sent == [] and keyless.counters["unsealable"] == 1
    keyless.send(Send("commit", "j1", "a"), Job.new("j1", "x", ["a"], T0), T0)
    assert sent_commit(channels).options.secret_env == {}
