"""The fault point every process passes (a Spark Python worker's task, the driver's commit):
unarmed, it reads two environment variables and loads nothing more; the rules' machinery
(:mod:`twopc.faultinject._runtime`: the spec parser, runs, crashing a job) loads in a process
whose environment arms a plan."""

from __future__ import annotations

import os
from typing import Any

from ._env import ENV_PLAN, ENV_SPEC

__all__ = ["fault_point"]

# ``os.environ.get`` re-encodes the key and decodes the value; on POSIX its backing dict
# ``_data`` (encoded key -> encoded value) is kept in sync by every ``os.environ`` update, so
# the unarmed check reads that dict directly (elsewhere it asks ``os.environ``).
_RAW_ENV: Any = getattr(os.environ, "_data", None)
_RAW_KEYS: tuple[Any, Any] | None = None
if isinstance(_RAW_ENV, dict):
    try:
        _RAW_KEYS = (os.environ.encodekey(ENV_SPEC), os.environ.encodekey(ENV_PLAN))
    except Exception:  # noqa: BLE001 - any failure only means: use os.environ.get  # pragma: no cover
        _RAW_KEYS = None


def _unarmed() -> bool:
    if _RAW_KEYS is not None:
        return _RAW_ENV.get(_RAW_KEYS[0]) is None and _RAW_ENV.get(_RAW_KEYS[1]) is None
    return os.environ.get(ENV_SPEC) is None and os.environ.get(ENV_PLAN) is None  # pragma: no cover


def fault_point(name: str, *, batch_id: int | None = None, **context: object) -> None:
    """Mark a place where the process may be made to die.

    Unarmed (neither ``TWOPC_FAULTS`` nor ``TWOPC_FAULT_PLAN`` set) this only looks
    these two variables up and returns.  When armed, the first matching rule that can
    claim an unused slot in the state directory fires its action; otherwise the call
    returns normally.

    A ``proxy`` or ``server`` rule asks the :class:`FaultControl` named by
    ``TWOPC_FAULT_CONTROL`` to perform it, waits until it has, and returns.

    Raises:
        InjectedFault: a matching ``raise`` rule fired.
        FaultControlError: a matching ``proxy``/``server`` rule could not be performed.
        FaultSpecError: the environment holds a malformed spec or unreadable plan.
    Never returns for ``crash``/``kill``/``exit`` rules that fire.
    """
    if _unarmed():
        return
    from ._runtime import hit  # an armed process only: see the module docstring

    hit(name, batch_id, context)
