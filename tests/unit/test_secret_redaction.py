"""No piece of a password ever reaches an error message or a description.

Passwords holding every URL-special character (``& = ? # / @ : ; % +``, space, quotes,
non-ASCII) are given in every place a password can be given (a JDBC URL's query string
and user info, raw and URL-encoded, the ``password`` option, a SQLAlchemy URL, a Redis
URL's user info and query string, the ``password`` option of the Redis formats), to
every format, and an unknown option is added so that each parse fails: neither the
message nor, for a parse that succeeds, the description may hold any piece of the
password. The Spark-level scan (console, checkpoint, server logs) is in
tests/spark/test_bad_input.py.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable

import pytest
from sqlalchemy.engine import URL

from twopc import ConfigurationError
from twopc.sinks import JdbcOptions, PostgresSink, RedisSink
from twopc.sinks._secrets import secret_forms
from twopc.sinks.redis_source import StreamOptions

#: each word is a token of 3+ characters that must never be shown
PASSWORDS = [
    "Alpha&Bravo=Charlie", "Delta?Echo#Foxtrot", "Golf/Hotel@India", "Juliet:Kilo;Lima",
    "Mike%Novem%2Bxx", "Oscar+Papa Quebec", "Romeo'Sierra\"Tango", "Umlaut\u00e9\u2603Victor",
    "Whiskey&user=Xray", "Yankee&Zulu=Zebra",
]


def tokens(pw: str) -> list[str]:
    """The pieces of *pw* a leak would show (3+ characters between special characters)."""
    return [pw, *(t for t in re.split(r"[^A-Za-z0-9\u00e9\u2603]+", pw) if len(t) >= 3 and t != "user")]


def leaked(text: str, pw: str) -> list[str]:
    forms = {urllib.parse.quote(pw, safe=""), urllib.parse.quote_plus(pw)}
    return [t for t in {*tokens(pw), *forms} if t in text]


Build = Callable[[str], dict[str, str]]

JDBC_PLACES: dict[str, Build] = {
    "jdbc-query-raw": lambda pw: {"url": f"jdbc:postgresql://127.0.0.1:1/app?user=u&password={pw}"},
    "jdbc-query-raw-then-param": lambda pw: {"url": f"jdbc:postgresql://127.0.0.1:1/app?password={pw}&ssl=false"},
    "jdbc-query-encoded": lambda pw: {
        "url": f"jdbc:postgresql://127.0.0.1:1/app?user=u&password={urllib.parse.quote(pw, safe='')}"},
    "jdbc-userinfo-raw": lambda pw: {"url": f"jdbc:postgresql://u:{pw}@127.0.0.1:1/app"},
    "jdbc-userinfo-encoded": lambda pw: {
        "url": f"jdbc:postgresql://u:{urllib.parse.quote(pw, safe='')}@127.0.0.1:1/app"},
    "mysql-query-raw": lambda pw: {"url": f"jdbc:mariadb://127.0.0.1:1/app?user=u&password={pw}"},
    "password-option": lambda pw: {"url": "jdbc:postgresql://127.0.0.1:1/app", "user": "u", "password": pw},
    "sqlalchemy-url": lambda pw: {"url": URL.create("postgresql", "u", pw, "127.0.0.1", 1, "app")
                                  .render_as_string(hide_password=False)},
    "sqlalchemy-query": lambda pw: {"url": f"postgresql://127.0.0.1:1/app?password={urllib.parse.quote(pw)}"},
}
REDIS_PLACES: dict[str, Build] = {
    "redis-userinfo-encoded": lambda pw: {"url": f"redis://:{urllib.parse.quote(pw, safe='')}@127.0.0.1:1/0"},
    "redis-userinfo-raw": lambda pw: {"url": f"redis://:{pw}@127.0.0.1:1/0"},
    "redis-query-raw": lambda pw: {"url": f"redis://127.0.0.1:1/0?password={pw}"},
    "redis-password-option": lambda pw: {"url": "redis://127.0.0.1:1/0", "password": pw},
}
MAPPING = '[{"op": "INCRBY", "key": "{t}:n", "by": 1}]'
FORMATS: dict[str, tuple[dict[str, Build], Callable[[dict[str, str]], object]]] = {
    "twopc-jdbc": (JDBC_PLACES, lambda o: JdbcOptions.parse({"dbtable": "t", **o})),
    "twopc-postgres": ({k: v for k, v in JDBC_PLACES.items() if "mysql" not in k},
                       lambda o: PostgresSink.from_options({"dbtable": "t", **o})),
    "twopc-redis": (REDIS_PLACES, lambda o: RedisSink.from_options({"mapping": MAPPING, **o})),
    "twopc-redis-stream": (REDIS_PLACES, lambda o: StreamOptions.read({"streams": "s", "group": "g", **o})),
}
CASES = [(fmt, place, pw) for fmt, (places, _) in FORMATS.items() for place in places for pw in PASSWORDS]


def describe(parsed: object) -> str:
    parts = [repr(parsed), str(parsed)]
    for name in ("describe", "safe_url"):
        method = getattr(parsed, name, None)
        if callable(method):
            parts.append(str(method()))
    return "\n".join(parts)


@pytest.mark.parametrize(("fmt", "place", "pw"), CASES, ids=[f"{f}-{p}-{i % len(PASSWORDS)}"
                                                              for i, (f, p, _) in enumerate(CASES)])
def test_no_piece_of_a_password_in_any_message(fmt: str, place: str, pw: str) -> None:
    places, build = FORMATS[fmt]
    options = places[place](pw)
    # an unknown option makes every parse fail after the URL was read
    with pytest.raises(ConfigurationError) as err:
        build({**options, "frobnicate": "1"})
    assert not leaked(str(err.value), pw), f"{place}: {err.value}"
    assert err.value.__cause__ is None  # no chained original holding the URL
    try:
        parsed = build(options)
    except ConfigurationError as exc:  # refused: the message says how to write it instead
        assert not leaked(str(exc), pw), f"{place}: {exc}"
        assert "URL-encode" in str(exc) or "password option" in str(exc), str(exc)
    else:
        assert not leaked(describe(parsed), pw)


@pytest.mark.parametrize("pw", PASSWORDS)
def test_an_encoded_password_arrives_whole(pw: str) -> None:
    encoded = urllib.parse.quote(pw, safe="")
    for url in (f"jdbc:postgresql://127.0.0.1:1/app?user=u&password={encoded}&ssl=false",
                f"jdbc:postgresql://u:{encoded}@127.0.0.1:1/app"):
        assert JdbcOptions.parse({"url": url, "dbtable": "t"}).url.password == pw


def test_a_parameter_after_a_raw_ampersand_is_refused_without_its_name() -> None:
    # the refusal must not name the parameter: "parameter cd in the JDBC URL is not supported"
    # would echo a piece of the password "ab&cd"
    with pytest.raises(ConfigurationError) as err:
        JdbcOptions.parse({"url": "jdbc:postgresql://h/app?user=u&password=secretab&secretcd=1", "dbtable": "t"})
    text = str(err.value)
    assert text.startswith("the JDBC URL has a parameter after password=") and "URL-encode" in text
    assert "secretcd" not in text and "secretab" not in text


def test_the_scan_finds_a_leak() -> None:
    # the canary: a message holding one piece of the password is found
    assert leaked("parameter Charlie in the JDBC URL is not supported", "Alpha&Bravo=Charlie") == ["Charlie"]


@pytest.mark.parametrize("pw", [*PASSWORDS, "Oscar+Papa Quebec&Romeo"])  # the last: SQLAlchemy's own spelling
def test_the_spellings_include_sqlalchemy_s(pw: str) -> None:
    # secret_forms computes SQLAlchemy's spelling itself (the Redis formats never import it)
    rendered = URL.create("x", username="u", password=pw, host="h").render_as_string(hide_password=False)
    assert rendered[len("x://u:"):-len("@h")] in secret_forms([pw])
