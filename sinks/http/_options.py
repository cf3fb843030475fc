"""The options of ``twopc-http``, read once into :class:`HttpOptions` (plain, picklable data).
Secrets (``token``, ``password``, ``apiKey`` or the environment variables their ``...Env`` options
name) live in :class:`Credentials`: added on the driver when a request is sent, they never reach
an outbox, a handle, the checkpoint, a log line or an error message."""

from __future__ import annotations

import os
import re
import string
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from twopc import ConfigurationError
from twopc.spi import MissingOptionError, redact

from .._options import Duration, OptionReader
from .._secrets import secret_forms

__all__ = ["HEADER_PREFIX", "OPTIONS", "Credentials", "HttpOptions", "checkpoint_outbox"]

FORMAT = "twopc-http"
#: A writer option ``header.<Name>`` adds the header ``<Name>`` to every request.
HEADER_PREFIX = "header."
#: Every option of ``twopc-http``, as the options reference lists them.
OPTIONS = ("url", "method", "header.<Name>", "bodyColumn", "keyColumn", "keyHeader", "transactionHeader", "token",
           "tokenEnv", "user", "password", "passwordEnv", "apiKeyHeader", "apiKey", "apiKeyEnv", "tlsVerify",
           "tlsCaBundle", "connectTimeout", "timeout", "maxConcurrency", "maxRetries", "retryBackoff",
           "retryBackoffMax", "maxRetryAfter", "ackEvery", "ackInterval", "outbox", "deadLetterPath")

METHODS = ("POST", "PUT", "PATCH", "DELETE")
#: Headers that carry credentials: refused as plain ``header.<Name>`` options (they would be
#: recorded in the checkpoint); the secret options carry them instead.
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "apikey"})
_SECRET_PARAMS = re.compile(r"pass|pwd|secret|token|api[-_]?key|signature|credential", re.IGNORECASE)
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def checkpoint_outbox(checkpoint: str) -> str:
    """``<checkpoint>/twopc-http``, a local path made absolute (every executor names the same folder)."""
    loc = checkpoint.rstrip("/")
    if "://" not in loc and not loc.startswith("file:"):
        loc = os.path.abspath(loc)
    return f"{loc}/twopc-http"


@dataclass(frozen=True)
class Credentials:
    """How requests authenticate: at most one of a bearer token, user and password, an API key
    header; each secret as an option or an environment variable read on the driver."""

    token: str | None = None
    token_env: str | None = None
    user: str | None = None
    password: str | None = None
    password_env: str | None = None
    api_key_header: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None

    def __repr__(self) -> str:
        return f"Credentials({self.scheme})"

    @property
    def scheme(self) -> str:
        """``bearer``, ``basic``, ``api key <header>`` or ``none``."""
        if self.token is not None or self.token_env:
            return "bearer"
        if self.user is not None:
            return "basic"
        if self.api_key_header:
            return f"api key {self.api_key_header}"
        return "none"

    def _env(self, name: str | None, option: str) -> str | None:
        if not name:
            return None
        if (value := os.environ.get(name)) is None:
            raise ConfigurationError(f"{FORMAT}: option {option} names the environment variable {name}, which is "
                                     f"not set on the driver (requests are sent from the driver): set it there")
        return value

    def secret(self) -> str | None:
        """The scheme's secret; ConfigurationError names an unset environment variable, never a value."""
        if self.scheme == "bearer":
            return self.token if self.token is not None else self._env(self.token_env, "tokenEnv")
        if self.scheme == "basic":
            return self.password if self.password is not None else self._env(self.password_env, "passwordEnv")
        if self.api_key_header:
            return self.api_key if self.api_key is not None else self._env(self.api_key_env, "apiKeyEnv")
        return None

    def headers(self) -> dict[str, str]:
        """The headers that authenticate a request (none for ``basic``: see :meth:`basic`)."""
        secret = self.secret()
        if self.scheme == "bearer":
            return {"Authorization": f"Bearer {secret}"}
        if self.api_key_header and secret is not None:
            return {self.api_key_header: secret}
        return {}

    def basic(self) -> tuple[str, str] | None:
        return (self.user or "", self.secret() or "") if self.scheme == "basic" else None

    def redact(self, text: str) -> str:
        """*text* with every spelling of every secret this write may use replaced by ``***``."""
        envs = [os.environ.get(name) for name in (self.token_env, self.password_env, self.api_key_env) if name]
        return redact(text, secret_forms([self.token, self.password, self.api_key, *envs]))


