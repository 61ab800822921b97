"""What one simulator process plays, and against which servers (``pushjobs simulate run``).

``api`` is the server asked first; ``servers`` are the installation's other API endpoints,
asked in turn when it does not lead or answers nothing (``agent.simulator.simleader``). ``window``
bounds the config requests in flight: the server queues at most 2,048 replies per
connection (``server.shell.channels.API_SNDHWM``), so a larger window may lose replies to
timeouts. Plain data; nothing to lose when the process is killed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.simulator.simnode import Behaviour
from keys.identity import PublicIdentity
from pushjobs.testbed.simkeys import DEFAULT_PREFIX, DEFAULT_SEED


@dataclass(frozen=True, slots=True)
class SimSettings:
    api: str
    server: PublicIdentity
    nodes: int
    first: int = 0
    prefix: str = DEFAULT_PREFIX
    seed: str = DEFAULT_SEED
    bind: str = "tcp://127.0.0.1:*"
    behaviour: Behaviour = field(default_factory=Behaviour)
    window: int = 256
    attempt_timeout_s: float = 10.0
    splay_s: float = 10.0
    duration_s: float | None = None
    facts: dict[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ("simulated",)
    rng_seed: int | None = None
    servers: tuple[str, ...] = ()
