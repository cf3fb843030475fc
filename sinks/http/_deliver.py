"""Sending one request until it is answered for good (driver side, httpx's async client). A 2xx delivers it; a 3xx or
a 4xx other than 408, 409, 425 and 429 refuses it for good (a dead letter); anything else, or no answer, is retried
with the same key after a jittered exponential backoff (``retryBackoff`` .. ``retryBackoffMax``), or after a 429/503's
``Retry-After`` up to ``maxRetryAfter``. A longer wait or ``maxRetries`` failures leave it unacknowledged for the next
commit, and stop the other workers from taking new requests."""

from __future__ import annotations

import asyncio
import email.utils
import random
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twopc import ConfigurationError
from twopc.spi import require

from ._options import HttpOptions

if TYPE_CHECKING:
    import httpx

__all__ = ["Answer", "Sender", "load_httpx", "retry_after"]

#: Statuses below 500 that are retried: the request may succeed later.
RETRIED = frozenset({408, 409, 425, 429})
#: Statuses whose ``Retry-After`` is honoured.
RETRY_AFTER = frozenset({429, 503})
#: The longest answer body kept for a dead letter or an error, in characters.
EXCERPT = 2000


def load_httpx() -> Any:
    """httpx, or a :class:`~twopc.MissingExtraError` naming ``pyspark-twopc[http]``."""
    return require("httpx", "http", "twopc-http")


@dataclass(frozen=True)
class Answer:
    """How one request ended: ``ok``, ``dead`` (refused for good) or ``failed`` (sent again next time)."""

    outcome: str
    status: int | None = None
    detail: str = ""


def retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header, ``None`` when absent or unreadable."""
    if value is None:
        return None
    if (text := value.strip()).isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now)


class Sender:
    """Sends requests through one client with the options' retries (see the module)."""

    def __init__(self, options: HttpOptions, redact: Any) -> None:
        self.o = options
        self._redact = redact
        self._httpx = load_httpx()
        self.stopping = False
        self.sent = 0

    def client(self) -> httpx.AsyncClient:
        """The async client: the pool bounds concurrency; TLS verified unless off; headers set once; no redirects."""
        httpx = self._httpx
        o = self.o
        verify: ssl.SSLContext | bool = o.tls_verify  # tlsCaBundle with tlsVerify=false is refused
        if o.tls_ca_bundle:
            try:
                verify = ssl.create_default_context(cafile=o.tls_ca_bundle)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigurationError(f"tlsCaBundle {o.tls_ca_bundle}: cannot load it ({exc}): give a PEM "
                                         f"file of CA certificates readable on the driver") from None
        headers = {**dict(o.headers), **o.credentials.headers()}
        basic = o.credentials.basic()
        return httpx.AsyncClient(
            timeout=httpx.Timeout(o.timeout.seconds, connect=o.connect_timeout.seconds),
            limits=httpx.Limits(max_connections=o.max_concurrency, max_keepalive_connections=o.max_concurrency),
            verify=verify, headers=headers, auth=httpx.BasicAuth(*basic) if basic else None,
            follow_redirects=False)

    def headers(self, key: str, txn_id: str, *, json: bool) -> dict[str, str]:
        """The headers of one try: the key, the transaction id (``transactionHeader``), the body's type."""
        out = {self.o.key_header: key}
        if self.o.transaction_header:
            out[self.o.transaction_header] = txn_id
        if json:
            out["Content-Type"] = "application/json"
        return out

    def _backoff(self, retry: int) -> float:
        step = min(self.o.retry_backoff_max.seconds, self.o.retry_backoff.seconds * 2 ** (retry - 1))
        return step / 2 + random.uniform(0, step / 2)

    async def send(self, client: httpx.AsyncClient, key: str, method: str, url: str, body: str | None,
                   txn_id: str) -> Answer:
        """Send one request of *txn_id* until it is answered for good, or this delivery gives it up."""
        httpx = self._httpx
        content = body.encode("utf-8") if body is not None else None
        retry = 0
        while True:
            wait: float | None = None
            try:
                self.sent += 1
                response = await client.request(method, url, content=content,
                                                headers=self.headers(key, txn_id, json=body is not None))
            except httpx.TransportError as exc:
                why = f"no answer ({type(exc).__name__}: {self._redact(str(exc))[:200]})"
                status = None
            else:
                status = response.status_code
                if 200 <= status < 300:
                    return Answer("ok", status)
                excerpt = self._redact(response.text[:EXCERPT])
                if status < 500 and status not in RETRIED:
                    return Answer("dead", status, excerpt)
                why = f"HTTP {status}: {excerpt[:200]}"
                if status in RETRY_AFTER:
                    wait = retry_after(response.headers.get("Retry-After"), time.time())
            retry += 1
            if retry > self.o.max_retries:
                return Answer("failed", status, f"{why} (after {self.o.max_retries} retries)")
            if wait is not None and wait > self.o.max_retry_after.seconds:
                return Answer("failed", status, f"{why}: the server asks to retry after {wait:.0f}s, more than "
                                                f"maxRetryAfter ({self.o.max_retry_after})")
            if self.stopping:
                return Answer("failed", status, f"{why} (the delivery stopped)")
            await asyncio.sleep(wait * (1 + random.uniform(0, 0.1)) if wait is not None else self._backoff(retry))
