"""``socketTimeout`` against the waits a statement may spend on the server."""

from __future__ import annotations

import logging

from twopc import ConfigurationError

from ..._options import Duration
from .._registry import dialect_for
from . import SOCKET_TIMEOUT, Dialect

__all__ = ["SOCKET_MARGIN", "socket_and_lock_timeouts"]

log = logging.getLogger("twopc.sinks.sql")

SOCKET_MARGIN = Duration(30_000)  #: What the default socket timeout leaves beyond the longest server-side wait.


def socket_and_lock_timeouts(option_text: str | None, url_ms: int | None, lock: Duration, query: Duration, *,
                    lock_given: bool, dialect: Dialect) -> tuple[Duration, Duration]:
    """``socketTimeout`` (the option, else the URL's, else the default) and ``lockTimeout`` in force.
    A given socket timeout must outlast every server-side wait; without a ``lockTimeout`` option
    the lock timeout becomes half of a shorter one, logged at INFO."""
    longest = Duration(lock.ms + query.ms)
    if option_text is None and url_ms is None:
        return max(SOCKET_TIMEOUT, Duration(longest.ms + SOCKET_MARGIN.ms)), lock
    given = Duration.parse(option_text, "socketTimeout") if option_text is not None else Duration(url_ms or 0)
    source = "option socketTimeout" if option_text is not None else "the socketTimeout in the url"
    if given.ms <= 0:
        raise ConfigurationError(f"{source} must be > 0: twopc never waits for a reply without a limit "
                                 f"(leave it out for the default, {SOCKET_TIMEOUT.seconds:g} s)")
    if not lock_given and _server_wait(lock, dialect).ms >= given.ms:
        derived = Duration(given.ms // 2)
        if derived.ms > 0 and _server_wait(derived, dialect).ms < given.ms:
            log.info("twopc: lockTimeout %s (half of %s, %s; the default lockTimeout %s would outlast it). "
                     "Set option lockTimeout to choose another", derived, source, given, lock)
            lock = derived
    for name, wait in (("lockTimeout", lock), ("queryTimeout", query)):
        if given.ms <= wait.ms:
            default = " (the default)" if name == "lockTimeout" and not lock_given else ""
            raise ConfigurationError(
                f"{source} ({given.seconds:g} s) must be longer than {name} ({wait.seconds:g} s{default}): a "
                f"statement that waits that long on the server would be cut off. Raise socketTimeout or lower "
                f"{name} (a plain number is seconds; MySQL's JDBC URL parameter socketTimeout is in milliseconds)")
    return given, lock


def _server_wait(lock: Duration, dialect: Dialect | None) -> Duration:
    return dialect_for(dialect or "").server_lock_wait(lock)
