"""``job.start``'s env and secret_env: names checked, secrets sealed before anything keeps
them, never shown back (issue 15, cases 5 and 8)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from pushjobs.errors import ApiError
from pushjobs.protocol.framing import Limits
from server.core.job import Job
from server.core.jobparams import JobRequest
from server.core.sealing import MARKER, REDACTED, SecretBox
from server.front.handlers import ApiHandlers
from server.shell.serverconfig import JobSettings

VALUE = "s3cr3t-value"
BOX = SecretBox.from_seed(b"s" * 32)


class Backend:
    """Only what ``job.start`` uses: the request it would persist, and the job's view."""

    def __init__(self, secrets: SecretBox | None) -> None:
        self.jobs = SimpleNamespace(
            sender=SimpleNamespace(secrets=secrets, limits=Limits()), settings=JobSettings()
        )
        self.registry = SimpleNamespace(find=lambda name: SimpleNamespace(role="admin"))
        self.requests: list[JobRequest] = []
        self.api_drops: dict[str, int] = {}
        self.coordinator = self

    def start_job(self, request: JobRequest, caller: str) -> str:
        self.requests.append(request)
        self.job = Job.new("j1", request.command, ["n1"], 0, options=request.options)
        return "j1"

    def view(self, job_id: str) -> dict[str, Any]:
        return self.job.snapshot()


def start(backend: Backend, **params: Any) -> Any:
    handlers = ApiHandlers(backend)  # type: ignore[arg-type]
    return handlers.handle("job.start", {"command": "true", "nodes": ["n1"], **params}, "admin")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"env": {"": "x"}}, "'' is not a variable name"),
        ({"env": {"A-B": "x"}}, "'A-B' is not a variable name"),
        ({"env": {"1A": "x"}}, "'1A' is not a variable name"),
        ({"secret_env": {"A=B": "x"}}, "'A=B' is not a variable name"),
        ({"env": {"A": 1}}, "'env' must map names to strings"),
        ({"secret_env": ["A"]}, "'secret_env' must map names to strings"),
        ({"env": {"A": "1"}, "secret_env": {"A": "2"}}, "A is in both"),
    ],
)
def test_bad_env_is_refused_before_a_job_exists(params: dict[str, Any], message: str) -> None:
    backend = Backend(BOX)
    with pytest.raises(ApiError, match=message) as info:
        start(backend, **params)
    assert info.value.code == "bad_request" and backend.requests == []


def test_secret_values_are_sealed_before_the_job_is_kept_and_never_shown() -> None:
    backend = Backend(BOX)
    reply = start(backend, env={"A": "1"}, secret_env={"DB_PASSWORD": VALUE})
    [request] = backend.requests
    sealed = request.options["secret_env"]["DB_PASSWORD"]
    assert sealed.startswith(MARKER) and VALUE not in repr(request)
    assert BOX.open("DB_PASSWORD", sealed) == VALUE
    assert reply["job"]["options"]["secret_env"] == {"DB_PASSWORD": REDACTED}
    assert reply["job"]["options"]["env"] == {"A": "1"}
    assert VALUE not in repr(reply)


def test_a_server_without_a_key_refuses_secrets_rather_than_keep_them_in_clear() -> None:
    backend = Backend(None)
    with pytest.raises(ApiError, match="no key to seal"):
        start(backend, secret_env={"DB_PASSWORD": VALUE})
    assert backend.requests == []
    start(backend, env={"A": "1"})  # plain env needs no key
    assert "secret_env" not in backend.requests[0].options
