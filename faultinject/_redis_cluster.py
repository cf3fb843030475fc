"""A throwaway Redis Cluster on loopback (three masters, one replica each; every node a :class:`LocalRedis` with
``--cluster-enabled yes``) and a cluster's faults: slot migration (MOVED/ASK), coordinated and forced failover, a master
replaced by its replica, a replica cut off from its master. Commands go through a tiny standard-library RESP client."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._errors import ServerUnavailable
from ._procutil import first_executable, free_port
from ._redis import LocalRedis, find_redis_server
from ._server import Startable

if TYPE_CHECKING:
    from typing import Self

#: The user a cut-off replica authenticates as (it does not exist, so the master refuses it).
_CUT_USER = "twopc-replication-cut"


class RedisReplyError(ServerUnavailable):
    """A cluster node answered a command with an error reply."""


def find_redis_cli(explicit: str | None = None) -> str:
    """Path of ``redis-cli``: *explicit*, ``$TWOPC_REDIS_CLI``, next to ``redis-server``, ``PATH``;
    raises :class:`ServerUnavailable` (saying how to install it) when none is found."""
    near = os.path.join(os.path.dirname(find_redis_server()), "redis-cli")
    found = first_executable((explicit, os.environ.get("TWOPC_REDIS_CLI"), near, shutil.which("redis-cli")))
    if found is not None:
        return found
    raise ServerUnavailable("redis-cli not found; run `apt-get install -y redis-tools` (it comes with redis-server)")


def _encode(args: tuple[Any, ...]) -> bytes:
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def _parse(f: Any) -> Any:
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed before the reply")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return RedisReplyError(rest.decode(errors="replace"))
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2].decode(errors="replace")
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_parse(f) for _ in range(n)]
    raise ConnectionError(f"unexpected RESP reply {line[:40]!r}")


def resp_command(port: int, *args: Any, timeout_s: float = 30.0) -> Any:
    """Send one command to ``127.0.0.1:<port>``, return its reply; raises :class:`RedisReplyError`
    on an error reply, OSError when the node cannot be reached."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(_encode(args))
        with sock.makefile("rb") as f:
            reply = _parse(f)
    if isinstance(reply, RedisReplyError):
        raise RedisReplyError(f"127.0.0.1:{port} {' '.join(map(str, args[:3]))}: {reply}")
    return reply


@dataclass(frozen=True)
class ClusterNode:
    """One line of ``CLUSTER NODES`` as one node sees it."""

    node_id: str
    port: int
    flags: frozenset[str]
    master_id: str | None
    slots: tuple[tuple[int, int], ...]

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def failed(self) -> bool:
        return bool(self.flags & {"fail", "fail?", "noaddr"})

    def serves(self, slot: int) -> bool:
        return any(lo <= slot <= hi for lo, hi in self.slots)


def _parse_nodes(text: str) -> list[ClusterNode]:
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        port = int(parts[1].split("@")[0].rsplit(":", 1)[1] or 0)
        slots = []
        for s in parts[8:]:
            if s.startswith("["):
                continue  # a slot being migrated/imported
            lo, _, hi = s.partition("-")
            slots.append((int(lo), int(hi or lo)))
        out.append(ClusterNode(parts[0], port, frozenset(parts[2].replace("myself,", "").split(",")),
                               None if parts[3] == "-" else parts[3], tuple(slots)))
    return out


