"""Run every contract check and report which failed (for scripts, notebooks and the kit's own tests of broken sinks)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ._checks import PROTOCOL_CHECKS
from ._coordination import COORDINATOR_CHECKS
from ._harness import ContractViolation, SinkHarness

__all__ = ["CONTRACT_CHECKS", "ContractReport", "run_contract"]

CONTRACT_CHECKS: dict[str, Callable[[SinkHarness], None]] = {**PROTOCOL_CHECKS, **COORDINATOR_CHECKS}
"""Every check of the contract by name (the driver-crash check once per point)."""


@dataclass
class ContractReport:
    """Which checks passed and why the others failed (the exception each raised: a
    :class:`ContractViolation`, or any other error the sink raised)."""

    harness: str
    passed: list[str] = field(default_factory=list)
    failed: dict[str, BaseException] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed

    def render(self) -> str:
        lines = [f"{self.harness}: {len(self.passed)} passed, {len(self.failed)} failed"]
        for name, exc in self.failed.items():
            text = str(exc) if isinstance(exc, ContractViolation) else f"{type(exc).__name__}: {exc}"
            lines.append(f"  FAILED {name}: {text[:500]}")
        return "\n".join(lines)


def run_contract(harness: SinkHarness, checks: Iterable[str] | None = None) -> ContractReport:
    """Run *checks* (default: all of :data:`CONTRACT_CHECKS`) against *harness*, each on
    its own, and collect the results instead of stopping at the first failure.

    Raises:
        KeyError: a name in *checks* is not a check.
    """
    report = ContractReport(harness.label)
    for name in list(CONTRACT_CHECKS if checks is None else checks):
        check = CONTRACT_CHECKS[name]
        try:
            check(harness)
        except Exception as exc:  # noqa: BLE001 - any failure of a check is reported
            report.failed[name] = exc
        else:
            report.passed.append(name)
    return report
