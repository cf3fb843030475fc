"""Where a streaming query's checkpoint is when the options do not say. Spark does not pass a Python data source the
``<spark.sql.streaming.checkpointLocation>/<queryName>`` it resolved, so twopc's query listener
(:mod:`twopc.spark._stops`) notes the session's folder at each start (:func:`note_session_root`) for the writer
(:func:`session_root_at_start`); on Spark Connect the folder at registration is used. The writer checks Spark's
checkpoint is there and refuses an unnamed query (its checkpoint is a random id)."""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .._errors import ConfigurationError
from .._runtime_options import option

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SESSION_CHECKPOINT_CONF", "bind_session_checkpoint", "new_notes_folder", "note_session_root",
           "session_checkpoint_root", "session_root_at_start", "subclass_with", "with_checkpoint"]

#: The session configuration holding a streaming query's default checkpoint folder.
SESSION_CHECKPOINT_CONF = "spark.sql.streaming.checkpointLocation"

T = TypeVar("T", bound=type)


def session_checkpoint_root(spark: SparkSession) -> str | None:
    """The session's ``spark.sql.streaming.checkpointLocation``, or None."""
    value = spark.conf.get(SESSION_CHECKPOINT_CONF, None)
    return value.strip() or None if isinstance(value, str) else None


def bind_session_checkpoint(data_source: T, root: str | None, notes: str | None = None) -> T:
    """*data_source*, or a subclass carrying *root* and the listener's *notes* folder as class
    attributes (they travel with the pickled class)."""
    if root is None and notes is None:
        return data_source
    return subclass_with(data_source, session_checkpoint_root=root, start_notes=notes)


def subclass_with(cls: T, **attrs: Any) -> T:
    """A subclass of *cls* named as it, with the class attributes *attrs*."""
    attrs.update(__module__=cls.__module__, __qualname__=cls.__qualname__, __doc__=cls.__doc__)
    return type(cls.__name__, (cls,), attrs)  # type: ignore[return-value]  # a subclass of T


def new_notes_folder() -> str:
    """A new private folder for one session's start notes, removed at exit."""
    folder = tempfile.mkdtemp(prefix="twopc-starts-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def _note_path(notes: str, query_name: str | None) -> str:
    return os.path.join(notes, hashlib.sha256((query_name or "").encode("utf-8")).hexdigest()[:32])


def note_session_root(notes: str, query_name: str | None, root: str | None) -> None:
    """Note *root* as the query *query_name* (None: unnamed) starts (written, then renamed in place)."""
    path = _note_path(notes, query_name)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(root or "")
    os.replace(tmp, path)


def session_root_at_start(notes: str | None, query_name: str | None, registered: str | None) -> str | None:
    """The folder the query's start noted, else *registered*."""
    if notes is None:
        return registered
    try:
        with open(_note_path(notes, query_name), encoding="utf-8") as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return registered


def with_checkpoint(options: Mapping[str, str], *, streaming: bool, session_root: str | None) -> dict[str, str]:
    """*options* with ``checkpointLocation`` where Spark puts a named streaming query's checkpoint
    (``<session_root>/<queryName>``) when not given.
    Raises ConfigurationError: an unnamed streaming query without ``checkpointLocation`` while the
    session has a default folder."""
    out = dict(options)
    if not streaming or option(options, "checkpointLocation") or not session_root:
        return out
    if not (name := (option(options, "queryName") or "").strip()):
        raise ConfigurationError(
            f"this streaming query has no checkpointLocation option and no name: Spark puts its checkpoint "
            f"in a new random folder under {SESSION_CHECKPOINT_CONF}={session_root} at every start, whose "
            f"name it does not pass to the writer. Name the query (.queryName(\"orders\")) so its "
            f"checkpoint is {session_root.rstrip('/')}/<name>, or set .option(\"checkpointLocation\", ...)")
    out["checkpointLocation"] = f"{session_root.rstrip('/')}/{name}"
    return out


def missing_spark_checkpoint(location: str) -> ConfigurationError:
    """The error for a resolved default checkpoint in which Spark wrote nothing."""
    return ConfigurationError(
        f"Spark's checkpoint for this query is not at {location} (no metadata file), where the session's "
        f"{SESSION_CHECKPOINT_CONF} put it when the query started (on Spark Connect: when the twopc data sources "
        f"were registered). Give the query .option(\"checkpointLocation\", ...), or on Spark Connect register "
        f"the data sources again (twopc.register_all(spark) or twopc.register(spark, ...)) after setting it")
