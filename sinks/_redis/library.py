"""Server-side Lua libraries of twopc's Redis code: building a FUNCTION library from its
parts, and telling from a Redis error that the server lost one (it is then loaded again)."""

from __future__ import annotations

import redis.exceptions as rex

__all__ = ["build_library", "missing_library"]


def build_library(library: str, prelude: str, functions: dict[str, str]) -> str:
    """FUNCTION library *library*: *prelude*, then each of *functions* as ``<library>_<name>(keys, args)``."""
    return f"#!lua name={library}\n{prelude}" + "".join(
        f"\nredis.register_function('{library}_{name}', function(keys, args)\n{body}end)\n"
        for name, body in functions.items())


def missing_library(exc: BaseException) -> bool:
    """Whether *exc* says the server lost the library (``NOSCRIPT``, function not found)."""
    return isinstance(exc, rex.NoScriptError) or (
        isinstance(exc, rex.ResponseError) and "function not found" in str(exc).lower())
