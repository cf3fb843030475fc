"""The fault point every process passes (a Spark Python worker's task, the driver's commit):
unarmed, it reads two environment variables and loads nothing more; the rules' machinery
(:mod:`twopc.faultinject._runtime`: the spec parser, runs, crashing a job) loads in a process
whose environment arms a plan."""

from __future__ import annotations

from ._env import unarmed

__all__ = ["fault_point"]


def fault_point(name: str, *, batch_id: int | None = None, **context: object) -> None:
    """Mark a place where the process may be made to die.

    When armed, the first matching rule that can claim an unused slot in the state
    directory fires its action; otherwise the call returns normally.

    A ``proxy`` or ``server`` rule asks the :class:`FaultControl` named by
    ``TWOPC_FAULT_CONTROL`` to perform it, waits until it has, and returns.

    Raises:
        InjectedFault: a matching ``raise`` rule fired.
        FaultControlError: a matching ``proxy``/``server`` rule could not be performed.
        FaultSpecError: the environment holds a malformed spec or unreadable plan.
    Never returns for ``crash``/``kill``/``exit`` rules that fire.
    """
    if unarmed():
        return
    from ._runtime import hit  # an armed process only: see the module docstring
    hit(name, batch_id, context)
