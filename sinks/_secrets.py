"""Keeping secrets out of every message a sink builds.

:func:`secret_forms` lists every spelling of a secret that can reach a message (as typed,
URL-quoted, as SQLAlchemy renders it); :func:`redacted_errors` scrubs whatever might be a
password in the options from a :class:`~twopc.ConfigurationError` raised while they are
parsed (a URL that fails to parse may still hold its password); :func:`credential_free`
keeps the options that may be recorded in a checkpoint.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from twopc import ConfigurationError
from twopc.spi import redact

__all__ = ["SECRET_KEYS", "after_password", "credential_free", "redacted_errors", "secret_forms", "secret_guesses"]

#: Option and URL parameter names whose value is a secret (lower-case).
SECRET_KEYS = frozenset({"password", "sslpassword", "passwd"})

_SECRET_IN_URL = re.compile(r"(?:^|[?&;])(?:ssl)?passw(?:or)?d=(.*)$", re.IGNORECASE)
_USERINFO_IN_URL = (re.compile(r"//([^/?#]*)@"), re.compile(r"//([^/?#@]*)@"))
_PASSWORD_IN_USERINFO = re.compile(r"(//[^/?#@:]*):[^/?#]*@")
_PASSWORD_PARAM = re.compile(r"[?&;](?:ssl)?passw(?:or)?d=", re.IGNORECASE)
#: A ':' between ``//`` and an ``@``: what is left of a user info that was not cut cleanly.
_COLON_BEFORE_AT = re.compile(r"//[^@]*:[^@]*@")
#: Words that make an option's name look like a secret's: such an option is never recorded.
_SECRET_WORDS = ("passw", "pwd", "secret", "token", "apikey", "api_key", "accesskey", "access_key", "credential",
                 "private")


def after_password(kind: str) -> str:
    """The message refusing a parameter that follows ``password=`` in a *kind* (``JDBC``,
    ``Redis``) URL's query string: it may be the rest of a password holding a raw ``&``,
    so the message shows neither its name nor its value."""
    return (
        f"the {kind} URL has a parameter after password= that twopc cannot accept; if the password holds "
        "&, =, #, ?, /, %, + or a space, URL-encode it in the URL (& as %26, = as %3D, # as %23, ? as "
        "%3F, / as %2F, % as %25, + as %2B, space as %20) or give it as the password option instead "
        "(nothing after password= is shown here, as it may be part of the password)")


def secret_forms(values: Iterable[str | None]) -> list[str]:
    """Every spelling of these secrets that may reach a message (raw, URL-quoted, as
    SQLAlchemy's ``URL.render_as_string`` writes it: ``quote(v, safe=" +")``), longest
    first, for :func:`twopc.spi.redact`. SQLAlchemy's spelling is computed, not asked of
    SQLAlchemy: the Redis sink and the Redis Stream source, whose options pass through here,
    never import it (``tests/unit/test_secret_redaction.py`` holds the two spellings equal)."""
    forms: set[str] = set()
    for v in values:
        if not v:
            continue
        forms.update({v, urllib.parse.quote(v, safe=""), urllib.parse.quote_plus(v), urllib.parse.quote(v, safe=" +")})
    return sorted((f for f in forms if f), key=len, reverse=True)


def secret_guesses(options: Mapping[str, str]) -> list[str]:
    """Every value of *options* that may be a password (secret options, and passwords in
    a ``url`` option's user info or query string), in all its spellings. Everything after
    ``password=`` in a URL counts: the value up to the next ``&``, the whole rest of the
    URL, and each name and value in it of 3 characters or more (a password with a raw ``&``
    runs on; shorter pieces would blank out every message they occur in)."""
    values: list[str | None] = []
    for k, v in options.items():
        if not isinstance(v, str):
            continue
        if k.lower() in SECRET_KEYS:
            values.append(v)
        if k.lower() == "url":
            for m in _SECRET_IN_URL.finditer(v):
                tail = m.group(1)
                pieces = {*re.split(r"[&;]", tail)[1:], *re.split(r"[&;=]", tail)[1:]}
                for piece in (tail, re.split(r"[&;]", tail)[0], *(p for p in pieces if len(p) >= 3)):
                    values += [piece, urllib.parse.unquote_plus(piece)]
            for pattern in _USERINFO_IN_URL:  # up to the last and to the first '@'
                for m in pattern.finditer(v):
                    _, colon, pw = m.group(1).partition(":")
                    if colon:
                        values += [pw, urllib.parse.unquote(pw)]
    return secret_forms(values)


@contextmanager
def redacted_errors(options: Mapping[str, str]) -> Iterator[None]:
    """Re-raise a :class:`~twopc.ConfigurationError` from the block with every possible
    secret of *options* replaced by ``***`` (same class, no chained original)."""
    guesses = secret_guesses(options)
    try:
        yield
    except ConfigurationError as exc:
        raise type(exc)(redact(str(exc), guesses)) from None


def credential_free(options: Mapping[str, str]) -> dict[str, str]:
    """*options* as they may be recorded in a checkpoint (the sinks'
    :meth:`~twopc.spi.NamedTarget.reopen_options`): an option named like a secret is
    left out, a URL loses its password (in its user info; ``password=`` and everything
    after it; an empty user info goes too), and an option whose value still holds
    anything :func:`secret_guesses` suspects, or still has a ``:`` before an ``@`` after
    ``//`` (a password with a raw ``/`` or ``@``), is left out whole."""
    guesses = secret_guesses(options)
    out: dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(value, str) or key.lower() in SECRET_KEYS or any(w in key.lower() for w in _SECRET_WORDS):
            continue
        value = _PASSWORD_IN_USERINFO.sub(r"\1@", value).replace("//@", "//", 1)
        if (m := _PASSWORD_PARAM.search(value)) is not None:
            value = value[:m.start()]
        if not any(g in value for g in guesses) and not _COLON_BEFORE_AT.search(value):
            out[key] = value
    return out
