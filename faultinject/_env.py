"""The environment variables that arm fault points and carry a run across processes (see
:mod:`twopc.faultinject`), named apart from the spec parser: an unarmed process reads two of
them and loads nothing more."""

from __future__ import annotations

from typing import Final

ENV_SPEC: Final = "TWOPC_FAULTS"
ENV_PLAN: Final = "TWOPC_FAULT_PLAN"
ENV_STATE: Final = "TWOPC_FAULT_STATE"
ENV_CRASH_PGID: Final = "TWOPC_CRASH_PGID"
ENV_RUN: Final = "TWOPC_FAULT_RUN"
ENV_CONTROL: Final = "TWOPC_FAULT_CONTROL"
