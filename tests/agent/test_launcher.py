"""The launcher: the commits it holds stay bounded (issue 15, case 9), and what reaches a
job's process is judged again when it starts (cases 5 and 8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.launcher import MAX_HELD, Launcher
from pushjobs.errors import ExecutionError
from pushjobs.protocol import messages as m


def commit(job_id: str, command: str = "true", **options: Any) -> m.Commit:
    return m.Commit(
        sender="server", incarnation="i", sequence=1, timestamp=1, node="n1",
        job_id=job_id, command=command, options=m.RunOptions(timeout_s=10.0, **options),
    )  # fmt: skip


def test_nacked_commits_do_not_pile_up() -> None:
    launcher = Launcher("n1", 1024, lambda: None)
    for i in range(10 * MAX_HELD):
        launcher.hold(commit(f"nacked-{i}"))
    assert len(launcher.commits) == MAX_HELD
    # The newest are kept: a commit just taken is never the one to go.
    assert f"nacked-{10 * MAX_HELD - 1}" in launcher.commits


def test_the_running_jobs_commit_outlives_a_flood() -> None:
    launcher = Launcher("n1", 1024, lambda: None)
    launcher.hold(commit("j1", "sleep", capture=True))
    for i in range(3):
        launcher.hold(commit(f"busy-{i}"))
    launcher.start("j1", lambda command: ["sleep", "30"])
    assert list(launcher.commits) == ["j1"]  # a start lets go of the nacked ones
    for i in range(3 * MAX_HELD):
        launcher.hold(commit(f"busy-more-{i}"))
    assert "j1" in launcher.commits and len(launcher.commits) == MAX_HELD
    launcher.stop("test over", 5.0)
    ended = list(launcher.ended())
    assert [(o.job_id, c is not None and c.options.capture) for o, c in ended] == [("j1", True)]
    assert "j1" not in launcher.commits


def test_a_failed_start_lets_its_commit_go() -> None:
    launcher = Launcher("n1", 1024, lambda: None)
    launcher.hold(commit("j1", env={"LD_PRELOAD": "/tmp/x.so"}))
    with pytest.raises(ExecutionError, match="LD_PRELOAD"):
        launcher.start("j1", lambda command: ["true"])
    assert launcher.commits == {}


@pytest.mark.parametrize(
    "options",
    [{"env": {"PATH": "/tmp/evil"}}, {"secret_env": {"BASH_ENV": "/tmp/x"}}, {"env": {"": "x"}}],
)
def test_without_a_judge_the_default_env_policy_still_guards_the_start(
    options: dict[str, Any],
) -> None:
    launcher = Launcher("n1", 1024, lambda: None)
    launcher.hold(commit("j1", **options))
    with pytest.raises(ExecutionError, match="env "):
        launcher.start("j1", lambda command: ["true"])
    assert launcher.execution is None


def test_the_judge_given_decides_at_start() -> None:
    launcher = Launcher("n1", 1024, lambda: None, judge=lambda c: "whitelist changed")
    launcher.hold(commit("j1"))
    with pytest.raises(ExecutionError, match="whitelist changed"):
        launcher.start("j1", lambda command: ["true"])


def test_plain_and_secret_env_reach_the_process(tmp_path: Path) -> None:
    launcher = Launcher("n1", 1024, lambda: None)
    out = tmp_path / "seen"
    launcher.hold(commit("j1", env={"GREETING": "hi"}, secret_env={"DB_PASSWORD": "s3cr3t"}))
    script = f'printf "%s %s" "$GREETING" "$DB_PASSWORD" > {out}'
    execution = launcher.start("j1", lambda command: ["sh", "-c", script])
    assert execution.join(10.0)
    assert out.read_text() == "hi s3cr3t"
    assert "s3cr3t" not in repr(launcher.commits["j1"])  # nobody prints a secret by accident
