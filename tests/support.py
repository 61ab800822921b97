"""Helpers shared by tests: waiting on conditions (never sleeping blindly), CurveZMQ key
pairs.

There is no "free port" helper on purpose: a number picked by binding port 0, closing and
binding it again later can be taken in between by any other socket (parallel workers
share the machine). Bind ``tcp://127.0.0.1:*`` and read the port back
(``pushjobs.transport.sockets.bound_endpoint``), or let the sandbox start the daemon and
read its ready line (``pushjobs.testbed.sandbox``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import zmq

from pushjobs.transport.sockets import CurveKeys

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout_s: float = 10.0, step_s: float = 0.01) -> T:
    """Poll ``predicate`` until it returns something truthy; fail the test at ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout_s} s: {predicate!r}")
        # The one sanctioned poll: a real process's condition, bounded by the deadline.
        time.sleep(step_s)  # noqa


def curve_keys() -> CurveKeys:
    """A fresh CurveZMQ key pair."""
    public, secret = zmq.curve_keypair()
    return CurveKeys(public.decode(), secret.decode())