@dataclass(frozen=True)
class HttpOptions:
    """The parsed options (see the options reference for each one's meaning; :meth:`read` gives the defaults)."""

    url: str
    method: str
    headers: tuple[tuple[str, str], ...]
    body_column: str | None
    key_column: str | None
    key_header: str
    transaction_header: str | None
    credentials: Credentials
    tls_verify: bool
    tls_ca_bundle: str | None
    connect_timeout: Duration
    timeout: Duration
    max_concurrency: int
    max_retries: int
    retry_backoff: Duration
    retry_backoff_max: Duration
    max_retry_after: Duration
    ack_every: int
    ack_interval: Duration
    outbox: str | None
    dead_letter_path: str | None

    @classmethod
    def read(cls, options: Mapping[str, str]) -> HttpOptions:
        """Read and check every option.

        Raises:
            MissingOptionError: no ``url``.
            ConfigurationError: an option is unknown or invalid (named with the fix, never a secret)."""
        reader = OptionReader(options, FORMAT)
        url = reader.required("url", '.option("url", "https://api.example.com/orders/{order_id}")')
        method = reader.choice("method", METHODS, "POST")
        headers = _headers(reader, options)
        creds = Credentials(
            token=reader.get("token"), token_env=reader.text("tokenEnv"), user=reader.text("user"),
            password=reader.get("password"), password_env=reader.text("passwordEnv"),
            api_key_header=reader.text("apiKeyHeader"), api_key=reader.get("apiKey"),
            api_key_env=reader.text("apiKeyEnv"))
        _check_credentials(creds)
        key_header = reader.text("keyHeader", "Idempotency-Key") or "Idempotency-Key"
        txn_header = reader.text("transactionHeader")
        for name, value in (("keyHeader", key_header), ("transactionHeader", txn_header)):
            if value is not None and not _HEADER_NAME.fullmatch(value):
                raise ConfigurationError(f"{name} {value!r} is not an HTTP header name")
        out = cls(
            url=_check_url(url), method=method, headers=headers, body_column=reader.text("bodyColumn"),
            key_column=reader.text("keyColumn"), key_header=key_header, transaction_header=txn_header,
            credentials=creds, tls_verify=reader.boolean("tlsVerify", True), tls_ca_bundle=reader.text("tlsCaBundle"),
            connect_timeout=reader.duration("connectTimeout", "10s"), timeout=reader.duration("timeout", "30s"),
            max_concurrency=reader.integer("maxConcurrency", 16, minimum=1, maximum=1024),
            max_retries=reader.integer("maxRetries", 6, minimum=0, maximum=100),
            retry_backoff=reader.duration("retryBackoff", "200ms"),
            retry_backoff_max=reader.duration("retryBackoffMax", "30s"),
            max_retry_after=reader.duration("maxRetryAfter", "2min"),
            ack_every=reader.integer("ackEvery", 256, minimum=1), ack_interval=reader.duration("ackInterval", "250ms"),
            outbox=reader.text("outbox"), dead_letter_path=reader.text("deadLetterPath"))
        reader.refuse_unknown(hint="headers are options header.<Name>")
        if out.tls_ca_bundle and not out.tls_verify:
            raise ConfigurationError("tlsCaBundle is given but tlsVerify is false: drop one of them")
        if out.timeout.ms == 0 or out.connect_timeout.ms == 0:
            raise ConfigurationError("timeout and connectTimeout must be above 0: a request must not wait forever")
        if out.key_header.lower() in {name.lower() for name, _ in headers}:
            raise ConfigurationError(f"header.{out.key_header} is set, but twopc-http sets {out.key_header} itself "
                                     f"(option keyHeader): remove the header option")
        return out

    def columns(self) -> list[str]:
        """Every column the options name (URL template, body column, key column), in order."""
        names = [name for _, name, _, _ in string.Formatter().parse(self.url) if name]
        return list(dict.fromkeys(names + [c for c in (self.body_column, self.key_column) if c]))


