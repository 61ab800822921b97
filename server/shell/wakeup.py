"""A signal wakes the server's loop at once.

Python runs a signal handler between bytecodes, and the loop spends its idle time inside
``zmq_poll``: pyzmq resumes the poll after the handler, so a SIGTERM whose handler set
``stopping`` was only seen at the poll's timeout. That bounded how long the loop could
sleep (0.25 s: four idle turns a second, about a third of an idle server's CPU). With
``signal.set_wakeup_fd`` the interpreter writes a byte to a socket the poller watches, so
the poll returns as soon as any signal arrives and the loop's timeout can follow its
deadlines alone.

Only the main thread may set the wakeup fd; elsewhere (a server run in a test's thread)
there is none, and the caller polls with its short timeout as before.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from types import TracebackType


class SignalWakeup:
    """``with SignalWakeup() as wakeup:`` ``wakeup.fd`` is readable once a signal came."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self._pair: tuple[socket.socket, socket.socket] | None = None
        self._previous = -1

    def __enter__(self) -> SignalWakeup:
        if threading.current_thread() is not threading.main_thread():
            return self
        read, write = socket.socketpair()
        read.setblocking(False)
        write.setblocking(False)
        try:
            self._previous = signal.set_wakeup_fd(write.fileno(), warn_on_full_buffer=False)
        except ValueError:
            read.close()
            write.close()
            return self
        self._pair = (read, write)
        self.fd = read.fileno()
        return self

    def drain(self) -> None:
        """Empty the socket (each byte is a signal's number; the handlers did the work)."""
        if self._pair is None:
            return
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while self._pair[0].recv(4096):
                pass

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._pair is None:
            return
        signal.set_wakeup_fd(self._previous)
        for sock in self._pair:
            sock.close()
        self._pair, self.fd = None, None
