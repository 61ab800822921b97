"""The leader's health checks (server/shell/healthchecks.py): real subprocesses, a real
HTTP server on 127.0.0.1 answering as Prometheus's alerts API would."""

from __future__ import annotations

import http.server
import json
import os
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.core.effects import Check
from server.core.healthgate import HaltSpec
from server.shell.healthchecks import HealthChecks, alert_state, run_command
from tests.support import wait_until


def test_a_check_passes_on_exit_0_and_fails_saying_what_it_printed() -> None:
    assert run_command("exit 0", 5, {}) == (True, "passed")
    ok, detail = run_command("echo; echo '  HTTP 503 \x1b[31m'; exit 22", 5, {})
    assert not ok and detail == "failed (exit 22): HTTP 503 ?[31m"
    assert run_command("kill -9 $$", 5, {}) == (False, "failed (killed by signal 9)")


def test_a_check_past_its_timeout_fails_and_its_whole_group_is_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    ok, detail = run_command(f"sleep 30 & echo $! > {pids}; sleep 30", 0.5, {})
    assert (ok, detail) == (False, "timed out after 0.5 s")
    child = int(pids.read_text())
    wait_until(lambda: not _alive(child), 5, 0.05)  # the background child went too


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie waiting for init to reap it is gone in all but name.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_a_check_sees_the_job_not_the_servers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUSHJOBS_SEAL_KEY", "do-not-leak")
    env = {"PUSHJOBS_JOB_ID": "j1"}
    assert run_command('test -z "$PUSHJOBS_SEAL_KEY" && test "$PUSHJOBS_JOB_ID" = j1', 5, env)[0]
    assert run_command('test "$(pwd)" = /', 5, {})[0]


class _Prometheus(http.server.BaseHTTPRequestHandler):
    answer: tuple[int, bytes] = (200, b"")

    def do_GET(self) -> None:
        code, body = self.answer
        assert self.path == "/api/v1/alerts"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def prom() -> Iterator[tuple[str, type[_Prometheus]]]:
    handler = type("Handler", (_Prometheus,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def alerts(*pairs: tuple[str, str]) -> bytes:
    found = [
        {"labels": {"alertname": name, "team": "web"}, "state": state} for name, state in pairs
    ]
    return json.dumps({"status": "success", "data": {"alerts": found}}).encode()


def test_an_alert_fails_only_while_it_fires(prom: tuple[str, type[_Prometheus]]) -> None:
    url, handler = prom
    handler.answer = (200, alerts(("DeployErrors", "pending"), ("Other", "firing")))
    assert alert_state(url, "DeployErrors", 5) == (True, "not firing")
    handler.answer = (200, alerts(("DeployErrors", "firing"), ("DeployErrors", "firing")))
    assert alert_state(url, "DeployErrors", 5) == (False, "firing (2 alerts): team=web")


def test_prometheus_unreachable_or_making_no_sense_fails_the_check(
    prom: tuple[str, type[_Prometheus]],
) -> None:
    url, handler = prom
    for answer, words in (
        ((500, b"oops"), "answered HTTP 500"),
        ((200, b"<html>"), "not its alerts API"),
        ((200, b'{"status": "success", "data": []}'), "not its alerts API"),
        ((200, b'{"status": "error", "error": "bad"}'), "answered 'error': bad"),
    ):
        handler.answer = answer
        ok, detail = alert_state(url, "DeployErrors", 5)
        assert not ok and words in detail, (answer, detail)
    ok, detail = alert_state(f"http://127.0.0.1:{closed_port()}", "X", 2)
    assert not ok and "could not be asked" in detail
    assert alert_state("", "X", 2) == (False, "no [halt] prometheus_url is set on this server")


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def checks_of(*commands: str) -> list[Check]:
    return [Check(f"j{i}", 1, HaltSpec(check=c, timeout_ms=5000)) for i, c in enumerate(commands)]


def answers(runner: HealthChecks, count: int) -> list[tuple[str, bool]]:
    got: list[tuple[str, bool]] = []
    for _ in range(50):  # bounded: 10 s
        select.select([runner.fd], [], [], 0.2)  # the loop's poll: woken by an answer
        got += [(a.job_id, a.ok) for a in runner.take()]
        if len(got) >= count or runner.running == 0:
            break
    return got


def test_answers_wake_the_poll_and_at_most_max_running_run_at_once() -> None:
    runner = HealthChecks(max_running=1)
    try:
        for check in checks_of("sleep 0.2", "exit 1", "true"):
            runner.start(check)
        assert runner.running == 1  # the others wait their turn
        assert answers(runner, 3) == [("j0", True), ("j1", False), ("j2", True)]
        assert runner.running == 0
    finally:
        runner.close()


def test_answers_of_checks_asked_before_a_change_of_leadership_are_dropped() -> None:
    runner = HealthChecks()
    try:
        runner.start(checks_of("sleep 0.2")[0])
        runner.forget()
        assert answers(runner, 1) == []
        assert runner.running == 0  # counted off all the same
        runner.start(checks_of("true")[0])
        assert answers(runner, 1) == [("j0", True)]
    finally:
        runner.close()
