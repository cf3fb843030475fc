"""Randomized fault schedules: a seeded generator over every fault point and every fault
kind, and a shrinker that drops rules while a schedule still fails."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from twopc.faultinject import FaultPlan, FaultRule

from .._faults import POINTS
from ._crash import EXECUTOR_POINTS

__all__ = ["FAULT_KINDS", "Schedule", "ScheduleTarget", "generate_schedule", "shrink_schedule"]

#: Every fault kind a schedule draws from, with its weight (process crashes and kills most).
FAULT_KINDS: Mapping[str, int] = {"crash": 3, "kill": 2, "server.crash": 1, "server.restart": 1, "server.down": 1,
                                  "proxy.reset": 1, "proxy.blackhole": 1, "proxy.latency": 1, "proxy.swallow_reply": 1}


@dataclass(frozen=True)
class ScheduleTarget:
    """A sink the schedules run against: its name, its server and proxy in the
    :class:`twopc.faultinject.FaultControl` (``None``: process faults only), the request whose reply
    ``swallow_reply`` loses (its commit), and its own fault points."""

    name: str
    server: str | None = None
    commit_pattern: str = ""
    points: tuple[str, ...] = ()


@dataclass(frozen=True)
class Schedule:
    """One randomized schedule: the sink, how many micro-batches, the fault rules."""

    seed: int
    sink: str
    batches: int
    rules: tuple[FaultRule, ...]

    @property
    def plan(self) -> FaultPlan:
        return FaultPlan(self.rules)

    def describe(self) -> str:
        rules = ", ".join(r.to_spec().removesuffix("*1") for r in self.rules) or "no faults"
        return f"seed {self.seed}: {self.sink}, {self.batches} batches: {rules}"

    def without(self, index: int) -> Schedule:
        return dataclasses.replace(self, rules=self.rules[:index] + self.rules[index + 1:])


def _rule(rng: random.Random, kind: str, target: ScheduleTarget, batches: int) -> FaultRule:
    point = rng.choice([*sorted(POINTS), *target.points])
    batch = rng.choice([None, *range(batches)])
    partition = rng.choice([None, None, 0, 1]) if point in EXECUTOR_POINTS else None
    if kind in ("crash", "kill"):
        return FaultRule(point, batch, partition, kind, times=rng.choice([1, 1, 2]) if kind == "kill" else 1)  # type: ignore[arg-type]  # kind is an Action
    action, fault = kind.split(".")
    params: dict[str, object] = {}
    if fault in ("blackhole", "latency", "swallow_reply", "down"):
        params["for_s"] = float(rng.choice([1, 2, 3]))
    if fault == "latency":
        params["delay_s"] = rng.choice([0.05, 0.1, 0.3])
    if fault in ("blackhole", "latency"):
        params["direction"] = rng.choice(["both", "upstream", "downstream"])
    if fault == "swallow_reply":
        params["pattern"] = target.commit_pattern
    return FaultRule(point, batch, partition, action, 1, target.server, fault, **params)  # type: ignore[arg-type]  # action is an Action


def generate_schedule(seed: int, targets: Sequence[ScheduleTarget]) -> Schedule:
    """The schedule of *seed*, deterministic: sink ``targets[seed % len(targets)]``, 2-3 micro-batches,
    1-3 rules at points of ``twopc.testing.FAULT_POINTS`` with kinds of :data:`FAULT_KINDS` (process
    kinds only without a server), optionally limited to a batch and partition."""
    target = targets[seed % len(targets)]
    rng = random.Random(seed)
    batches = rng.randint(2, 3)
    kinds = [k for k in FAULT_KINDS if target.server is not None or "." not in k]
    weights = [FAULT_KINDS[k] for k in kinds]
    rules = tuple(_rule(rng, rng.choices(kinds, weights)[0], target, batches) for _ in range(rng.randint(1, 3)))
    return Schedule(seed, target.name, batches, rules)


def shrink_schedule(schedule: Schedule, fails: Callable[[Schedule], bool]) -> Schedule:
    """A minimal failing schedule: drop rules one at a time while *fails* (a rerun) says it still fails."""
    current = schedule
    changed = True
    while changed and current.rules:
        changed = False
        for i in range(len(current.rules)):
            smaller = current.without(i)
            if fails(smaller):
                current, changed = smaller, True
                break
    return current
