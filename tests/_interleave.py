"""An exhaustive interleaving checker for the ledger protocol, run on the real code.

Each *actor* (a driver's run, ``twopc recover``, a hand-built coordinator) is a script of
calls into twopc's real :class:`~twopc.CommitLedger`, :class:`~twopc.CommitCoordinator` and
:class:`~twopc.RecoveryCoordinator`. Every read, create, list and
delete of a ledger record (:class:`SteppedStore`) and every prepare, list, commit and
rollback of a transaction (:class:`ModelSink`) is a *step*: the actor stops before it until
the scheduler lets it run (each actor is a greenlet), so one actor runs at a time and the
scheduler decides the order.

:func:`explore` visits every order of the actors' steps. It is a depth-first search over
the states of the system: a state is the store's records, the target's transactions and
each actor's history (every step it took and what the step returned). Two orders that lead
to the same state have the same futures (the code is deterministic given what it saw), so
a state is expanded once; the search ends when every reachable state was expanded. Each
path is replayed from the start (a running actor cannot be copied), so the cost is the
number of states times their depth. A replay reruns the actors' code only: what each actor
saw up to the branch is kept with the branch, not noted again step by step.

The target is a model (:class:`ModelSink`): transactions are prepared, committed or rolled
back, exactly as a database would answer (a repeated commit is "already committed", a
commit of a rolled-back transaction is "lost"), and it keeps the history the checks read.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import greenlet

from twopc import CommitOutcome, SinkError, TransactionContext, TransactionHandle, TwoPhaseCommitSink
from twopc.spi import ProtocolError, SinkUnavailableError

LOCATION = "model://checkpoint"
_QUIET = "  (no switch) "
#: Records created at most once and never changed or deleted.
_WRITE_ONCE = ("owners/", "verdicts/")
_TIMES = re.compile(r'"(decided_at|committed_at|aborted_at|at)": ?[0-9.e+-]+')


class Aborted(BaseException):
    """Raised in an actor's thread when the scheduler abandons its execution."""


def _norm(value: Any) -> str:
    """What an actor saw, without the clock (record texts carry times)."""
    return _norm_text(value if isinstance(value, str) else repr(value))


@functools.lru_cache(maxsize=1 << 16)
def _norm_text(text: str) -> str:
    # the same few record texts and answers come back in every execution: normalize each once
    return _TIMES.sub(r'"\1":0', text)


@dataclass(frozen=True)
class ModelHandle(TransactionHandle, kind="tests.model", version=1):
    """The handle of a :class:`ModelSink` transaction."""


@dataclass
class Txn:
    """A transaction of the model target."""

    handle: ModelHandle
    state: str = "prepared"
    """``prepared``, ``committed`` or ``rolled_back``."""
    commits: int = 0
    by: list[str] = field(default_factory=list)
    """Who committed or rolled it back (actor names)."""


