"""The seeded plan: which operation each cycle runs, on which session, with which bystander.

It depends only on the seed and the number of open sessions, so ``--forecast`` shows what a run does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .bounds import ABORT_OPEN_PROBABILITY, BYSTANDER_PROBABILITY, COLD_OPEN_PROBABILITY, RACE_OPEN_PROBABILITY, WEIGHTS

#: Why a session's recording need not be finalized: its server was killed or stopped.
KILLED = frozenset({"cancelled", "sigkilled", "frozen"})
#: Operations after which the target session is gone.
ENDING = frozenset({"cancel", "close_busy", "close", "sigkill", "freeze"})


@dataclass(frozen=True)
class Plan:
    """One cycle's seeded choice: the operation, its open variant, and which sessions (by index)."""

    kind: str
    variant: str | None = None  # open: "warm", "cold", "abort" or "race"
    target: int | None = None  # index into the open sessions
    bystander: int | None = None  # index into the open sessions other than the target


class Planner:
    """The seeded choices of a run. They depend only on the seed and the number of open sessions,
    so ``forecast()`` can show the plan of a run in which every operation behaves as expected."""

    def __init__(self, seed: int, max_sessions: int) -> None:
        self.rng = random.Random(f"chaos-plan-{seed}")
        self.max_sessions = max_sessions

    def next(self, open_sessions: int) -> Plan:
        rng = self.rng
        room = self.max_sessions - open_sessions
        if open_sessions == 0:
            kind = "open"
        else:
            weights = {"open": 2 * room, **WEIGHTS} if room > 0 else dict(WEIGHTS)
            kinds = list(weights)
            kind = rng.choices(kinds, weights=[weights[k] for k in kinds])[0]
        variant = target = bystander = None
        others = open_sessions
        if kind == "open":
            draw = rng.random()
            if draw < ABORT_OPEN_PROBABILITY:
                variant = "abort"
            elif draw < RACE_OPEN_PROBABILITY:
                variant = "race"
            else:
                variant = "cold" if draw < COLD_OPEN_PROBABILITY else "warm"
        else:
            target = rng.randrange(open_sessions)
            others -= 1
        if rng.random() < BYSTANDER_PROBABILITY and others > 0:
            bystander = rng.randrange(others)
        return Plan(kind, variant, target, bystander)


def forecast(seed: int, cycles: int, max_sessions: int) -> list[Plan]:
    """The plan of a run in which every operation behaves as expected."""
    planner = Planner(seed, max_sessions)
    plans, open_sessions = [], 0
    for _ in range(cycles):
        plan = planner.next(open_sessions)
        plans.append(plan)
        if plan.kind == "open" and plan.variant not in ("abort", "race"):
            open_sessions += 1
        elif plan.kind in ENDING:
            open_sessions -= 1
    return plans
