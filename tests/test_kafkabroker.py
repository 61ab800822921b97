"""The test broker's jar cache and settings (``pushjobs.testbed.kafkabroker``), without a
network or a JVM: a fake ``mvn`` stands in for Maven."""

from __future__ import annotations

import stat
import uuid
from pathlib import Path

import pytest

from pushjobs.testbed import kafkabroker
from pushjobs.testbed.kafkabroker import (
    KAFKA_JAR,
    MARKER,
    BrokerUnavailable,
    cache_dir,
    cluster_id,
    fetch,
    jars_dir,
    replication_settings,
    required,
    unavailable,
)

FAKE_MVN = """#!/bin/sh
# Records each call, then behaves as $FAKE_MVN_MODE says.
echo call >> "{calls}"
for arg in "$@"; do
    case "$arg" in -DoutputDirectory=*) out="${{arg#-DoutputDirectory=}}";; esac
done
[ "$FAKE_MVN_MODE" = fail ] && {{ echo "Could not resolve dependencies" >&2; exit 1; }}
mkdir -p "$out"
[ "$FAKE_MVN_MODE" = nojar ] || touch "$out/{jar}"
touch "$out/scala-library-2.13.16.jar"
"""


@pytest.fixture
def mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    calls = tmp_path / "calls"
    script = tmp_path / "bin" / "mvn"
    script.parent.mkdir()
    script.write_text(FAKE_MVN.format(calls=calls, jar=KAFKA_JAR))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.delenv("FAKE_MVN_MODE", raising=False)
    return str(script), calls


def test_the_cache_is_under_xdg_cache_home_else_home() -> None:
    version = f"kafka-{kafkabroker.KAFKA_VERSION}"
    assert cache_dir({"XDG_CACHE_HOME": "/c", "HOME": "/h"}) == Path("/c/pushjobs", version)
    assert cache_dir({"HOME": "/h"}) == Path("/h/.cache/pushjobs", version)


def test_a_fetch_is_complete_only_with_its_marker_and_is_done_once(
    tmp_path: Path, mvn: tuple[str, Path]
) -> None:
    script, calls = mvn
    cache = tmp_path / "cache"
    assert jars_dir(cache) is None
    assert "are not in" in str(unavailable(cache))

    jars = fetch(cache, mvn=script)
    assert jars == cache / "jars" and (jars / KAFKA_JAR).is_file()
    assert (cache / MARKER).read_text().split() == sorted(p.name for p in jars.iterdir())
    assert jars_dir(cache) == jars
    assert fetch(cache, mvn=script) == jars
    assert calls.read_text().count("call") == 1  # the second fetch found the first's jars
    assert not list(cache.glob("fetch-*"))  # no scratch directory left behind


@pytest.mark.parametrize("mode", ["fail", "nojar"])
def test_a_failed_fetch_says_why_and_leaves_nothing_usable(
    tmp_path: Path, mvn: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    script, _ = mvn
    cache = tmp_path / "cache"
    monkeypatch.setenv("FAKE_MVN_MODE", mode)
    with pytest.raises(BrokerUnavailable, match="failed"):
        fetch(cache, mvn=script)
    assert jars_dir(cache) is None and not (cache / MARKER).exists()
    monkeypatch.delenv("FAKE_MVN_MODE")
    assert jars_dir(cache) is None
    assert fetch(cache, mvn=script) == cache / "jars"  # and the next fetch starts over


def test_an_interrupted_earlier_fetch_is_replaced(tmp_path: Path, mvn: tuple[str, Path]) -> None:
    script, _ = mvn
    cache = tmp_path / "cache"
    (cache / "jars").mkdir(parents=True)
    (cache / "jars" / KAFKA_JAR).write_text("half")  # jars, but never a marker
    assert jars_dir(cache) is None
    jars = fetch(cache, mvn=script)
    assert (jars / KAFKA_JAR).read_text() == ""


def test_no_maven_is_named_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(BrokerUnavailable, match="no 'no-such-mvn' on PATH"):
        fetch(tmp_path / "cache", mvn="no-such-mvn")


def test_ci_turns_a_missing_broker_into_a_failure() -> None:
    assert required({"PUSHJOBS_REQUIRE_KAFKA": "1"})
    assert not required({"PUSHJOBS_REQUIRE_KAFKA": "0"})
    assert not required({})


def test_three_nodes_replicate_everything_three_times_two_in_sync() -> None:
    three = replication_settings(3)
    assert three["default.replication.factor"] == three["offsets.topic.replication.factor"] == "3"
    assert three["min.insync.replicas"] == three["transaction.state.log.min.isr"] == "2"
    assert replication_settings(1)["min.insync.replicas"] == "1"


def test_the_pom_pins_the_one_kafka_version() -> None:
    pom = kafkabroker.POM.read_text()
    assert "<artifactId>kafka_2.13</artifactId>" in pom
    assert f"<version>{kafkabroker.KAFKA_VERSION}</version>" in pom
    assert kafkabroker.LOG4J.is_file()


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # The storage tool read such an id for an option: one start in 64 failed.
    dashed = uuid.UUID(bytes=b"\xfb" + bytes(15))  # base64url: "-w..."
    plain = uuid.UUID(bytes=bytes(16))
    drawn = iter([dashed, dashed, plain])
    monkeypatch.setattr(kafkabroker.uuid, "uuid4", lambda: next(drawn))
    assert cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"