class World:
    """The shared store and target of one execution, and its scheduler."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.records: dict[str, str] = {}
        self.folders: dict[str, set[str]] = {}
        """The names of :attr:`records` by folder (``"owners/"``): what a listing reads."""
        self.txns: dict[str, Txn] = {}
        self.store = SteppedStore(self)
        self.unreachable: set[str] = set()
        """Actors for which the target refuses every call (a wrong password, a server down)."""
        self.nonce = 0

    def put(self, rel: str, text: str) -> None:
        folder, sep, name = rel.rpartition("/")
        if sep:
            self.folders.setdefault(folder + "/", set()).add(name)
        self.records[rel] = text

    def remove(self, rel: str) -> str | None:
        """Delete a record; what it held (None: there was none)."""
        text = self.records.pop(rel, None)
        folder, sep, name = rel.rpartition("/")
        if text is not None and sep:
            self.folders[folder + "/"].discard(name)
        return text

    def snapshot(self) -> tuple[Any, ...]:
        """The protocol's records (not the metrics) and the target's transactions."""
        return (tuple(sorted((k, _norm(v)) for k, v in self.records.items() if "/" in k or k.startswith(("sink.",
                                                                                                           "target.")))),
                tuple(sorted((k, t.state, t.commits) for k, t in self.txns.items())))


class SteppedStore:
    """An in-memory place of ledger records (:class:`twopc.ledger._stores.Records`) whose every
    operation is a step (see the module docstring)."""

    root = LOCATION

    def __init__(self, world: World) -> None:
        self._w = world

    def where(self, kind: str, name: str) -> str:
        return "/".join((self.root, _rel(kind, name)))

    def record(self, kind: str, name: str) -> str | None:
        rel = _rel(kind, name)
        if rel.startswith(_WRITE_ONCE) and rel in self._w.records:
            # an owner or verdict record, once there, never changes: reading it commutes with every
            # other step, so it is not a point where the order can matter
            return self._w.scheduler.quiet(f"read {rel}", self._w.records[rel])
        return self._w.scheduler.op(f"read {rel}", lambda: self._w.records.get(rel))

    def add(self, kind: str, name: str, text: str) -> bool:
        rel = _rel(kind, name)

        def run() -> bool:
            if rel in self._w.records:
                return False
            self._w.put(rel, text)
            return True
        return self._w.scheduler.op(f"create {rel}", run)

    def write_decision(self, name: str, text: str) -> bool:
        return self.add("decisions", name, text)

    def put(self, kind: str, name: str, text: str, *, durable: bool) -> None:
        """Durable: a step (``target.json``); else a record outside the protocol (twopc's metrics)."""
        rel = _rel(kind, name)
        if durable:
            self._w.scheduler.op(f"create {rel}", lambda: self._w.put(rel, text))
        else:
            self._w.put(rel, text)

    def names(self, kind: str) -> list[str]:
        folder = kind.rstrip("/") + "/"
        return self._w.scheduler.op(f"list {kind}", lambda: sorted(self._w.folders.get(folder, ())))

    def remove(self, kind: str, name: str) -> None:
        rel = _rel(kind, name)
        self._w.scheduler.op(f"delete {rel}", lambda: self._w.remove(rel))


def _rel(kind: str, name: str) -> str:
    return f"{kind}/{name}" if kind else name


class ModelSink(TwoPhaseCommitSink[int, ModelHandle, ModelHandle]):
    """The model target (see the module docstring); one per actor, sharing the world."""

    __handle_type__ = ModelHandle

    def __init__(self, world: World) -> None:
        self._w = world

    def _me(self) -> str:
        me = self._w.scheduler.current()
        if me in self._w.unreachable:
            raise SinkUnavailableError("the model target refuses this actor (a wrong password)")
        return me

    def prepare(self, sink_id: str, batch_id: int, attempt: int) -> ModelHandle:
        """One task attempt: begin, load, prepare (one step)."""
        return self.pre_commit(self.begin_transaction(TransactionContext(sink_id, batch_id, 0, attempt)))

    def begin_transaction(self, context: TransactionContext) -> ModelHandle:
        self._w.nonce += 1
        xid = TransactionContext(context.sink_id, context.batch_id, context.partition_id, context.attempt_id,
                                 nonce=f"{self._w.nonce:08x}").xid()
        return ModelHandle(str(xid), context.sink_id, context.batch_id, context.partition_id, context.attempt_id)

    def invoke(self, txn: ModelHandle, value: int) -> None:
        """Rows are not modelled: a transaction holds its batch."""

    def pre_commit(self, txn: ModelHandle) -> ModelHandle:
        def run() -> ModelHandle:
            self._me()
            self._w.txns[txn.txn_id] = Txn(txn)
            return txn
        return self._w.scheduler.op(f"prepare {txn.txn_id}", run)

    def rollback(self, txn: ModelHandle) -> None:
        """Nothing of an unprepared transaction reaches the target."""

    def commit(self, handle: ModelHandle) -> CommitOutcome:
        def run() -> CommitOutcome:
            me = self._me()
            t = self._w.txns.get(handle.txn_id)
            if t is None or t.state == "rolled_back":
                return CommitOutcome.LOST
            if t.state == "committed":
                return CommitOutcome.ALREADY_COMMITTED
            t.state, t.commits = "committed", t.commits + 1
            t.by.append(me)
            return CommitOutcome.COMMITTED
        return self._w.scheduler.op(f"commit {handle.txn_id}", run)

    def abort(self, handle: ModelHandle) -> None:
        def run() -> None:
            me = self._me()
            t = self._w.txns.get(handle.txn_id)
            if t is None or t.state == "rolled_back":
                return
            if t.state == "committed":
                raise ProtocolError(f"{handle.txn_id} is committed: it cannot be rolled back")
            t.state = "rolled_back"
            t.by.append(me)
        self._w.scheduler.op(f"rollback {handle.txn_id}", run)

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> Sequence[ModelHandle]:
        def run() -> list[ModelHandle]:
            self._me()
            return [t.handle for _, t in sorted(self._w.txns.items())
                    if t.state == "prepared" and t.handle.sink_id == sink_id
                    and (batch_id is None or t.handle.batch_id == batch_id)]
        return self._w.scheduler.op(f"list_prepared {sink_id}", run)

    def describe(self) -> str:
        return "the model target"


# ------------------------------------------------------------------------------------------
@dataclass
class Actor:
    """One actor: a name, its script (called with the world and its own sink), and the actors
    that must have ended before it starts (a restart of a query after its run ended)."""

    name: str
    script: Callable[[World, ModelSink], Any]
    after: tuple[str, ...] = ()


@dataclass
class _Running:
    actor: Actor
    glet: greenlet.greenlet | None = None
    history: list[str] = field(default_factory=list)
    digest: bytes = b""
    """A running SHA-256 over :attr:`history`: equal histories, equal digests (the state key
    reads it instead of the whole history, which grows with every step)."""
    pending: str | None = "start"
    done: bool = False
    outcome: Any = None
    error: BaseException | None = None


class Scheduler:
    """Runs the actors of one execution, one step at a time, in the order the caller picks
    (:meth:`advance`). Each actor is a greenlet: a step switches back to the scheduler."""

    def __init__(self, actors: Sequence[Actor]) -> None:
        self._aborted = False
        self.replaying = False
        """Steps rerun to reach a branch (:func:`explore`): their notes are restored after."""
        self._main = greenlet.getcurrent()
        self._names: dict[greenlet.greenlet, str] = {}
        self.world = World(self)
        self.runs = {a.name: _Running(a) for a in actors}

    def current(self) -> str:
        return self._names.get(greenlet.getcurrent(), "checker")

    def op(self, label: str, fn: Callable[[], Any]) -> Any:
        """Wait for this actor's turn, then run one step and note what it returned. The
        checker's own calls (outside every actor: the final recovery) run at once."""
        name = self._names.get(greenlet.getcurrent())
        if name is None:
            return fn()
        run = self.runs[name]
        self._yield(run, label)
        if self.replaying:
            return fn()
        try:
            result = fn()
        except Exception as exc:
            _note(run, f"{label} -> raise {type(exc).__name__}")
            raise
        _note(run, f"{label} -> {_norm(result)}")
        return result

    def quiet(self, label: str, result: Any) -> Any:
        """Note a step that commutes with every other one: no scheduling point."""
        name = self._names.get(greenlet.getcurrent())
        if name is not None and not self.replaying:
            _note(self.runs[name], f"{_QUIET}{label} -> {_norm(result)}")
        return result

    def _yield(self, run: _Running, label: str) -> None:
        if self._aborted:
            raise Aborted
        run.pending = label
        self._main.switch()
        if self._aborted:
            raise Aborted

    def _body(self, run: _Running) -> None:
        try:
            self._yield(run, "start")
            if not self.replaying:
                _note(run, "start")
            run.outcome = run.actor.script(self.world, ModelSink(self.world))
        except Aborted:
            pass
        except Exception as exc:  # noqa: BLE001 - the actor's end (FencedError, a lost transaction, a bug) is what the checks read
            run.error = exc
        finally:
            run.done, run.pending = True, None

    def start(self) -> None:
        for run in self.runs.values():
            run.glet = greenlet.greenlet(self._body, parent=self._main)
            self._names[run.glet] = run.actor.name
            run.glet.switch(run)  # runs to its first step ("start")

    def enabled(self) -> list[str]:
        return [n for n, r in self.runs.items()
                if not r.done and all(self.runs[a].done for a in r.actor.after)]

    def advance(self, name: str) -> None:
        run = self.runs[name]
        run.pending = None
        assert run.glet is not None
        run.glet.switch()

    def state(self) -> str:
        parts = (self.world.snapshot(),
                 tuple((n, r.done, r.pending, r.digest, _norm(r.error)) for n, r in sorted(self.runs.items())))
        return hashlib.sha256(repr(parts).encode()).hexdigest()

    def abort(self) -> None:
        self._aborted = True
        for run in self.runs.values():
            if run.glet is not None and not run.glet.dead:
                run.glet.switch()  # it raises Aborted at its step and ends


def _note(run: _Running, entry: str) -> None:
    """Add *entry* to *run*'s history and to its running digest."""
    run.history.append(entry)
    run.digest = hashlib.sha256(run.digest + entry.encode() + b"\0").digest()


@dataclass
class Ending:
    """One execution that ran to its end: the world and each actor's outcome."""

    world: World
    runs: dict[str, _Running]
    order: list[str]


@dataclass
class Exploration:
    states: int
    endings: int
    #: whether every reachable state was visited (False: a bounded search stopped at its limit)
    complete: bool = True


def explore(actors: Sequence[Actor], check_end: Callable[[Ending], None],
            check_state: Callable[[World], None] | None = None, *, limit: int = 2_000_000,
            bounded: bool = False) -> Exploration:
    """Visit every reachable state of *actors*; call *check_state* on each (invariants that
    must hold after every step) and *check_end* on every execution that ends (all actors
    done). Raises what a check raises, with the order of steps that led there.

    *bounded*: stop at *limit* states and return (``complete`` False) instead of failing: a
    bounded search, depth first, for scenarios too large to exhaust.

    Raises:
        AssertionError: a check failed (the message names the order), or the search passed
            *limit* states (unless *bounded*).
    """
    seen: set[str] = set()
    # a branch still to take: the steps to the branch, what each actor had noted there, the step
    stack: list[tuple[list[str], dict[str, tuple[list[str], bytes]], str | None]] = [([], {}, None)]
    endings = 0
    while stack:
        prefix, notes, step = stack.pop()
        sched = Scheduler(actors)
        order: list[str] = list(prefix)
        try:
            sched.replaying = True
            sched.start()
            for name in prefix:
                sched.advance(name)
            sched.replaying = False
            for name, (history, digest) in notes.items():
                sched.runs[name].history, sched.runs[name].digest = list(history), digest
            if step is not None:
                sched.advance(step)
                order.append(step)
            while True:
                enabled = sched.enabled()
                key = sched.state()
                if key in seen:
                    break
                seen.add(key)
                if len(seen) > limit:
                    if bounded:
                        return Exploration(limit, endings, complete=False)
                    raise AssertionError(f"more than {limit} states: make the scenario smaller")
                try:
                    if check_state is not None:
                        check_state(sched.world)
                    if not enabled:
                        endings += 1
                        check_end(Ending(sched.world, sched.runs, order))
                except AssertionError as exc:
                    raise AssertionError(f"{exc}\n  after the steps {_describe(sched, order)}") from None
                if not enabled:
                    break
                if len(enabled) > 1:
                    here = {n: (list(r.history), r.digest) for n, r in sched.runs.items()}
                    stack.extend((list(order), here, other) for other in enabled[1:])
                sched.advance(enabled[0])
                order.append(enabled[0])
        finally:
            sched.abort()
    return Exploration(len(seen), endings)


def _describe(sched: Scheduler, order: list[str]) -> str:
    """The steps of *order*, each with what it returned (steps without a switch follow the
    step they came after)."""
    out, index = [], dict.fromkeys(sched.runs, 0)
    for name in order:
        hist = sched.runs[name].history
        i = index[name]
        while i < len(hist) and hist[i].startswith(_QUIET):
            out.append(f"{name}: {hist[i]}")
            i += 1
        out.append(f"{name}: {hist[i] if i < len(hist) else '(end)'}")
        index[name] = i + 1
    return "\n    " + "\n    ".join(out)


def committed_txns(world: World) -> Iterable[Txn]:
    return (t for t in world.txns.values() if t.state == "committed")


def json_record(world: World, rel: str) -> dict[str, Any] | None:
    text = world.records.get(rel)
    return None if text is None else json.loads(text)


__all__ = [
    "LOCATION",
    "Aborted",
    "Actor",
    "Ending",
    "Exploration",
    "ModelHandle",
    "ModelSink",
    "SinkError",
    "Txn",
    "World",
    "committed_txns",
    "explore",
    "json_record",
]
