"""After ``query.stop()``: abort the micro-batch Spark stopped without aborting (the
*unaborted-stop window*: an interrupt that cuts the commit short also keeps Spark's abort from
starting, so the prepared transactions would hold their locks until the next start).
:func:`install` (run by :func:`twopc.register`) adds a streaming query listener that, when a
query writing to a twopc data source ends with a batch its checkpoint does not record
committed, runs the abort (:meth:`CommitCoordinator.abort_batch`) for the driver's JVM. It
needs a classic session; elsewhere, and on failure, the next start or ``twopc recover`` settles
the batch. It also notes the session's ``spark.sql.streaming.checkpointLocation`` at each
start of such a query (:mod:`twopc.spark._checkpoint`).

At each start, while the query's offset log holds no batch, it deletes the temporary files a stop
or a crash during the first offset write left in the offset and commit logs (Spark writes a log
entry to ``.<batch>.<uuid>.tmp`` and renames it; an interrupt can leave it). Spark 4.1+ refuses
to start a query whose empty logs hold any file (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``),
so without this a stop in the first second of a query's life would keep it from ever starting
again from its checkpoint. The listener runs on the query's thread before Spark reads its
checkpoint, so the run never races its own writes."""

from __future__ import annotations

import atexit
import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # py4j ships no types
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener

from .._coordinator import BatchResult, CommitCoordinator
from .._driver_identity import DriverIdentity, identity_of
from .._runtime_options import RuntimeOptions, option
from ..ledger._ledger import CommitLedger
from ..ledger._ledger_records import ledger_exists, ledger_store
from ..ledger._stores import open_store
from ._checkpoint import (
    SESSION_CHECKPOINT_CONF,
    new_notes_folder,
    note_session_root,
    session_checkpoint_root,
    with_checkpoint,
)
from ._spark import TwoPhaseCommitDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["install", "settle_stopped", "start_notes", "wait_settled"]

log = logging.getLogger("twopc.spark")

_listeners: dict[int, _StopListener] = {}
#: how long the exit waits for Spark's listener bus to deliver what it holds (milliseconds)
_EXIT_WAIT_MS = 5000
_guard = threading.Lock()
#: the temporary file Spark's checkpoint file manager writes a log entry to before renaming it
_SPARK_TEMP = re.compile(r"\.\.?\d+\.[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\.tmp(\.crc)?")


def _listener(spark: SparkSession) -> _StopListener | None:
    """The session's listener, added on first use; None without a JVM."""
    with _guard:
        if (listener := _listeners.get(id(spark))) is None:
            if getattr(spark, "_jsparkSession", None) is None:
                log.info("twopc: this Spark session has no JVM (Spark Connect): a micro-batch a stop leaves "
                         "unaborted is settled by the next start of its query, and the session's "
                         "%s is read when the twopc data sources are registered", SESSION_CHECKPOINT_CONF)
                return None
            listener = _StopListener(spark)
            spark.streams.addListener(listener)
            if not _listeners:
                atexit.register(_remove_listeners)
            _listeners[id(spark)] = listener
        return listener


def _remove_listeners() -> None:
    """At exit, take twopc's listeners off their sessions: Spark's JVM outlives the script and would
    call a gone Python process (an ERROR with a py4j stack trace per event). A call under way is
    awaited (up to :data:`_EXIT_WAIT_MS`). Never raises."""
    with _guard:
        listeners = list(_listeners.values())
        _listeners.clear()
    for listener in listeners:
        try:
            listener._spark.streams.removeListener(listener)
            listener._spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(_EXIT_WAIT_MS)
        except Exception:  # the session or its JVM is gone already: nothing will call the listener
            log.debug("twopc: could not remove the streaming query listener at exit", exc_info=True)


def install(spark: SparkSession, data_sources: Mapping[str, type[TwoPhaseCommitDataSource]]) -> None:
    """Add the listener to *spark* once, or tell it about *data_sources*; none without a JVM."""
    if not data_sources:
        return
    if (listener := _listener(spark)) is not None:
        with _guard:
            listener.sources.update(data_sources)


def start_notes(spark: SparkSession) -> str | None:
    """The folder where the listener notes the session's default checkpoint folder at each query
    start; None without a JVM."""
    return None if (listener := _listener(spark)) is None else listener.notes


def wait_settled(spark: SparkSession, run_id: str, timeout: float | None = None) -> bool:
    """Wait until the listener settled the ended run *run_id*; True once it has (or has nothing to
    settle), False on timeout."""
    listener = _listeners.get(id(spark))
    event = None if listener is None else listener.known(run_id)
    return True if event is None else event.wait(timeout)  # a run it never saw start is none of its business


@dataclass
class _Run:
    """A run of a query writing to a twopc data source."""

    query_id: str
    run_id: str
    execution: Any  # Spark's StreamExecution (py4j)
    source: type[TwoPhaseCommitDataSource]
    root: str | None = None  # the session's default checkpoint folder when the run started
    options: dict[str, str] | None = None


