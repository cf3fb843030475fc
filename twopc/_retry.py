"""Retrying an unanswered commit (Flink's "retry later", bounded). A commit whose reply is lost may
or may not have happened; commits are idempotent, so it is asked again with backoff, then
given up with :class:`~twopc.spi.CommitPendingError`. Only
:class:`~twopc.spi.SinkUnavailableError` is retried: any other error is an answer."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ._errors import CommitPendingError, ConfigurationError, SinkUnavailableError

__all__ = ["DEFAULT_COMMIT_RETRIES", "DEFAULT_RETRY_BACKOFF", "CommitRetry"]

log = logging.getLogger("twopc.coordinator")

T = TypeVar("T")

#: retries after the first attempt (``commitRetries``)
DEFAULT_COMMIT_RETRIES = 3
#: seconds before the first retry, doubled for each next one (``commitRetryBackoff``)
DEFAULT_RETRY_BACKOFF = 1.0
_MAX_BACKOFF = 30.0


@dataclass(frozen=True)
class CommitRetry:
    """How often an unanswered commit is asked again: *retries* after the first attempt, waiting
    *backoff* seconds, doubled each time up to 30 s."""

    retries: int = DEFAULT_COMMIT_RETRIES
    backoff: float = DEFAULT_RETRY_BACKOFF

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff < 0:
            raise ConfigurationError(f"commitRetries and commitRetryBackoff must be >= 0, got {self.retries} "
                                     f"and {self.backoff}")

    @classmethod
    def parse(cls, retries: str | None, backoff: str | None) -> CommitRetry:
        """From the ``commitRetries`` and ``commitRetryBackoff`` (seconds) option texts.
        Raises ConfigurationError: not a whole number >= 0 / a number of seconds >= 0."""
        if retries is not None and not retries.strip().isdigit():
            raise ConfigurationError(f"commitRetries must be a whole number >= 0, got {retries!r}")
        n = DEFAULT_COMMIT_RETRIES if retries is None else int(retries)
        try:
            b = DEFAULT_RETRY_BACKOFF if backoff is None else float(backoff.strip().removesuffix("s"))
        except ValueError:
            raise ConfigurationError(f"commitRetryBackoff must be a number of seconds >= 0, got {backoff!r}") from None
        return cls(n, b)

    def run(self, attempt: Callable[[bool], T], *, what: str, pending: Callable[[int, SinkUnavailableError], str]) -> T:
        """Call ``attempt(retrying)`` until it returns.
        Raises CommitPendingError: every attempt raised :class:`SinkUnavailableError`; the message is
        ``pending(attempts, last error)``.
        Raises Exception: whatever else an attempt raised, at once."""
        delay = self.backoff
        for n in range(self.retries + 1):
            try:
                return attempt(n > 0)
            except SinkUnavailableError as exc:
                if n == self.retries:
                    raise CommitPendingError(pending(n + 1, exc)) from None
                log.warning("twopc: %s got no answer (attempt %s of %s, retrying in %.1fs): %s",
                            what, n + 1, self.retries + 1, delay, exc)
            time.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
