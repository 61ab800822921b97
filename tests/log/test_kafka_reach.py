"""The Kafka log's verdict on whether the cluster answers (``pushjobs.log.kafka.kafka_reach``):
pure, on a fake clock and a scripted probe."""

from __future__ import annotations

import pytest

from pushjobs.clock import FakeClock
from pushjobs.errors import BackendUnavailable
from pushjobs.log.kafka.kafka_reach import Reachability


class Probe:
    """Answers as told, and counts how often it was asked."""

    def __init__(self) -> None:
        self.answers = True
        self.calls: list[float] = []

    def __call__(self, timeout_s: float) -> None:
        self.calls.append(timeout_s)
        if not self.answers:
            raise BackendUnavailable("asking the cluster for its metadata: refused")


def down(reach: Reachability, what: str = "reading x") -> None:
    with pytest.raises(BackendUnavailable), reach.attempt(what):
        raise BackendUnavailable(f"{what}: no answer within 10 s")


def test_a_working_cluster_is_never_probed() -> None:
    clock, probe = FakeClock(), Probe()
    reach = Reachability(clock, probe)
    for _ in range(3):
        with reach.attempt("reading x"):
            pass
    assert probe.calls == [] and reach.reachable


def test_after_a_blip_the_next_request_probes_and_goes_ahead() -> None:
    clock, probe = FakeClock(), Probe()
    reach = Reachability(clock, probe, probe_s=0.25)
    down(reach)
    assert not reach.reachable
    ran = []
    with reach.attempt("reading x"):
        ran.append(True)
    assert ran == [True] and probe.calls == [0.25] and reach.reachable


def test_while_down_requests_fail_at_once_and_probe_at_most_once_per_period() -> None:
    clock, probe = FakeClock(), Probe()
    reach = Reachability(clock, probe, every_s=2.0)
    down(reach)
    probe.answers = False
    errors = []
    for _ in range(5):
        with pytest.raises(BackendUnavailable) as caught, reach.attempt("appending to y"):
            raise AssertionError("a request ran while the cluster was down")  # pragma: no cover
        errors.append(str(caught.value))
        clock.advance(0.3)
    assert len(probe.calls) == 1  # 1.5 s: one probe only
    assert errors[0] == errors[-1]  # the same words each time: logged once by the caller
    assert errors[0] == (
        "appending to y: the Kafka cluster does not answer "
        "(asking the cluster for its metadata: refused)"
    )
    clock.advance(0.6)  # past the period
    probe.answers = True
    with reach.attempt("appending to y"):
        pass
    assert len(probe.calls) == 2 and reach.reachable


def test_a_refusal_passed_up_through_an_outer_request_keeps_the_first_reason() -> None:
    """An outer request sees its inner one's refusal: the words do not nest."""
    clock, probe = FakeClock(), Probe()
    reach = Reachability(clock, probe)
    down(reach, "looking up topic x")
    reason = reach.reason
    reach.failed(BackendUnavailable(f"reading x: the Kafka cluster does not answer ({reason})"))
    assert reach.reason == reason == "looking up topic x: no answer within 10 s"
