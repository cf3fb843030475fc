"""Exception types of :mod:`twopc.faultinject`."""

from __future__ import annotations

from collections.abc import Mapping

GRAMMAR = (
    "grammar: RULE[,RULE...] where RULE = name[@batch=N][@partition=P][:action][*times]; "
    "action is one of crash|kill|raise|exit|hold (default crash), or proxy/TARGET/FAULT[/key=value...] "
    "(FAULT reset|blackhole|latency|swallow_reply|heal; keys for=, delay=, pattern=, direction=) or "
    "server/TARGET/FAULT (FAULT crash|restart|down; key for=), performed by the FaultControl that "
    "owns TARGET; times is a positive integer (default 1); e.g. 'after_decision@batch=2:crash', "
    "'during_invoke:kill*2', 'after_decision:server/postgres/crash' or "
    "'after_pre_commit:proxy/postgres/blackhole/for=2s'"
)


class FaultSpecError(ValueError):
    """A fault spec, plan or rule is malformed; the message names the part (and repeats the grammar)."""


class UnknownFaultPoint(FaultSpecError):
    """A plan names undeclared fault points: *unknown* (in plan order) and *known* (sorted)."""

    def __init__(self, unknown: list[str], known: Mapping[str, str]) -> None:
        self.unknown = list(unknown)
        self.known = sorted(known)
        listing = ", ".join(self.known) if self.known else "(none declared)"
        super().__init__(f"unknown fault point(s): {', '.join(self.unknown)}; known points: {listing}")


class InjectedFault(Exception):
    """Raised by a ``raise`` rule's fault point; *point* fired, *context* holds ``batch_id`` and the rest."""

    def __init__(self, point: str, context: Mapping[str, object]) -> None:
        self.point = point
        self.context = dict(context)
        super().__init__(f"injected fault at {point!r} {self.context!r}")

    def __reduce__(self) -> tuple[type[InjectedFault], tuple[str, dict[str, object]]]:
        # Keep the exception picklable (it may cross a Spark worker boundary).
        return (type(self), (self.point, self.context))


class FaultControlError(RuntimeError):
    """A ``proxy`` or ``server`` rule fired but could not be performed (no ``TWOPC_FAULT_CONTROL``, no
    answer, no such target, or the target failed); the message names the rule and the fix."""


class ServerUnavailable(RuntimeError):
    """A throwaway server could not be started; the message says why and how to fix it."""
