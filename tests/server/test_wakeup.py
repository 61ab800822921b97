"""A signal wakes the server's poll at once (``server.shell.wakeup``)."""

from __future__ import annotations

import os
import signal
import threading

import zmq

from server.shell.wakeup import SignalWakeup


def test_a_signal_makes_the_wakeup_readable_and_drained_it_is_quiet_again() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    try:
        with SignalWakeup() as wakeup:
            assert wakeup.fd is not None
            poller = zmq.Poller()
            poller.register(wakeup.fd, zmq.POLLIN)
            assert dict(poller.poll(0)) == {}
            os.kill(os.getpid(), signal.SIGUSR1)
            assert wakeup.fd in dict(poller.poll(5000))  # bounded: it is at once
            assert seen == [signal.SIGUSR1]  # the handler ran too
            wakeup.drain()
            assert dict(poller.poll(0)) == {}
        assert wakeup.fd is None
        assert signal.set_wakeup_fd(-1) == -1  # restored: none was set before
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_off_the_main_thread_there_is_none() -> None:
    found: list[int | None] = []

    def enter() -> None:
        with SignalWakeup() as wakeup:
            found.append(wakeup.fd)
            wakeup.drain()  # harmless

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join(10)
    assert found == [None]
