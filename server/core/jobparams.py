"""A job's request as the API gives it: ``job.start`` params checked, made a ``JobRequest``.

One place for the checks, so a job started by hand (``handlers.py``) and one a schedule
starts (``schedjob.py``) are refused for the same reasons with the same words. Secret
values are sealed here, before anything keeps them (``sealing.py``).

What is checked here is all a job carries, so its records can always be written
(``records.py``): timeouts of at most a year keep its milliseconds and deadlines inside
the log's 64-bit integers, and the rest is strings, flags and bounded counts from the
request's JSON (which orjson decoded, so it encodes again).
One case remains that no request brings: a schedule kept by a version from before
timeouts were bounded, read back from the log with a timeout beyond a year (``1e17``
once overflowed every record of its job). ``job_request`` checks a kept job's timeouts
again at each fire, with ``job.start``'s words, before anything is written; the
scheduler pauses a recurring schedule so refused (``scheduler.py``), as every later fire
would be refused alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pushjobs.api import methods
from pushjobs.errors import ApiError
from pushjobs.protocol.framing import DEFAULT_LIMITS
from pushjobs.quorum import Quorum, Share
from server.core.batch import BatchSpec
from server.core.healthgate import DEFAULT_EVERY_S, DEFAULT_TIMEOUT_S, HaltSpec
from server.core.sealing import SECRET_ENV, SecretBox


@dataclass(frozen=True, slots=True)
class JobRequest:
    command: str
    selectors: list[str]
    quorum: Quorum
    run_timeout_s: float | None
    vote_timeout_s: float | None
    options: dict[str, Any]
    # How long the job may wait for busy nodes before its vote (``busywait.py``); None:
    # it does not wait (a busy node refuses it). A schedule's fire: its own wait's bound.
    busy_wait_s: float | None = None
    # How long targets offline at start are waited for (``offlinewait.py``); None: they
    # are unavailable at once.
    offline_wait_s: float | None = None


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The longest a timeout or a wait may be: a year. Beyond it a number is a typing error
# (``--timeout 1e17``), and its milliseconds would not fit the 64-bit integers of the log.
MAX_SECONDS = 365 * 86_400
# What a commit carries besides the job's command and options: the envelope, the node's
# name (up to 128 characters), the job id, the field names. Generous: it is a bound.
COMMIT_OVERHEAD_BYTES = 1024


def bad(message: str) -> ApiError:
    return ApiError(message, code=methods.BAD_REQUEST)


def _str(params: Mapping[str, Any], name: str, *, required: bool = True) -> str:
    value = params.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value:
        raise bad(f"'{name}' must be a non-empty string")
    _no_nul(name, value)
    return value


def _no_nul(name: str, value: str) -> None:
    # No program can be given a NUL in an argument, a variable or a path: every node would
    # fail the job with "embedded null byte".
    if "\0" in value:
        raise bad(f"'{name}' holds a NUL character")


def _num(params: Mapping[str, Any], name: str) -> float | None:
    value = params.get(name)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MAX_SECONDS  # NaN fails this too
    ):
        raise bad(f"'{name}' must be a number of seconds, more than 0 and at most a year")
    return float(value)


def _names(params: Mapping[str, Any], name: str) -> list[str]:
    value = params.get(name)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise bad(f"'{name}' must be a non-empty list of strings")
    return list(value)


def _env(params: Mapping[str, Any], name: str) -> dict[str, str]:
    env = params.get(name) or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise bad(f"'{name}' must map names to strings")
    for key, value in env.items():
        if not _ENV_NAME.fullmatch(key):
            raise bad(f"'{name}': {key!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
        _no_nul(f"{name}.{key}", value)
    return env


def _batch(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """``batch`` (3 or 25%), ``batch_wait_s`` (>= 0), ``max_failures`` (3 or 25%): the
    options of a rolling-batch job (``batch.py``), or None for a job that is no batch."""
    size, wait_s, failures = (params.get(k) for k in ("batch", "batch_wait_s", "max_failures"))
    if size is None:
        if wait_s is not None or failures is not None:
            raise bad("'batch_wait_s' and 'max_failures' need 'batch'")
        return None
    if wait_s is not None and (
        isinstance(wait_s, bool)
        or not isinstance(wait_s, int | float)
        or not 0 <= wait_s <= MAX_SECONDS
    ):
        raise bad("'batch_wait_s' must be a number of seconds, at least 0 and at most a year")
    try:
        if isinstance(size, bool) or not isinstance(size, str | int):
            raise ValueError(f"batch must be a count (3) or a percent (25%), not {size!r}")
        if failures is not None and (
            isinstance(failures, bool) or not isinstance(failures, str | int)
        ):
            raise ValueError(
                f"max_failures must be a count (3) or a percent (25%), not {failures!r}"
            )
        spec = BatchSpec(
            size=Share.parse(str(size), "batch"),
            wait_ms=round(float(wait_s or 0) * 1000),
            max_failures=None if failures is None else Share.parse(str(failures), "max_failures"),
        )
    except ValueError as exc:
        raise bad(str(exc)) from None
    return spec.to_options()


MAX_CHECK_CHARS = 4096
MAX_ALERT_CHARS = 256
MIN_CHECK_EVERY_S = 1.0
MAX_CHECK_TIMEOUT_S = 3600.0


def _halt(params: Mapping[str, Any], batch: dict[str, Any] | None) -> dict[str, Any] | None:
    """``halt_if`` (a check command) or ``halt_if_alert`` (a Prometheus alert name), with
    ``halt_check_every_s`` and ``halt_check_timeout_s``: the health signal of a rolling
    job (``healthgate.py``), or None. Whether this server runs that check, or knows a
    Prometheus, is the leader's to say (``HaltSettings.refusal``)."""
    check, alert = params.get("halt_if"), params.get("halt_if_alert")
    every, timeout = params.get("halt_check_every_s"), params.get("halt_check_timeout_s")
    if check is None and alert is None:
        if every is not None or timeout is not None:
            raise bad(
                "'halt_check_every_s' and 'halt_check_timeout_s' need 'halt_if' or 'halt_if_alert'"
            )
        return None
    if check is not None and alert is not None:
        raise bad("name one health signal: 'halt_if' or 'halt_if_alert', not both")
    if batch is None:
        raise bad(
            "'halt_if' and 'halt_if_alert' need 'batch': a job without batches starts every "
            "node at once, so nothing is left to stop"
        )
    if check is not None:
        check = _str(params, "halt_if")
        if len(check) > MAX_CHECK_CHARS:
            raise bad(f"'halt_if' is longer than {MAX_CHECK_CHARS} characters")
    else:
        alert = _str(params, "halt_if_alert")
        if len(alert) > MAX_ALERT_CHARS or not alert.isprintable():
            raise bad(
                f"'halt_if_alert' must be a printable name of at most {MAX_ALERT_CHARS} characters"
            )
    for name, value, low, high in (
        ("halt_check_every_s", every, MIN_CHECK_EVERY_S, MAX_SECONDS),
        ("halt_check_timeout_s", timeout, 0.0, MAX_CHECK_TIMEOUT_S),
    ):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not low <= value <= high  # NaN fails this too
            or value == 0
        ):
            raise bad(f"'{name}' must be a number of seconds from {low:g} to {high:g}")
    return HaltSpec(
        check=check,
        alert=alert,
        every_ms=round(float(every or DEFAULT_EVERY_S) * 1000),
        timeout_ms=round(float(timeout or DEFAULT_TIMEOUT_S) * 1000),
    ).to_options()


