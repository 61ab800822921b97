"""The project's own test hosts: network namespaces joined to this machine by veth pairs.

A ``TestHost`` is a namespace with its own loopback and one interface, the far end of a
veth pair whose near end stays here: this machine is ``near`` (an address of its own on
that link), the test host ``far``. A process started with ``argv()``'s prefix runs in the
namespace and reaches this machine at ``near``; processes here reach it at ``far``.
``cut()`` takes the link down (the test host is cut off from this machine and everything
behind it, as a host whose network failed) and ``join()`` brings it back.

``second_link()`` gives the test host another link to this machine (its own /30, its
own pair): a test that sends some traffic over each can cut one and keep the other, as a
host partitioned from some peers but not from others (an edge that still hears its
nodes but no longer its leader or the log).

Making namespaces needs root and iproute2; ``unavailable()`` says why not, for a test to
skip with. Every address is in 10.231.0.0/16, a /30 per host, numbered from the creating
process's pid so that two runs on one machine do not collide. Killed at any line: a
namespace left behind is removed by the next run that takes its name (``make`` deletes
it first).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from pushjobs.errors import SandboxError


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)
    if check and done.returncode != 0:
        raise SandboxError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def unavailable() -> str | None:
    """Why test hosts cannot be made here; None when they can."""
    if shutil.which("ip") is None:
        return "no ip command (iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"pjprobe{os.getpid()}"
    done = _ip("netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"ip netns add: {done.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass
class TestHost:
    name: str
    near: str  # this machine's address on the link
    far: str  # the test host's
    near_dev: str
    index: int
    second: Link | None = None

    def second_link(self) -> Link:
        """Another link between the test host and this machine (made once, kept)."""
        if self.second is None:
            tag, i = os.getpid() % 100_000, self.index
            # A /30 of 10.231.0.0/16 in the upper half: the first links use the lower.
            base = (128 + os.getpid() % 60) * 256 + i * 4
            link = Link(
                near=f"10.231.{base // 256}.{base % 256 + 1}",
                far=f"10.231.{base // 256}.{base % 256 + 2}",
                near_dev=f"pjh{tag}y{i}",
            )
            far_dev = f"pjn{tag}y{i}"
            _ip("link", "del", link.near_dev, check=False)
            try:
                _ip("link", "add", link.near_dev, "type", "veth", "peer", "name", far_dev)
                _ip("link", "set", far_dev, "netns", self.name)
                _ip("addr", "add", f"{link.near}/30", "dev", link.near_dev)
                _ip("link", "set", link.near_dev, "up")
                inside = ["netns", "exec", self.name, "ip"]
                _ip(*inside, "addr", "add", f"{link.far}/30", "dev", far_dev)
                _ip(*inside, "link", "set", far_dev, "up")
            except SandboxError:
                link.remove()
                raise
            self.second = link
        return self.second

    def argv(self) -> list[str]:
        """The prefix that runs a command inside the test host."""
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        _ip("link", "set", self.near_dev, "down")

    def join(self) -> None:
        _ip("link", "set", self.near_dev, "up")

    def remove(self) -> None:
        _ip("netns", "del", self.name, check=False)  # its end of the pair goes with it
        _ip("link", "del", self.near_dev, check=False)
        if self.second is not None:
            self.second.remove()


@dataclass
class Link:
    """A test host's second link: this machine at ``near``, the test host at ``far``."""

    near: str
    far: str
    near_dev: str

    def cut(self) -> None:
        _ip("link", "set", self.near_dev, "down")

    def join(self) -> None:
        _ip("link", "set", self.near_dev, "up")

    def remove(self) -> None:
        _ip("link", "del", self.near_dev, check=False)


def make(index: int) -> TestHost:
    """Test host ``index`` (0 to 63) of this process, its link up."""
    if not 0 <= index < 64:
        raise SandboxError("a test host index is from 0 to 63")
    tag = os.getpid() % 100_000
    name, near_dev, far_dev = f"pjt{tag}-{index}", f"pjh{tag}x{index}", f"pjn{tag}x{index}"
    base = (os.getpid() % 60) * 256 + index * 4  # a /30 of 10.231.0.0/16
    near, far = f"10.231.{base // 256}.{base % 256 + 1}", f"10.231.{base // 256}.{base % 256 + 2}"
    host = TestHost(name, near, far, near_dev, index)
    host.remove()  # a leftover of an earlier run under the same pid
    try:
        _ip("netns", "add", name)
        _ip("link", "add", near_dev, "type", "veth", "peer", "name", far_dev)
        _ip("link", "set", far_dev, "netns", name)
        _ip("addr", "add", f"{near}/30", "dev", near_dev)
        _ip("link", "set", near_dev, "up")
        inside = ["netns", "exec", name, "ip"]
        _ip(*inside, "addr", "add", f"{far}/30", "dev", far_dev)
        _ip(*inside, "link", "set", far_dev, "up")
        _ip(*inside, "link", "set", "lo", "up")
        _ip(*inside, "route", "add", "default", "via", near)
    except SandboxError:
        host.remove()
        raise
    return host
