"""Session-wide defaults of writer options: a sink names them (:attr:`TwoPhaseCommitSink.__session_options__`) and
:func:`twopc.register` reads each from ``spark.twopc.<option>``; they travel as a class attribute of the registered
data source and apply to writes that do not set the option. Recovery reads the values the checkpoint recorded."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

from .._errors import ConfigurationError
from .._runtime_options import option
from ._checkpoint import subclass_with

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SESSION_OPTION_PREFIX", "bind_session_options", "session_option_defaults", "with_session_defaults"]

log = logging.getLogger("twopc")

#: ``spark.twopc.<option>``: a session's default of a writer option.
SESSION_OPTION_PREFIX = "spark.twopc."

T = TypeVar("T", bound=type)


def session_option_defaults(spark: SparkSession, names: Iterable[str]) -> dict[str, str]:
    """The session's non-blank ``spark.twopc.<name>`` of each of *names*."""
    values = {name: spark.conf.get(SESSION_OPTION_PREFIX + name, None) for name in names}
    return {name: value.strip() for name, value in values.items() if isinstance(value, str) and value.strip()}


def bind_session_options(data_source: T, defaults: Mapping[str, str]) -> T:
    """*data_source*, or a subclass carrying *defaults* as a class attribute (pickled with it)."""
    return subclass_with(data_source, session_defaults=dict(defaults)) if defaults else data_source


def with_session_defaults(options: Mapping[str, str], defaults: Mapping[str, str], names: Iterable[str],
                          recorded: Mapping[str, str] | None, checkpoint: str | None) -> dict[str, str]:
    """*options* with each session default the write does not set, and *names* pinned to what the
    checkpoint recorded (*recorded*; None: nothing): they say where recovery reads. A default the
    checkpoint did not record gives way; a value the write sets must be the recorded one.
    Raises ConfigurationError: the write sets one of *names* otherwise than its checkpoint recorded."""
    out = dict(options)
    for name in names:
        given = option(options, name)
        default = defaults.get(name)
        if recorded is None:
            if given is None and default is not None:
                out[name] = default
                log.info("twopc: option %s=%s from the session's %s%s", name, default, SESSION_OPTION_PREFIX, name)
            continue
        was = option(recorded, name)
        if given is not None:
            if given.strip() != (was or "").strip():
                shown = f"{name}={was}" if was is not None else f"no {name}"
                raise ConfigurationError(
                    f"this write sets {name}={given}, but its checkpoint {checkpoint} records {shown}: the tables "
                    f"recovery reads for its batches are where that says. Nothing was written or recorded. Set "
                    f"{name} as recorded" + (" (remove the option)" if was is None else "")
                    + ", or give the write a new checkpointLocation")
            continue
        if was is not None:
            out[name] = was
        if default is not None and default != was:
            kept = f"{name}={was}" if was is not None else f"no {name}"
            log.info("twopc: the session's %s%s=%s does not apply to checkpoint %s, which records %s",
                     SESSION_OPTION_PREFIX, name, default, checkpoint, kept)
    return out
