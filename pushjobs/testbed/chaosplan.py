"""What a chaos run draws from, what one round drew, and what the run found.

A round (``chaos.py``) draws a kind, a point of its job's life that kind has
(``POINTS_OF``), a fault and a victim, from the part of the schedule ``Narrow`` leaves (all
of it by default, but for the kinds: the job kinds only, so that a seed replays as it
did before batches and schedules joined). Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pushjobs.testbed import chaosbatch, chaossched

JOB_KINDS = ("short", "long", "fail", "timeout", "abort")
KINDS = (*JOB_KINDS, "batch", "scheduled")  # the last two play in modules of their own
POINTS_OF = {
    **dict.fromkeys(JOB_KINDS, ("vote", "run", "finish", "idle")),
    **{"batch": chaosbatch.POINTS, "scheduled": chaossched.POINTS},
}
POINTS = tuple(dict.fromkeys(point for points in POINTS_OF.values() for point in points))
FAULTS = ("kill", "pause")


@dataclass(frozen=True)
class Narrow:
    """The part of the schedule to draw from (all of it by default): a suspect case, run
    in a loop. ``victims`` are names (``server``, ``node-3``); empty means every one."""

    kinds: tuple[str, ...] = JOB_KINDS  # a kind draws from the points it has (POINTS_OF)
    points: tuple[str, ...] = POINTS
    faults: tuple[str, ...] = FAULTS
    victims: tuple[str, ...] = ()


@dataclass(frozen=True)
class Draw:
    """One round's draw: its label, the job's nodes, and the fault, where and on whom."""

    label: str
    targets: list[str]
    point: str
    fault: str
    victim: str


@dataclass
class Report:
    seed: int
    rounds: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    # The jobs each schedule's command had when its round checked it (``chaossched.py``).
    fired: dict[str, list[str]] = field(default_factory=dict)
