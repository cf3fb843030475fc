"""Named fault points that make a process (driver or Spark Python worker) die on cue.

Code marks places with :func:`fault_point`; a plan armed through the environment
(``TWOPC_FAULTS`` inline spec, which wins, or a ``TWOPC_FAULT_PLAN`` JSON file) decides which
fire and how: ``name[@batch=N][@partition=P][:action][*times]``, actions ``crash`` (SIGKILL the
whole run: driver, JVM, their descendants), ``kill``, ``raise``, ``exit``, ``hold`` and the
remote ``proxy/TARGET/FAULT[/key=value...]`` and ``server/TARGET/FAULT`` that the
:class:`FaultControl` named by ``TWOPC_FAULT_CONTROL`` performs. The grammar, runs, crash
groups and where ``times`` is counted: docs/development/fault-injection.md.

Importing it loads only the fault points (twopc imports it on every executor, standard library
only); every other name (:func:`armed`, :class:`ChaosRunner`, the ``Local*`` servers,
:class:`FaultProxy`...) loads on first use."""


if __name__ != "twopc.faultinject":  # this folder imported by its own name, from a checkout
    raise ImportError(f"this folder is the package twopc.faultinject, imported here as {__name__!r}: "
                      "import twopc.faultinject (under two names, each class would exist twice)")

import importlib as _importlib
from typing import TYPE_CHECKING

from ._env import ENV_CONTROL, ENV_CRASH_PGID, ENV_PLAN, ENV_RUN, ENV_SPEC, ENV_STATE
from ._point import fault_point

if TYPE_CHECKING:
    from ._control import FaultControl
    from ._errors import FaultControlError, FaultSpecError, InjectedFault, ServerUnavailable, UnknownFaultPoint
    from ._proxy import FaultProxy, ProxyConnection
    from ._registry import declare, declared_points
    from ._runtime import (
        EXIT_CODE,
        RELEASE_FILE,
        armed,
        current_state_dir,
        export_crash_group,
        export_run,
        read_firings,
    )
    from ._spark_cluster import LocalSparkCluster
    from ._spark_connect import LocalSparkConnect
    from ._spec import ACTIONS, Action, FaultPlan, FaultRule
    from .chaos import ChaosJobFailed, ChaosReport, ChaosRun, ChaosRunner
    from .servers import LocalMariaDB, LocalPostgres, LocalRedis, LocalRedisCluster

# Public name -> the submodule that defines it, imported on first access (PEP 562).
_LAZY: dict[str, str] = {
    **dict.fromkeys(("FaultControlError", "FaultSpecError", "InjectedFault", "ServerUnavailable",
                     "UnknownFaultPoint"), "._errors"),
    **dict.fromkeys(("declare", "declared_points"), "._registry"),
    **dict.fromkeys(("EXIT_CODE", "RELEASE_FILE", "armed", "current_state_dir", "export_crash_group", "export_run",
                     "read_firings"), "._runtime"),
    **dict.fromkeys(("ACTIONS", "Action", "FaultPlan", "FaultRule"), "._spec"),
    **dict.fromkeys(("ChaosJobFailed", "ChaosReport", "ChaosRun", "ChaosRunner"), ".chaos"),
    **dict.fromkeys(("LocalMariaDB", "LocalPostgres", "LocalRedis", "LocalRedisCluster"), ".servers"),
    **dict.fromkeys(("FaultProxy", "ProxyConnection"), "._proxy"),
    "FaultControl": "._control",
    "LocalSparkCluster": "._spark_cluster",
    "LocalSparkConnect": "._spark_connect",
}

__all__ = ["ACTIONS", "ENV_CONTROL", "ENV_CRASH_PGID", "ENV_PLAN", "ENV_RUN", "ENV_SPEC", "ENV_STATE", "EXIT_CODE",
           "RELEASE_FILE", "Action", "ChaosJobFailed", "ChaosReport", "ChaosRun", "ChaosRunner", "FaultControl",
           "FaultControlError", "FaultPlan", "FaultProxy", "FaultRule", "FaultSpecError", "InjectedFault",
           "LocalMariaDB", "LocalPostgres", "LocalRedis", "LocalRedisCluster", "LocalSparkCluster", "LocalSparkConnect",
           "ProxyConnection", "ServerUnavailable", "UnknownFaultPoint", "armed", "current_state_dir", "declare",
           "declared_points", "export_crash_group", "export_run", "fault_point", "read_firings"]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
