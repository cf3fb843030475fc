"""A reference HTTP service for ``twopc-http``'s tests: real sockets on 127.0.0.1, following the
IETF ``Idempotency-Key`` draft (httpapi working group).

- The first request with a key is applied and its answer stored (201, JSON).
- A repeat with the same key and payload (method, path, body) gets the stored answer, marked
  ``Idempotent-Replayed: true``; the same key with another payload gets 422; a repeat while
  the first is still being applied (in flight) gets 409.
- A request without a key is applied every time; so is every request in :attr:`ignore_keys`
  mode (a server that ignores keys).

It counts the effects applied per key and per row (the ``id`` of a JSON body) and logs every
request it saw, whatever happened to it (:attr:`log`): what the tests assert exactly-once and
"nothing sent for a batch never decided" from. Misbehaviours, each for the next *n* requests:
:meth:`fail` (500 or any status), :meth:`throttle` (429 or 503 with ``Retry-After``), :meth:`slow`
(answers late: the client times out and retries while the first is in flight), :meth:`refuse`
(a permanent 4xx for rows whose id matches), :meth:`lose_reply` (apply, then close the
connection without an answer). For the chaos world it is also a server a
:class:`twopc.faultinject.FaultControl` can crash and restart: the state (what was applied and
stored) survives, as a real service's database would; open connections do not.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["HttpService", "Seen", "self_signed", "undecided_requests"]

KEY_HEADER = "idempotency-key"


@dataclass(frozen=True)
class Seen:
    """One request the service received."""

    at: float
    method: str
    path: str
    key: str | None
    txn: str | None
    body: bytes
    answer: int
    auth: str | None = None


@dataclass
class _Stored:
    fingerprint: tuple[str, str, bytes]
    status: int = 0
    body: bytes = b""
    done: bool = False


@dataclass
class _Trouble:
    """A misbehaviour for the next *left* requests that match."""

    left: int
    status: int = 0
    retry_after: str | None = None
    delay: float = 0.0
    lose: bool = False
    match: Callable[[dict[str, Any]], bool] | None = None
    every: int = 1
    seen: int = 0


class HttpService:
    """The service (see the module). Use as a context manager, or :meth:`start`/:meth:`stop`."""

    def __init__(self, *, ignore_keys: bool = False, txn_header: str = "Twopc-Transaction",
                 tls: tuple[str, str] | None = None) -> None:
        self.ignore_keys = ignore_keys
        self.tls = tls
        self.txn_header = txn_header.lower()
        self.log: list[Seen] = []
        self.applied: collections.Counter[str] = collections.Counter()
        self.effects: list[tuple[str | None, Any]] = []
        self._stored: dict[str, _Stored] = {}
        self._troubles: list[_Trouble] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self.port = 0

    # -- lifecycle (also what FaultControl calls) ----------------------------------------
    def start(self) -> HttpService:
        service = self

        class Handler(_Handler):
            owner = service

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        if self.tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self.tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"http-service-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> HttpService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    def kill(self) -> None:
        """Stop at once: the listener and every open connection close (state survives)."""
        self.stop()

    crash = kill

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    # -- misbehaviours -----------------------------------------------------------------
    def fail(self, n: int, status: int = 500) -> None:
        self._troubles.append(_Trouble(n, status=status))

    def throttle(self, n: int, status: int = 429, retry_after: str = "1") -> None:
        self._troubles.append(_Trouble(n, status=status, retry_after=retry_after))

    def slow(self, n: int, seconds: float) -> None:
        self._troubles.append(_Trouble(n, delay=seconds))

    def lose_reply(self, n: int, *, every: int = 1) -> None:
        """Apply, then lose the reply: of the next *n* requests, or of every *every*-th one
        (for *n* of them)."""
        self._troubles.append(_Trouble(n, lose=True, every=every))

    def refuse(self, ids: set[int], status: int = 400) -> None:
        """A permanent *status* for every request whose body's ``id`` is in *ids*."""
        self._troubles.append(_Trouble(10**9, status=status, match=lambda body: body.get("id") in ids))

    def heal(self) -> None:
        self._troubles.clear()

    def _trouble(self, body: dict[str, Any]) -> _Trouble | None:
        with self._lock:
            for t in self._troubles:
                if t.left > 0 and (t.match is None or t.match(body)):
                    t.seen += 1
                    if t.seen % t.every:
                        continue
                    t.left -= 1
                    return dataclasses.replace(t)
        return None

    # -- what the tests read -------------------------------------------------------------
    def ids(self) -> list[int]:
        """The row id of every effect applied (a row applied twice shows twice)."""
        with self._lock:
            return [int(b["id"]) for _, b in self.effects if isinstance(b, dict) and "id" in b]

    def seen_transactions(self) -> set[str]:
        """The transaction ids (``Twopc-Transaction`` header) of every request received."""
        with self._lock:
            return {s.txn for s in self.log if s.txn}

    def count(self) -> int:
        with self._lock:
            return len(self.log)

    # -- the protocol ------------------------------------------------------------------
    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str],
                                                                                           bytes | None]:
        """Answer one request: ``(status, headers, body)``; body ``None`` loses the reply."""
        key = headers.get(KEY_HEADER)
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        trouble = self._trouble(parsed if isinstance(parsed, dict) else {})
        if trouble is not None and trouble.status:
            extra = {"Retry-After": trouble.retry_after} if trouble.retry_after else {}
            return trouble.status, extra, json.dumps({"error": f"injected {trouble.status}"}).encode()
        fingerprint = (method, path, body)
        stored = None
        if key is not None and not self.ignore_keys:
            with self._lock:
                stored = self._stored.get(key)
                if stored is None:
                    stored = self._stored[key] = _Stored(fingerprint)
                elif stored.fingerprint != fingerprint:
                    return 422, {}, b'{"error": "this key was used with another payload"}'
                elif not stored.done:
                    return 409, {}, b'{"error": "a request with this key is in flight"}'
                else:
                    return stored.status, {"Idempotent-Replayed": "true"}, stored.body
        if trouble is not None and trouble.delay:
            time.sleep(trouble.delay)
        with self._lock:
            self.applied[key or ""] += 1
            self.effects.append((key, parsed))
            answer = json.dumps({"key": key, "applied": self.applied[key or ""]}).encode()
            if stored is not None:
                stored.status, stored.body, stored.done = 201, answer, True
        if trouble is not None and trouble.lose:
            return 201, {}, None
        return 201, {}, answer

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.log.append(seen)

    def track(self, conn: socket.socket, alive: bool) -> None:
        with self._lock:
            (self._conns.add if alive else self._conns.discard)(conn)