def job_params(
    params: Mapping[str, Any],
    secrets: SecretBox | None,
    max_body_bytes: int = DEFAULT_LIMITS.max_body_bytes,
) -> dict[str, Any]:
    """What a schedule keeps of ``job.start`` params (``ApiError`` for a bad one): a job
    whose commit could not fit a command-channel frame of ``max_body_bytes`` is refused."""
    command = _str(params, "command")
    selectors = _names(params, "nodes")
    quorum = str(params.get("quorum") or "100%")
    try:
        Quorum.parse(quorum)
    except ValueError as exc:
        raise bad(str(exc)) from None
    env, secret_env = _env(params, "env"), _env(params, SECRET_ENV)
    both = sorted(env.keys() & secret_env.keys())
    if both:
        raise bad(f"{both[0]} is in both 'env' and 'secret_env'")
    if secret_env and secrets is None:
        raise ApiError("this server has no key to seal secret_env with", code=methods.INTERNAL)
    cwd = params.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise bad("'cwd' must be a string")
    if cwd is not None:
        _no_nul("cwd", cwd)
    capture = params.get("capture", False)
    if not isinstance(capture, bool):
        raise bad("'capture' must be true or false")
    options: dict[str, Any] = {"env": env, "cwd": cwd, "capture": capture}
    batch = _batch(params)
    if batch is not None:
        options["batch"] = batch
    halt = _halt(params, batch)
    if halt is not None:
        options["halt_if"] = halt
    if secret_env and secrets is not None:
        options[SECRET_ENV] = secrets.seal_env(secret_env)
    _fits_a_commit(command, options, max_body_bytes)
    return {
        "command": command,
        "nodes": selectors,
        "quorum": quorum,
        "timeout_s": _num(params, "timeout_s"),
        "vote_timeout_s": _num(params, "vote_timeout_s"),
        "busy_wait_s": _num(params, "busy_wait_s"),
        "offline_wait_s": _num(params, "offline_wait_s"),
        "options": options,
    }


def _fits_a_commit(command: str, options: Mapping[str, Any], max_body_bytes: int) -> None:
    """Refuse a job whose commit would be too large to send: every node would have to end
    it, and the API takes requests larger than one command-channel frame."""
    size = len(orjson.dumps({"command": command, "options": options})) + COMMIT_OVERHEAD_BYTES
    if size > max_body_bytes:
        raise bad(
            f"the command, env, secret_env and cwd take {size - COMMIT_OVERHEAD_BYTES:,} bytes "
            f"in a commit; a commit holds at most "
            f"{max_body_bytes - COMMIT_OVERHEAD_BYTES:,} (protocol.max_body_bytes is "
            f"{max_body_bytes:,}): put large values in a file on the nodes"
        )


def job_request(job: Mapping[str, Any]) -> JobRequest:
    """The request of one job, from what ``job_params`` kept: at ``job.start``, or at a
    schedule's fire. A kept timeout is checked again (``ApiError``, ``bad_request``): a
    schedule kept by a version before timeouts were bounded may hold one beyond a year."""
    return JobRequest(
        command=str(job["command"]),
        selectors=[str(n) for n in job["nodes"]],
        quorum=Quorum.parse(str(job.get("quorum") or "100%")),
        run_timeout_s=_num(job, "timeout_s"),
        vote_timeout_s=_num(job, "vote_timeout_s"),
        options=dict(job.get("options") or {}),
        busy_wait_s=_num(job, "busy_wait_s"),  # kept by a version before it: None
        offline_wait_s=_num(job, "offline_wait_s"),  # likewise
    )
