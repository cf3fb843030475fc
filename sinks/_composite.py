"""``format("twopc-composite")``: the composite sink configured from Spark options, as the
manual's composite page describes: ``targets`` lists the participants (names, or a JSON array),
``<name>.<option>`` sets one's format, columns, transform, batch column or sink option; any
other option is refused. Every participant is built and checked at plan time; an error names it."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from twopc import ConfigurationError, Participant, TwoPCError, TwoPhaseCommitDataSource, TwoPhaseCommitSink
from twopc.spi import MissingOptionError, option
from twopc.spi.operations import load_object
from twopc.spi.runtime import RUNTIME_KEYS, CompositeSink

from ._options import SPARK_PASSED_OPTIONS, closest_option, misspelling, unknown_option_hint
from ._sources import HttpDataSource, default_outbox

__all__ = ["CompositeDataSource", "OptionsCompositeSink", "participant", "sink_for_format"]

AnySink = TwoPhaseCommitSink[Any, Any, Any]
_OWN_KEYS = ("format", "columns", "transform", "batchcolumn")


def sink_for_format(format_name: str, options: Mapping[str, str]) -> AnySink:
    """Build the sink of a built-in format name or a ``module:SinkClass`` path from its options. Raises
    ``ConfigurationError``: unknown format, or the sink refuses the options."""
    from . import DATA_SOURCES
    for ds in DATA_SOURCES:
        if ds.name() == format_name and ds is not CompositeDataSource:
            return ds.sink_class.from_options(options)
    if format_name == CompositeDataSource.format_name:
        raise ConfigurationError("a composite participant cannot itself be a twopc-composite: list its targets")
    if ":" in format_name:
        obj = _import(format_name, "format")
        if isinstance(obj, type) and issubclass(obj, TwoPhaseCommitDataSource):
            obj = obj.sink_class
        if isinstance(obj, type) and issubclass(obj, TwoPhaseCommitSink):
            return obj.from_options(options)
        raise ConfigurationError(f"{format_name} is not a TwoPhaseCommitSink or TwoPhaseCommitDataSource class")
    known = ", ".join(ds.name() for ds in DATA_SOURCES if ds is not CompositeDataSource)
    raise ConfigurationError(f"unknown sink format {format_name!r}: use one of {known}, or package.module:SinkClass")


def participant(name: str, format: str, options: Mapping[str, str] | None = None, *,
                columns: Any = None, transform: Callable[[Any], Any] | None = None,
                batch_column: str | None = None) -> Participant:
    """A :class:`twopc.Participant` whose sink is built as ``spark.write.format(format).options(**options)`` would build
    it. Raises ``ConfigurationError``: the format is unknown or refuses the options (naming the participant)."""
    try:
        return Participant(name, sink_for_format(format, dict(options or {})), columns=columns, transform=transform,
                           batch_column=batch_column)
    except TwoPCError as exc:
        if f"participant {name!r}" in str(exc):
            raise
        raise _named(name, format, exc) from exc


def _named(name: str, format_name: str, exc: TwoPCError) -> TwoPCError:
    text = f"composite participant {name!r} ({format_name}): {exc}"
    try:
        return type(exc)(text)
    except TypeError:
        return ConfigurationError(text)


def _import(path: str, what: str) -> Any:
    try:
        return load_object(path)
    except ValueError:
        raise ConfigurationError(f"{what} {path!r} is not 'package.module:name'") from None
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot import {what} {path!r}: {exc}") from None


def parse_columns(text: str) -> dict[str, str]:
    """``"id, amount AS total"`` -> ``{"id": "id", "amount": "total"}``. Raises ``ConfigurationError``: an
    entry is empty or not ``name`` / ``name AS new``."""
    out: dict[str, str] = {}
    for entry in text.split(","):
        words = entry.split()
        if len(words) == 1:
            out[words[0]] = words[0]
        elif len(words) == 3 and words[1].lower() == "as":
            out[words[0]] = words[2]
        else:
            raise ConfigurationError(f"columns entry {entry.strip()!r} is not 'name' or 'name AS new_name'")
    return out


def _targets(options: Mapping[str, str]) -> list[dict[str, Any]]:
    """The participants' specs: ``targets`` (names or JSON) merged with prefixed options."""
    raw = next((v for k, v in options.items() if k.lower() == "targets"), None)
    if raw is None or not raw.strip():
        typo = misspelling("targets", options)
        raise MissingOptionError((f"unknown option {typo!r}: did you mean 'targets'? " if typo else "")
                                 + "twopc-composite needs option targets: participant names (targets=\"orders,"
                                 "counters\" with orders.format=..., orders.url=...) or a JSON array of "
                                 "{\"name\", \"format\", \"options\"} objects")
    specs: list[dict[str, Any]]
    if raw.lstrip().startswith("["):
        try:
            loaded = json.loads(raw)
        except ValueError as exc:
            raise ConfigurationError(f"option targets is not valid JSON: {exc}") from None
        if not all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in loaded):
            raise ConfigurationError("option targets: every element must be an object with a \"name\"")
        specs = [dict(t) for t in loaded]
    else:
        specs = [{"name": n.strip()} for n in raw.split(",")]
    for spec in specs:
        prefix = spec["name"].lower() + "."
        opts = {str(k): str(v) for k, v in dict(spec.get("options") or {}).items()}
        for k, v in options.items():
            if k.lower().startswith(prefix):
                key = k[len(prefix):]
                if key.lower() in _OWN_KEYS:
                    spec[key.lower()] = v
                else:
                    opts[key] = v
        spec["options"] = opts
    _refuse_strays(options, [spec["name"] for spec in specs])
    return specs