class _Handler(BaseHTTPRequestHandler):
    owner: HttpService
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # the answer's head and body go out at once: no 40 ms wait for a delayed ACK
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.owner.track(self.connection, True)

    def finish(self) -> None:
        self.owner.track(self.connection, False)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, extra, answer = self.owner.handle(self.command, self.path, headers, body)
        self.owner.record(Seen(time.time(), self.command, self.path, headers.get(KEY_HEADER),
                               headers.get(self.owner.txn_header), body, 0 if answer is None else status,
                               headers.get("authorization")))
        if answer is None:  # the reply is lost: the connection closes without one
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(status)
        for k, v in extra.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815 - http.server's names

    def do_GET(self) -> None:
        """``GET /applied``: the ids of the rows applied, sorted (what the docs' example prints)."""
        answer = json.dumps(sorted(self.owner.ids())).encode()
        self.send_response(200 if self.path == "/applied" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)



def undecided_requests(service: HttpService, checkpoint: str) -> list[Seen]:
    """The requests *service* received for the sink id of the ledger at *checkpoint* whose
    transaction (header ``Twopc-Transaction``) no decision of that ledger names: requests of a
    batch that was never decided (or of an attempt it did not choose). Empty when twopc-http
    sent only what was decided."""
    from twopc import CommitLedger, Xid

    ledger = CommitLedger(checkpoint, read_only=True)
    sink_id = ledger.recorded_sink_id()
    decided = {h.txn_id for d in ledger.decisions() for h in d.handles}
    with service._lock:
        log = list(service.log)
    return [s for s in log if s.txn and (x := Xid.parse(s.txn)) is not None and x.sink_id == sink_id
            and s.txn not in decided]


def self_signed(folder: str) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, written to *folder*: ``(cert.pem, key.pem)``."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = f"{folder}/cert.pem", f"{folder}/key.pem"
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path
