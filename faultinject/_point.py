"""The fault point every process passes: unarmed, it reads two environment variables and loads
nothing more; the rules' machinery (``_runtime``) loads where a plan is armed."""

from __future__ import annotations

from ._env import unarmed


def fault_point(name: str, *, batch_id: int | None = None, **context: object) -> None:
    """Mark a place where the process may be made to die.

    When armed, the first matching rule that can claim an unused slot fires: ``crash``, ``kill``
    and ``exit`` never return; ``raise`` raises :class:`InjectedFault`; a ``proxy`` or ``server``
    rule returns once the :class:`FaultControl` performed it (else FaultControlError).
    FaultSpecError when the environment holds a malformed spec or unreadable plan."""
    if unarmed():
        return
    from ._runtime import hit  # an armed process only: see the module docstring
    hit(name, batch_id, context)