def _refuse_strays(options: Mapping[str, str], names: list[str]) -> None:
    """Refuse an option nothing would read, naming the one it most likely means."""
    prefixes = tuple(n.lower() + "." for n in names)
    strays = sorted((k for k in options if k.lower() != "targets" and not k.lower().startswith(prefixes)
                     and k.lower() not in RUNTIME_KEYS | SPARK_PASSED_OPTIONS), key=str.lower)
    if strays:
        each = "; ".join(f"unknown option {k!r}: {_stray_hint(k, names)}" for k in strays)
        raise ConfigurationError(f"twopc-composite: {each} (its options are targets and <participant>.<option>, "
                                 f"with the participants {', '.join(names)})")


def _stray_hint(key: str, names: list[str]) -> str:
    """``did you mean 'orders.url'?`` for *key* ``order.url``, else :func:`unknown_option_hint`'s."""
    head, dot, rest = key.partition(".")
    near = closest_option(head, names) if dot else None
    if near is not None and near in names:
        return f"did you mean {near + '.' + rest!r}?"
    return unknown_option_hint(key, ("targets",))


def _build(spec: Mapping[str, Any]) -> Participant:
    name = spec["name"]
    fmt = spec.get("format")
    if not fmt:
        typo = misspelling("format", spec["options"])
        raise MissingOptionError((f"unknown option {name + '.' + typo!r}: did you mean {name + '.format'!r}? "
                                  if typo else "")
                                 + f"composite participant {name!r} has no format: set option {name}.format "
                                 f"(twopc-postgres, twopc-redis, twopc-file, twopc-jdbc or package.module:SinkClass)")
    columns = spec.get("columns")
    if isinstance(columns, str):
        columns = parse_columns(columns)
    transform = spec.get("transform")
    if isinstance(transform, str):
        transform = _import(transform, f"composite participant {name!r} transform")
        if not callable(transform):
            raise ConfigurationError(f"composite participant {name!r}: transform {spec['transform']!r} is not callable")
    batch_column = spec.get("batchcolumn", spec.get("batchColumn"))
    return participant(name, str(fmt), spec["options"], columns=columns, transform=transform,
                       batch_column=str(batch_column) if batch_column else None)


class OptionsCompositeSink(CompositeSink):
    """The :class:`twopc.spi.runtime.CompositeSink` of ``format("twopc-composite")``, built from options."""

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> OptionsCompositeSink:
        """Build every participant from *options*. Raises ``ConfigurationError``: ``targets`` is missing or
        malformed, or a participant's format or options are wrong (naming it)."""
        return cls([_build(spec) for spec in _targets(options)])


class CompositeDataSource(TwoPhaseCommitDataSource):
    """Spark data source ``twopc-composite``: one micro-batch written to several targets
    under one decision (:class:`OptionsCompositeSink`)."""

    sink_class = OptionsCompositeSink
    format_name = "twopc-composite"

    def __init__(self, options: dict[str, str]) -> None:
        """Give a ``twopc-http`` participant without an outbox folder ``<checkpoint>/twopc-http``."""
        super().__init__(options)
        root = default_outbox(self.options, self.session_root())
        if root is None:
            return
        try:
            specs = _targets(self.options)
        except TwoPCError:
            return  # the plan reports it, with the fix
        for spec in specs:
            if spec.get("format") == HttpDataSource.format_name and option(spec["options"], "outbox") is None:
                self.options[f"{spec['name']}.outbox"] = root

