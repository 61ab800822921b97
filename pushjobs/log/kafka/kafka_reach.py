"""Whether the Kafka cluster answers: once a request has gone unanswered, later requests
fail at once instead of each waiting out its own timeout, until a short probe answers.

Theory of operation. Every request of the Kafka log (metadata, watermarks, fetches,
produces, offset commits) runs inside ``attempt``. One that fails with
``BackendUnavailable`` marks the cluster unreachable. While it is, an attempt first asks
whether it may probe (at most once per ``every_s``): if not, it fails at once, saying the
cluster does not answer and why; if so, one metadata request bounded by ``probe_s``
decides, and a cluster that answers is reachable again and the attempt goes ahead. The
first request after a failure always probes, so a single refused request (an injected
error, a leader moving) costs one quick probe, not a pause.

Why: with every broker down, each request waited its whole timeout (10 s by default), and
a server's turn makes several (the lease, the membership record, node events, each
schedule partition's lease): it stalled for over a minute per turn, answered no API call
and could not even say that the log was down. Now the first request meets its timeout and
the rest of the outage costs at most ``probe_s`` per ``every_s``.

Pure bookkeeping around an injected clock and probe. Killed at any line: nothing here is
durable; a new handle starts out assuming the cluster answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pushjobs.clock import Clock
from pushjobs.errors import BackendUnavailable

PROBE_S = 0.25  # a metadata round trip; a probe this slow counts as no answer
PROBE_EVERY_S = 2.0


class Reachability:
    def __init__(
        self,
        clock: Clock,
        probe: Callable[[float], None],
        *,
        probe_s: float = PROBE_S,
        every_s: float = PROBE_EVERY_S,
    ) -> None:
        """``probe(timeout_s)`` returns if the cluster answered, else raises
        ``BackendUnavailable``."""
        self._clock = clock
        self._probe = probe
        self.probe_s = probe_s
        self.every_s = every_s
        self.down_since: float | None = None
        """Monotonic seconds: when a request first went unanswered; None while it answers."""
        self.reason = ""
        self._next_probe = 0.0

    @property
    def reachable(self) -> bool:
        return self.down_since is None

    @contextmanager
    def attempt(self, what: str) -> Iterator[None]:
        """Run one request: refused at once while the cluster is known unreachable."""
        self.check(what)
        try:
            yield
        except BackendUnavailable as exc:
            self.failed(exc)
            raise

    def check(self, what: str) -> None:
        if self.down_since is None:
            return
        now = self._clock.monotonic()
        if now < self._next_probe:
            raise BackendUnavailable(f"{what}: {self._unreachable()}")
        self._next_probe = now + self.every_s
        try:
            self._probe(self.probe_s)
        except BackendUnavailable as exc:
            self.reason = str(exc)
            raise BackendUnavailable(f"{what}: {self._unreachable()}") from None
        self.down_since, self.reason = None, ""

    def failed(self, exc: BackendUnavailable) -> None:
        if self.down_since is None:  # (else ``exc`` may be this object's own refusal)
            self.down_since = self._next_probe = self._clock.monotonic()
            self.reason = str(exc)  # the next request probes: this may have been a blip

    def _unreachable(self) -> str:
        # No duration in the words: the operator is told again only when they change.
        return f"the Kafka cluster does not answer ({self.reason})"
