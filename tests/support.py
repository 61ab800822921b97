"""Helpers shared by tests: waiting on conditions (never sleeping blindly), free ports,
CurveZMQ key pairs."""

from __future__ import annotations

import socket
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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def curve_keys() -> CurveKeys:
    """A fresh CurveZMQ key pair."""
    public, secret = zmq.curve_keypair()
    return CurveKeys(public.decode(), secret.decode())