class _StartsAndEnds(JStreamingQueryListener):
    """PySpark's bridge to a listener, without converting the progress and idle events: each takes
    dozens of Py4J calls to convert, for every micro-batch of every query of the session, on
    Spark's single listener thread, and the listener needs neither."""

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802 - Spark's method name
        pass

    def onQueryIdle(self, jevent: Any) -> None:  # noqa: N802 - Spark's method name
        pass


class _StopListener(StreamingQueryListener):
    @property
    def _jlistener(self) -> Any:
        """What ``spark.streams.addListener`` hands Spark (PySpark reads this attribute)."""
        if not hasattr(self, "_jlistenerobj"):
            self._jlistenerobj = self._jvm.PythonStreamingQueryListenerWrapper(_StartsAndEnds(self))
        return self._jlistenerobj

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._jvm: Any = spark._jvm  # a classic session's JVM (install checked there is one)
        self._jsession: Any = spark._jsparkSession
        self.notes = new_notes_folder()
        self.sources: dict[str, type[TwoPhaseCommitDataSource]] = {}
        self._runs: dict[str, _Run] = {}
        self._done: dict[str, threading.Event] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def done(self, run_id: str) -> threading.Event:
        with self._guard:
            return self._done.setdefault(run_id, threading.Event())

    def known(self, run_id: str) -> threading.Event | None:
        with self._guard:
            return self._done.get(run_id)

    def _lock(self, query_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(query_id, threading.Lock())

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's method name
        """Before the run plans a batch: settle an unsettled earlier run of the query, then note this run
        (and the session's checkpoint folder now) if it writes to a twopc data source."""
        query_id, run_id = str(event.id), str(event.runId)
        with self._lock(query_id):
            for earlier in [r for r in list(self._runs.values()) if r.query_id == query_id]:
                self._settle(earlier)
            try:
                run = self._describe(query_id, run_id)
            except Exception:  # a listener must not fail the query: logged
                log.warning("twopc: cannot follow streaming query %s (run %s): if a stop leaves its batch "
                            "unaborted, the next start settles it", query_id, run_id, exc_info=True)
                run = None
            if run is not None:
                self._note_root(run, None if event.name is None else str(event.name))
                self._end_earlier_runs(run)
                self._clear_interrupted_start(run)
            done = self.done(run_id)  # what wait_settled waits for, from the start of the run
            if run is None:
                done.set()
            else:
                with self._guard:
                    self._runs[run_id] = run

    def _note_root(self, run: _Run, name: str | None) -> None:
        """Note the session's checkpoint folder for *run*'s writer (never raises)."""
        try:
            run.root = session_checkpoint_root(self._spark)
            note_session_root(self.notes, name, run.root)
        except Exception:  # a listener must not fail the query: logged
            log.warning("twopc: cannot note the session's %s for streaming query %s (run %s): its writer uses the "
                        "folder the session named when the twopc data sources were registered",
                        SESSION_CHECKPOINT_CONF, run.query_id, run.run_id, exc_info=True)

    def _end_earlier_runs(self, run: _Run) -> None:
        """Record this driver's earlier runs over in the ledger, so this run takes over even after a
        ``twopc recover``. Never raises (without it the run stops once with :class:`~twopc.FencedError`)."""
        try:
            location = str(run.execution.resolvedCheckpointRoot())
            if ledger_exists(ledger_store(location)):
                driver = identity_of(int(self._jvm.java.lang.ProcessHandle.current().pid()))
                CommitLedger(location).end_runs_of(driver)
        except Exception:  # a listener must not fail the query: logged
            log.warning("twopc: cannot record the start of streaming query %s (run %s) in its ledger: if twopc "
                        "recover ran while it was down, its first batch stops with FencedError and a restart "
                        "goes on", run.query_id, run.run_id, exc_info=True)

    def _clear_interrupted_start(self, run: _Run) -> None:
        """Delete Spark's temporary files from *run*'s offset and commit logs while its offset log holds
        no batch (see the module's doc). Never raises."""
        try:
            fs_path = self._jvm.org.apache.hadoop.fs.Path
            root = fs_path(str(run.execution.resolvedCheckpointRoot()))
            fs = root.getFileSystem(self._jsession.sessionState().newHadoopConf())

            def files(name: str) -> list[Any]:
                path = fs_path(root, name)
                return [status.getPath() for status in fs.listStatus(path)] if fs.exists(path) else []

            offsets = files("offsets")
            if any(str(f.getName()).isdigit() for f in offsets):  # the offset log holds a batch: Spark checks nothing
                return
            for f in offsets + files("commits"):
                if _SPARK_TEMP.fullmatch(str(f.getName())) and fs.delete(f, False):
                    log.info("twopc: deleted %s/%s from the checkpoint of streaming query %s: a stop or crash during "
                             "its first offset write left it, and Spark would refuse to start the query",
                             f.getParent().getName(), f.getName(), run.query_id)
        except Exception:  # a listener must not fail the query: logged
            log.warning("twopc: cannot look for what an interrupted first offset write left in the checkpoint of "
                        "streaming query %s (run %s)", run.query_id, run.run_id, exc_info=True)

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 - Spark's method name
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 - Spark's method name
        """Read the writer options while Spark's objects are there; settle in a thread (not on the bus)."""
        if (run := self._runs.get(str(event.runId))) is None:
            return
        try:
            run.options = self._options(run)
        except Exception:  # logged: the next start settles the batch
            log.warning("twopc: cannot read the writer options of streaming query %s (run %s) after it ended: "
                        "if the stop left its batch unaborted, the next start settles it", run.query_id,
                        run.run_id, exc_info=True)
        threading.Thread(target=self._settle_alone, args=(run,), name=f"twopc-stop-{run.run_id[:8]}",
                         daemon=True).start()

    def _settle_alone(self, run: _Run) -> None:
        with self._lock(run.query_id):
            self._settle(run)

    def _describe(self, query_id: str, run_id: str) -> _Run | None:
        if (query := self._jsession.streams().get(query_id)) is None:
            return None
        execution = query.streamingQuery()
        try:
            name = str(execution.sink().name())
        except Py4JError:  # a sink without a name: not twopc's
            return None
        source = self.sources.get(name)
        return None if source is None else _Run(query_id, run_id, execution, source)

    def _options(self, run: _Run) -> dict[str, str] | None:
        """The run's writer options as the writer gets them, or None when it planned no batch."""
        execution = run.execution
        if execution.lastExecution() is None:
            return None
        write = execution.logicalPlan()  # WriteToMicroBatchDataSource: initialized by the run's first batch
        options = {str(k): str(v) for k, v in self._jvm.scala.jdk.javaapi.CollectionConverters.asJava(
            write.writeOptions()).items()}
        name = execution.name()
        if name is not None and option(options, "queryName") is None:
            options["queryName"] = str(name)
        return options

    def _settle(self, run: _Run) -> None:
        """Abort the run's last batch if Spark left it unaborted, once (never raises: logged)."""
        with self._guard:
            if self._runs.pop(run.run_id, None) is None:
                return
        try:
            if run.options is None and run.execution is not None:
                run.options = self._options(run)
            if run.options is not None:
                driver = identity_of(int(self._jvm.java.lang.ProcessHandle.current().pid()))
                if (result := settle_stopped(run.source(run.options), driver, session_root=run.root)) is not None:
                    log.info("twopc: streaming query %s (run %s) ended in batch %s, which Spark had not committed: "
                             "settled it (committed if it was decided, else rolled back)", run.query_id, run.run_id,
                             result.batch_id)
        except Exception:  # a listener must not fail: the next start settles the batch
            log.warning("twopc: could not settle the last batch of streaming query %s (run %s) after it ended: "
                        "its prepared transactions wait for the next start of the query (or twopc recover)",
                        run.query_id, run.run_id, exc_info=True)
        finally:
            run.execution = None
            self.done(run.run_id).set()


def settle_stopped(data_source: TwoPhaseCommitDataSource, driver: DriverIdentity, *,
                   session_root: str | None = None) -> BatchResult | None:
    """Abort the micro-batch of *data_source*'s query that Spark's checkpoint holds planned but not
    committed, acting for *driver*; None when there is none, no ledger, or another driver owns it.
    *session_root*: the session's checkpoint folder at the query's start.
    Raises TwoPCError: the ledger or the target failed."""
    options = with_checkpoint(data_source.options, streaming=True,
                              session_root=session_root or data_source.session_checkpoint_root)
    location = option(options, "checkpointLocation")
    if not location or not ledger_exists(ledger_store(location)) or (batch := _unfinished_batch(location)) is None:
        return None
    ledger = CommitLedger(location)
    if ledger.join(driver) is None:
        log.info("twopc: checkpoint %s is owned by another driver now: its batch %s is left to it", location, batch)
        return None
    if (sink_id := ledger.recorded_sink_id()) is None:
        return None
    runtime = RuntimeOptions.parse(options, streaming=True)
    with data_source.build_sink(options) as sink:
        coordinator = CommitCoordinator(sink, ledger, sink_id, keep_last=runtime.keep_last, retry=runtime.retry,
                                        format_name=data_source.name())
        return coordinator.abort_batch(batch, [])


def _unfinished_batch(location: str) -> int | None:
    """The latest batch of the offset log at *location* if the commit log lacks it."""
    spark_log = open_store(location)
    latest = max((int(n) for n in spark_log.list("offsets") if n.isdigit()), default=None)
    return None if latest is None or spark_log.read(f"commits/{latest}") is not None else latest
