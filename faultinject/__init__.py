"""Named fault points that make a process (driver or Spark Python worker) die on cue.

Code marks places with :func:`fault_point`; a plan armed through the environment
(``TWOPC_FAULTS`` inline spec, or ``TWOPC_FAULT_PLAN`` JSON file path) decides which
of them fire and how.  Inline grammar (comma-separated rules)::

    name[@batch=N][@partition=P][:action][*times]

``action``: ``crash`` (default; SIGKILL the whole job, see below), ``kill`` (SIGKILL only
this process), ``raise`` (:class:`InjectedFault`), ``exit`` (``os._exit(17)``), ``hold``
(wait until a file named ``release`` appears in the state directory, at most 10 minutes,
then go on: a slow process, released when the test says), and the remote
actions ``proxy/TARGET/FAULT[/key=value...]`` and ``server/TARGET/FAULT`` that the
:class:`FaultControl` named by ``TWOPC_FAULT_CONTROL`` performs on the proxy or server it
owns as TARGET (e.g. ``after_decision:server/postgres/crash``).

A plan armed in a job's environment (``TWOPC_FAULTS=... python job.py``, or
``spark-submit``) belongs to one *run* of the job, which begins in the first process that
arms it (the driver).  ``twopc.register`` hands the run to Spark (:func:`export_run`): the
Python workers Spark starts for twopc's data sources know it even when the JVM was running
before, and the JVM counts as the run's second root.  A ``crash`` fired in any process of
the run (the driver, a Spark Python worker) kills the driver, the JVM, everything descending
from them and the groups one of them leads, then itself: the job's command ends by SIGKILL.
A group the job merely runs in (``make``'s, a test runner's) is left alone.  When
``TWOPC_CRASH_PGID`` is set (:func:`export_crash_group`, :class:`ChaosRunner`), a crash
kills that process group and the firing process's own group instead.

``times`` (default 1) is counted across the processes of a run through marker files in a
state directory: ``TWOPC_FAULT_STATE``, else the plan file's ``state_dir``, else
``<plan file>.state`` -- these count across runs and restarts too and are never deleted
(``armed()`` and ``ChaosRunner`` give tests their own).  An inline spec without
``TWOPC_FAULT_STATE`` counts in a folder of the run's own,
``<tempdir>/twopc-faults-run-XXXXXXXX`` (mode 0700), so each new run of the same spec
fires again; the folder is deleted when the run ends (the driver's exit, the crash), and
one a run killed some other way left behind is deleted by the user's next run.
:func:`current_state_dir` names it.

``TWOPC_FAULTS`` wins over ``TWOPC_FAULT_PLAN`` when both are set.  This package uses
only the standard library.

Importing it loads only the fault points (twopc imports it on every executor); every other
name loads on first use: the rules' machinery (:func:`armed`, :class:`FaultPlan`), the chaos
runner (:class:`ChaosRunner`), the throwaway servers (:class:`LocalPostgres`,
:class:`LocalMariaDB`, :class:`LocalRedis`, :class:`LocalRedisCluster`), a Spark standalone
cluster (:class:`LocalSparkCluster`), a Spark Connect server (:class:`LocalSparkConnect`) and
the network fault proxy (:class:`FaultProxy`: resets, latency, blackholes, swallowed replies).
"""


if __name__ != "twopc.faultinject":  # this folder imported by its own name, from a checkout
    raise ImportError(f"this folder is the package twopc.faultinject, imported here as {__name__!r}: "
                      "import twopc.faultinject"
                      " (under two names, each class would exist twice)")

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
    "ChaosJobFailed": ".chaos",
    "ChaosReport": ".chaos",
    "ChaosRun": ".chaos",
    "ChaosRunner": ".chaos",
    "FaultControl": "._control",
    "FaultProxy": "._proxy",
    "LocalMariaDB": ".servers",
    "LocalPostgres": ".servers",
    "LocalRedis": ".servers",
    "LocalRedisCluster": ".servers",
    "LocalSparkCluster": "._spark_cluster",
    "LocalSparkConnect": "._spark_connect",
    "ProxyConnection": "._proxy",
}

__all__ = [
    "ACTIONS",
    "ENV_CONTROL",
    "ENV_CRASH_PGID",
    "ENV_PLAN",
    "ENV_RUN",
    "ENV_SPEC",
    "ENV_STATE",
    "EXIT_CODE",
    "RELEASE_FILE",
    "Action",
    "ChaosJobFailed",
    "ChaosReport",
    "ChaosRun",
    "ChaosRunner",
    "FaultControl",
    "FaultControlError",
    "FaultPlan",
    "FaultProxy",
    "FaultRule",
    "FaultSpecError",
    "InjectedFault",
    "LocalMariaDB",
    "LocalPostgres",
    "LocalRedis",
    "LocalRedisCluster",
    "LocalSparkCluster",
    "LocalSparkConnect",
    "ProxyConnection",
    "ServerUnavailable",
    "UnknownFaultPoint",
    "armed",
    "current_state_dir",
    "declare",
    "declared_points",
    "export_crash_group",
    "export_run",
    "fault_point",
    "read_firings",
]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