def _headers(reader: OptionReader, options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    out = []
    for key in options:
        if not key.lower().startswith(HEADER_PREFIX):
            continue
        name = key[len(HEADER_PREFIX):]
        value = reader.get(key) or ""
        if not _HEADER_NAME.fullmatch(name):
            raise ConfigurationError(f"option {key}: {name!r} is not an HTTP header name")
        if name.lower() in _SECRET_HEADERS:
            raise ConfigurationError(
                f"option {key}: a {name} header carries a credential, and plain options are recorded in the "
                f"checkpoint: give it as option token (Authorization: Bearer), user and password (Basic), or "
                f"apiKeyHeader and apiKey (any other header), or their ...Env forms")
        if "\n" in value or "\r" in value:
            raise ConfigurationError(f"option {key}: a header value cannot hold a line break")
        out.append((name, value))
    return tuple(sorted(out))


def _check_credentials(c: Credentials) -> None:
    given = [s for s, on in (("token", c.token is not None or c.token_env),
                             ("user", c.user is not None), ("apiKeyHeader", c.api_key_header)) if on]
    if len(given) > 1:
        raise ConfigurationError(f"{' and '.join(given)} are both given: twopc-http authenticates one way (token: "
                                 f"bearer; user and password: basic; apiKeyHeader and apiKey: a header)")
    pairs = (("token", c.token, "tokenEnv", c.token_env), ("password", c.password, "passwordEnv", c.password_env),
             ("apiKey", c.api_key, "apiKeyEnv", c.api_key_env))
    for name, value, env_name, env in pairs:
        if value is not None and env:
            raise ConfigurationError(f"{name} and {env_name} are both given: give the secret one way")
    if c.user is None and (c.password is not None or c.password_env):
        raise MissingOptionError("password is given without user: add option user (HTTP Basic)")
    if c.user is not None and c.password is None and not c.password_env:
        raise MissingOptionError("user is given without a password: add option password or passwordEnv")
    if c.api_key_header and c.api_key is None and not c.api_key_env:
        raise MissingOptionError("apiKeyHeader is given without a key: add option apiKey or apiKeyEnv")
    if not c.api_key_header and (c.api_key is not None or c.api_key_env):
        raise MissingOptionError("apiKey is given without apiKeyHeader: name the header, e.g. X-Api-Key")
    if c.api_key_header and not _HEADER_NAME.fullmatch(c.api_key_header):
        raise ConfigurationError(f"apiKeyHeader {c.api_key_header!r} is not an HTTP header name")


def _check_url(url: str) -> str:
    """The URL template, checked: ``http(s)://host/...``, ``{column}`` fields, no credentials."""
    try:
        parsed = list(string.Formatter().parse(url))
    except ValueError as exc:
        raise ConfigurationError(f"url template: {exc}: a column is written {{column}}, a brace {{{{ or }}}}") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not _FIELD.fullmatch(name) or spec or conversion:
            raise ConfigurationError(f"url template: {{{name}{'!' + conversion if conversion else ''}"
                                     f"{':' + spec if spec else ''}}} is not a column: write {{column_name}}")
    literal = "".join(text + ("x" if name else "") for text, name, _, _ in parsed)
    split = urllib.parse.urlsplit(literal)
    if split.scheme not in ("http", "https") or not split.hostname:
        raise ConfigurationError(f"url must start with http:// or https:// and name a host, got "
                                 f"{url.split('?')[0][:120]!r}")
    if "@" in split.netloc:
        raise ConfigurationError("url holds credentials before its host (user:password@): they would be recorded "
                                 "in the checkpoint; give them as options user and password (or token)")
    for name, _ in urllib.parse.parse_qsl(split.query, keep_blank_values=True):
        if _SECRET_PARAMS.search(name):
            raise ConfigurationError(
                f"url has a query parameter {name!r} that looks like a credential, and the url is recorded in the "
                f"checkpoint: send it as a header instead (apiKeyHeader and apiKey, or token)")
    return url