class LocalRedisCluster(Startable):
    """*masters* masters with *replicas* replicas each, on ``127.0.0.1``, in temporary folders.

    :attr:`url` names one node (a cluster client learns the rest). A killed master is replaced by
    its replica after about twice *node_timeout_ms*; a node keeps its ports across :meth:`kill` +
    :meth:`restart_node`. Methods that change the topology wait until every live node agrees and
    raise :class:`ServerUnavailable` when they do not within the startup timeout."""

    def __init__(self, *, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 2000,
                 base_dir: str | None = None, startup_timeout_s: float = 60.0) -> None:
        if masters < 3:
            raise ValueError("a Redis Cluster needs at least 3 masters")
        self.masters, self.replicas = masters, replicas
        self.node_timeout_ms = node_timeout_ms
        self._timeout = startup_timeout_s
        self._base_dir = base_dir
        self.nodes: list[LocalRedis] = []

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port of a live node>/0``."""
        node = next((n for n in self.nodes if n.running), None)
        if node is None:
            raise ServerUnavailable("LocalRedisCluster is not running")
        return node.url

    def start(self) -> Self:
        """Start the nodes, create the cluster, wait until it is ``ok`` and every replica in sync."""
        if self.nodes:
            return self
        cli = find_redis_cli()
        atexit.register(self.stop)
        for _ in range(self.masters * (1 + self.replicas)):
            bus = free_port()
            node = LocalRedis(base_dir=self._base_dir, extra_args=(
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", str(bus),
                "--cluster-node-timeout", str(self.node_timeout_ms), "--appendfilename", "appendonly.aof"))
            self.nodes.append(node)
            node.start()
        argv = [cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas", str(self.replicas), "--cluster-yes"]
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=self._timeout, check=False)
        if done.returncode != 0:
            self.stop()
            raise ServerUnavailable(f"redis-cli --cluster create failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        self.wait_stable()
        return self

    def stop(self) -> None:
        """Stop every node and delete its data. Idempotent."""
        for node in self.nodes:
            node.stop()
        self.nodes = []
        atexit.unregister(self.stop)

    def command(self, node: LocalRedis, *args: Any) -> Any:
        """Run one command on *node* (see :func:`resp_command`)."""
        return resp_command(node.port, *args)

    def node_id(self, node: LocalRedis) -> str:
        """The node's cluster id (``CLUSTER MYID``)."""
        return str(self.command(node, "CLUSTER", "MYID"))

    def by_port(self, port: int) -> LocalRedis:
        return next(n for n in self.nodes if n.port == port)

    def view(self, node: LocalRedis | None = None) -> list[ClusterNode]:
        """``CLUSTER NODES`` as *node* (default: the first live node) sees it."""
        node = node or next(n for n in self.nodes if n.running)
        return _parse_nodes(str(self.command(node, "CLUSTER", "NODES")))

    def master_of(self, slot: int) -> LocalRedis:
        """The live master serving *slot*, as the live nodes agree."""
        self.wait_stable()
        owner = next(n for n in self.view() if n.is_master and n.serves(slot))
        return self.by_port(owner.port)

    def replica_of(self, master: LocalRedis) -> LocalRedis:
        """A live replica of *master*; ServerUnavailable (with its view) when it has none."""
        mid = self.node_id(master)
        view = self.view(master)
        rep = next((n for n in view if n.master_id == mid and not n.failed), None)
        if rep is None:
            raise ServerUnavailable(f"master {master.port} has no live replica; it sees {view}")
        return self.by_port(rep.port)

    def wait_stable(self) -> None:
        """Wait until every live node says ``cluster_state:ok`` and sees the same slot owners, none
        is failed or a master without slots, and every replica's link is up."""
        self._wait(self._unstable_reason, "the Redis Cluster did not settle")

    def _wait(self, problem: Callable[[], str], what: str, poll_s: float = 0.1) -> None:
        """Wait until *problem* returns ``""``; ServerUnavailable (*what*, last problem) after the timeout."""
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                last = problem()
            except (OSError, RedisReplyError) as exc:
                last = str(exc)
            if not last:
                return
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"{what}: {last}")
            time.sleep(poll_s)

    def _unstable_reason(self) -> str:
        live = [n for n in self.nodes if n.running]
        owners = set()
        for node in live:
            if "cluster_state:ok" not in str(self.command(node, "CLUSTER", "INFO")):
                return f"node {node.port} is not ok"
            view = self.view(node)
            live_ports = {n.port for n in live}
            if any(v.failed for v in view if v.port in live_ports):
                return f"node {node.port} still flags a live node failed"
            if empty := [v.port for v in view if v.port in live_ports and v.is_master and not v.slots]:
                # a master that lost its slots to a failover turns replica only when the
                # new owner's next message reaches it: until then it has no master to follow
                return f"node {node.port} sees node {empty[0]} as a master without slots (not yet a replica)"
            owners.add(tuple(sorted((v.port, v.slots) for v in view if v.is_master and v.slots)))
            if "role:slave" in (info := str(self.command(node, "INFO", "replication"))) \
                    and "master_link_status:up" not in info:
                return f"replica {node.port} is not in sync"
        if len(owners) != 1:
            return "the nodes disagree about slot owners"
        return ""

    def begin_migration(self, slot: int, target: LocalRedis) -> LocalRedis:
        """Mark *slot* IMPORTING on *target* and MIGRATING on its owner (clients now get ASK); returns the owner."""
        source = self.master_of(slot)
        self.command(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
        self.command(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))
        return source

    def move_keys(self, slot: int, source: LocalRedis, target: LocalRedis, keys: list[str] | None = None) -> int:
        """``MIGRATE`` *keys* (default: every key of *slot* on *source*) to *target*; returns how many."""
        if keys is None:
            keys = list(self.command(source, "CLUSTER", "GETKEYSINSLOT", slot, 100_000))
        if keys:
            self.command(source, "MIGRATE", "127.0.0.1", target.port, "", 0, 30_000, "KEYS", *keys)
        return len(keys)

    def finish_migration(self, slot: int, target: LocalRedis) -> None:
        """Give *slot* to *target* on every master (clients of the old owner now get MOVED)."""
        tid = self.node_id(target)
        masters = [self.by_port(v.port) for v in self.view() if v.is_master and not v.failed]
        for node in [target, *(m for m in masters if m is not target)]:
            self.command(node, "CLUSTER", "SETSLOT", slot, "NODE", tid)
        self.wait_stable()

    def migrate_slot(self, slot: int, target: LocalRedis) -> None:
        """Move *slot* with its keys to *target* (begin, move every key, finish)."""
        source = self.begin_migration(slot, target)
        self.move_keys(slot, source, target)
        self.finish_migration(slot, target)

    def wait_replicated(self, master: LocalRedis, timeout_s: float = 10.0) -> int:
        """How many replicas acknowledged every write *master* had taken when called, waiting up to
        *timeout_s* for all of them (a replica acknowledges about once a second). ``WAIT`` cannot say:
        it counts the calling connection's own writes, so on a fresh connection it answers at once
        with every connected replica, whatever they applied."""
        def replication() -> tuple[int, list[int]]:
            fields = dict(line.split(":", 1) for line in str(self.command(master, "INFO", "replication")).splitlines()
                          if ":" in line)
            acked = [int(dict(kv.split("=", 1) for kv in v.split(","))["offset"])
                     for k, v in fields.items() if k.startswith("slave") and k[5:].isdigit()]
            return int(fields["master_repl_offset"]), acked
        goal, acked = replication()
        deadline = time.monotonic() + timeout_s
        while sum(a >= goal for a in acked) < len(acked) and time.monotonic() < deadline:
            time.sleep(0.05)
            acked = replication()[1]
        return sum(a >= goal for a in acked)

    def failover(self, replica: LocalRedis, mode: str = "") -> None:
        """``CLUSTER FAILOVER [FORCE|TAKEOVER]`` on *replica*, wait until it is an agreed master. Without
        *mode* it is coordinated: the master stops writes until the replica caught up, nothing is lost."""
        self.command(replica, "CLUSTER", "FAILOVER", *([mode] if mode else []))
        self.wait_master(replica)

    def wait_master(self, node: LocalRedis) -> None:
        """Wait until *node* is an agreed master with slots (after a failover or automatic replacement)."""
        def problem() -> str:
            me = next(v for v in self.view(node) if v.port == node.port)
            return self._unstable_reason() if me.is_master and me.slots else "not a master with slots yet"
        self._wait(problem, f"node {node.port} did not become a master the cluster agrees on")

    def restart_node(self, node: LocalRedis) -> None:
        """Start a killed node again (same ports and ``nodes.conf``); it rejoins, a replaced master as a
        replica. Waits until the cluster is stable."""
        node.start()
        self.wait_stable()

    def detach_replica(self, replica: LocalRedis) -> None:
        """Cut *replica* off its master (it authenticates as a user that does not exist; the master drops
        its link): acknowledged writes never reach it, asynchronous replication's loss window held open."""
        master = next(v for v in self.view(replica) if v.port == replica.port).master_id
        owner = next(v for v in self.view(replica) if v.node_id == master)
        self.command(replica, "CONFIG", "SET", "masteruser", _CUT_USER)
        self.command(replica, "CONFIG", "SET", "masterauth", "cut")
        self.command(self.by_port(owner.port), "CLIENT", "KILL", "TYPE", "replica")
        def linked() -> str:
            return "link up" if "master_link_status:up" in str(self.command(replica, "INFO", "replication")) else ""
        self._wait(linked, f"replica {replica.port} stayed connected to its master", poll_s=0.05)

    def reattach_replica(self, replica: LocalRedis) -> None:
        """Undo :meth:`detach_replica` (the replica reconnects as the default user)."""
        self.command(replica, "CONFIG", "SET", "masteruser", "")
        self.command(replica, "CONFIG", "SET", "masterauth", "")
