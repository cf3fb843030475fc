"""The environment variables that arm fault points and carry a run across processes (see :mod:`twopc.faultinject`),
named apart from the spec parser: an unarmed process reads two of them (:func:`unarmed`) and loads nothing more."""

from __future__ import annotations

import os
from typing import Any, Final

ENV_SPEC: Final = "TWOPC_FAULTS"
ENV_PLAN: Final = "TWOPC_FAULT_PLAN"
ENV_STATE: Final = "TWOPC_FAULT_STATE"
ENV_CRASH_PGID: Final = "TWOPC_CRASH_PGID"
ENV_RUN: Final = "TWOPC_FAULT_RUN"
ENV_CONTROL: Final = "TWOPC_FAULT_CONTROL"

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


def unarmed() -> bool:
    """Neither ``TWOPC_FAULTS`` nor ``TWOPC_FAULT_PLAN`` is set (the cheapest check there is)."""
    if _RAW_KEYS is not None:
        return _RAW_ENV.get(_RAW_KEYS[0]) is None and _RAW_ENV.get(_RAW_KEYS[1]) is None
    return os.environ.get(ENV_SPEC) is None and os.environ.get(ENV_PLAN) is None  # pragma: no cover
