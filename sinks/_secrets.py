"""Keeping secrets out of every message a sink builds, and out of checkpoints (:func:`credential_free`)."""

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
    """The message refusing a parameter after ``password=`` in a *kind* URL's query string: maybe
    the rest of a password with a raw ``&``, so neither its name nor value is shown."""
    return (
        f"the {kind} URL has a parameter after password= that twopc cannot accept; if the password holds "
        "&, =, #, ?, /, %, + or a space, URL-encode it in the URL (& as %26, = as %3D, # as %23, ? as "
        "%3F, / as %2F, % as %25, + as %2B, space as %20) or give it as the password option instead "
        "(nothing after password= is shown here, as it may be part of the password)")


def secret_forms(values: Iterable[str | None]) -> list[str]:
    """Every spelling of these secrets that may reach a message (raw, URL-quoted, as SQLAlchemy
    renders it, computed without importing it), longest first, for :func:`twopc.spi.redact`."""
    q = urllib.parse.quote
    forms = {f for v in values if v for f in (v, q(v, safe=""), urllib.parse.quote_plus(v), q(v, safe=" +"))}
    return sorted(forms, key=len, reverse=True)


def secret_guesses(options: Mapping[str, str]) -> list[str]:
    """Every value of *options* that may be a password, in all its spellings: secret options, a
    URL's user info, and after ``password=`` the value, the rest of the URL and each piece of
    3 characters or more (a password with a raw ``&`` runs on)."""
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
    """*options* as they may be recorded in a checkpoint: secret options left out, a URL without
    its password (user info, ``password=`` and all after it), and an option still holding
    anything :func:`secret_guesses` suspects (or ``//...:...@``) left out whole."""
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
