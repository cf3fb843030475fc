"""Fault rules and plans: parsing, validation and serialisation (no side effects)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from typing import Any, Final, Literal, cast

from ._env import ENV_SPEC, ENV_STATE
from ._errors import GRAMMAR, FaultSpecError, UnknownFaultPoint
from ._names import NAME_RE as _NAME_RE
from ._names import check_point_name

Action = Literal["crash", "kill", "raise", "exit", "hold", "proxy", "server"]
ACTIONS: Final[tuple[str, ...]] = ("crash", "kill", "raise", "exit", "hold", "proxy", "server")
#: Actions performed by the process that owns the target (a :class:`FaultControl`), not by
#: the process where the rule fires: ``proxy`` arms a fault on a :class:`FaultProxy`,
#: ``server`` crashes or restarts a throwaway server.
REMOTE_ACTIONS: Final[tuple[str, ...]] = ("proxy", "server")
#: The faults each remote action takes.
PROXY_FAULTS: Final[tuple[str, ...]] = ("reset", "blackhole", "latency", "swallow_reply", "heal")
SERVER_FAULTS: Final[tuple[str, ...]] = ("crash", "restart", "down")

_INT_RE: Final = re.compile(r"[0-9]+\Z")
#: A remote rule's parameters (inline ``key=value``, plan-file keys) -> their FaultRule fields.
_PARAMS: Final = {"for": "for_s", "delay": "delay_s", "pattern": "pattern", "direction": "direction"}
_RULE_KEYS: Final = frozenset({"point", "batch", "partition", "action", "times", "target", "fault", *_PARAMS})
_PATTERN_RE: Final = re.compile(r"[A-Za-z0-9_ .\-]+\Z")
_DURATION_RE: Final = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s)?\Z")


def parse_duration(value: object, where: str) -> float:
    """Seconds of a plan duration: a number, or text ``"5s"``, ``"500ms"``, ``"2"``; else
    FaultSpecError naming *where*."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    match = _DURATION_RE.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise FaultSpecError(f"{where}: {value!r} is not a duration (e.g. 5s, 500ms, 2.5)")
    return float(match.group(1)) / (1000.0 if match.group(2) == "ms" else 1.0)


def _plan_text(value: Any) -> Any:
    """A rule's parameter as a plan writes it: a duration (seconds) as ``"2s"``."""
    return f"{value:g}s" if isinstance(value, float) else value


_PLAN_KEYS: Final = frozenset({"rules", "state_dir"})


@dataclasses.dataclass(frozen=True)
class FaultRule:
    """One rule: fire ``action`` at ``point`` (optionally for one batch/partition only), at most
    ``times`` in total across the processes and restarts sharing a state directory.

    ``proxy`` and ``server`` rules also name their ``target`` (as a :class:`FaultControl` named
    it) and ``fault``, and may take ``for_s``/``delay_s`` (``"5s"``, ``"500ms"``), ``pattern`` and
    ``direction``. Construction raises :class:`FaultSpecError` on a bad field."""

    point: str
    batch: int | None = None
    partition: int | None = None
    action: Action = "crash"
    times: int = 1
    target: str | None = None
    fault: str | None = None
    for_s: float | None = None
    delay_s: float | None = None
    pattern: str | None = None
    direction: str | None = None

    def __post_init__(self) -> None:
        check_point_name(self.point)
        for field in ("batch", "partition"):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise FaultSpecError(f"rule {self.point!r}: {field} must be a non-negative integer, got {value!r}")
        if self.action not in ACTIONS:
            raise FaultSpecError(f"rule {self.point!r}: unknown action {self.action!r}; "
                                 f"expected one of {'|'.join(ACTIONS)}")
        if isinstance(self.times, bool) or not isinstance(self.times, int) or self.times < 1:
            raise FaultSpecError(f"rule {self.point!r}: times must be a positive integer, got {self.times!r}")
        self._check_remote()

    def _check_remote(self) -> None:
        where = f"rule {self.point!r} ({self.action})"
        if self.action not in REMOTE_ACTIONS:
            if given := sorted([*(k for k in ("target", "fault") if getattr(self, k) is not None), *self._params()]):
                raise FaultSpecError(f"{where}: {', '.join(given)} only go with the proxy and server actions")
            return
        if not isinstance(self.target, str) or not _NAME_RE.match(self.target):
            raise FaultSpecError(f"{where}: needs a target, the name its FaultControl gave the "
                                 f"{self.action} (e.g. 'postgres'), got {self.target!r}")
        faults = PROXY_FAULTS if self.action == "proxy" else SERVER_FAULTS
        if self.fault not in faults:
            raise FaultSpecError(f"{where}: fault must be one of {'|'.join(faults)}, got {self.fault!r}")
        for name in ("for_s", "delay_s"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, parse_duration(value, f"{where}: {name.removesuffix('_s')}"))
        allowed = {"proxy": {"blackhole": {"for", "direction"}, "latency": {"for", "delay", "direction"},
                             "swallow_reply": {"for", "pattern"}},
                   "server": {"down": {"for"}}}[self.action].get(self.fault, set())
        if wrong := sorted(set(self._params()) - allowed):
            raise FaultSpecError(f"{where}: {self.fault} takes no {', '.join(wrong)}")
        if self.fault == "swallow_reply" and (not isinstance(self.pattern, str) or not _PATTERN_RE.match(self.pattern)):
            raise FaultSpecError(f"{where}: swallow_reply needs a pattern of letters, digits, spaces, '_', '.' "
                                 f"or '-' (the request whose reply is lost, e.g. 'COMMIT PREPARED'), "
                                 f"got {self.pattern!r}")
        if self.direction is not None and self.direction not in ("upstream", "downstream", "both"):
            raise FaultSpecError(f"{where}: direction must be upstream, downstream or both, got {self.direction!r}")

    def _params(self) -> dict[str, Any]:
        """The remote parameters given, under their plan-file keys (``for``/``delay`` in seconds once checked)."""
        return {key: value for key, name in _PARAMS.items() if (value := getattr(self, name)) is not None}

    def remote_request(self) -> dict[str, Any]:
        """What a ``proxy`` or ``server`` rule asks its :class:`FaultControl` to do (JSON-ready)."""
        return {"action": self.action, "target": self.target, "fault": self.fault, "params": self._params()}

    @property
    def kind(self) -> str:
        """What the rule does, for reports: ``crash``, ``kill``, ``proxy.blackhole``, ``server.crash``..."""
        return f"{self.action}.{self.fault}" if self.action in REMOTE_ACTIONS else self.action

    def matches(self, point: str, batch_id: int | None, context: Mapping[str, object]) -> bool:
        return (point == self.point and (self.batch is None or batch_id == self.batch)
                and (self.partition is None or context.get("partition") == self.partition))

    def to_spec(self) -> str:
        """The inline-spec form of this rule (round-trips through :meth:`FaultPlan.parse`)."""
        text = self.point
        if self.batch is not None:
            text += f"@batch={self.batch}"
        if self.partition is not None:
            text += f"@partition={self.partition}"
        action: str = self.action
        if self.action in REMOTE_ACTIONS:
            action += f"/{self.target}/{self.fault}"
            action += "".join(f"/{key}={_plan_text(value)}" for key, value in self._params().items())
        return f"{text}:{action}*{self.times}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with the keys of the plan-file format (fields left unset omitted)."""
        remote = {"target": self.target, "fault": self.fault, **self._params()}
        return {"point": self.point, "batch": self.batch, "partition": self.partition, "action": self.action,
                "times": self.times, **{k: _plan_text(v) for k, v in remote.items() if v is not None}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FaultRule:
        """Build a rule from a plan-file entry; raises :class:`FaultSpecError` on bad input."""
        if not isinstance(data, Mapping):
            raise FaultSpecError(f"plan rule must be a JSON object, got {data!r}")
        if extra := set(data) - _RULE_KEYS:
            raise FaultSpecError(f"plan rule {dict(data)!r}: unknown key(s) {sorted(extra)}; "
                                 f"allowed: {sorted(_RULE_KEYS)}")
        if "point" not in data:
            raise FaultSpecError(f"plan rule {dict(data)!r}: missing 'point'")
        fields = {_PARAMS.get(k, k): v for k, v in data.items() if v is not None}
        return cls(**{**fields, "action": fields.get("action") or "crash"})


def _parse_rule(text: str, index: int) -> FaultRule:
    where = f"rule {index + 1} {text!r}"
    body = text.strip()
    if not body:
        raise FaultSpecError(f"{where} is empty; {GRAMMAR}")
    times = 1
    if "*" in body:
        body, times_text = body.rsplit("*", 1)
        if not _INT_RE.match(times_text.strip()) or int(times_text) < 1:
            raise FaultSpecError(f"{where}: times {times_text!r} is not a positive integer; {GRAMMAR}")
        times = int(times_text)
    action = "crash"
    remote: dict[str, Any] = {}
    if ":" in body:
        body, action = body.split(":", 1)
        action, *parts = action.strip().split("/")
        action = action.lower()
        if action not in ACTIONS:
            raise FaultSpecError(f"{where}: unknown action {action!r} (expected {'|'.join(ACTIONS)}); {GRAMMAR}")
        remote = _remote_parts(where, action, parts)
    name, *filters = body.split("@")
    name = name.strip()
    if not _NAME_RE.match(name):
        raise FaultSpecError(f"{where}: bad fault point name {name!r}; {GRAMMAR}")
    values: dict[str, int] = {}
    for flt in filters:
        key, sep, value = flt.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in ("batch", "partition"):
            raise FaultSpecError(f"{where}: bad filter '@{flt}' (expected @batch=N or @partition=P); {GRAMMAR}")
        if key in values:
            raise FaultSpecError(f"{where}: filter '@{key}' given twice; {GRAMMAR}")
        if not _INT_RE.match(value):
            raise FaultSpecError(f"{where}: filter '@{flt}' needs a non-negative integer; {GRAMMAR}")
        values[key] = int(value)
    return FaultRule(point=name, batch=values.get("batch"), partition=values.get("partition"),
                     action=cast(Action, action), times=times, **remote)


def _remote_parts(where: str, action: str, parts: list[str]) -> dict[str, Any]:
    """``TARGET/FAULT[/key=value...]`` after a ``proxy`` or ``server`` action."""
    if action not in REMOTE_ACTIONS:
        if parts:
            raise FaultSpecError(f"{where}: action {action!r} takes no '/...' part; {GRAMMAR}")
        return {}
    if len(parts) < 2:
        raise FaultSpecError(f"{where}: {action} needs '/TARGET/FAULT' (e.g. {action}/postgres/"
                             f"{'blackhole' if action == 'proxy' else 'crash'}); {GRAMMAR}")
    out: dict[str, Any] = {"target": parts[0].strip(), "fault": parts[1].strip()}
    for part in parts[2:]:
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in _PARAMS:
            raise FaultSpecError(f"{where}: bad parameter {part!r} (expected for=, delay=, pattern= or "
                                 f"direction=); {GRAMMAR}")
        out[_PARAMS[key.strip()]] = value.strip()
    return out


@dataclasses.dataclass(frozen=True)
class FaultPlan:
    """An ordered set of :class:`FaultRule` plus an optional state directory; of the rules matching
    a hit, the first with an unused slot fires."""

    rules: tuple[FaultRule, ...] = ()
    state_dir: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))
        for rule in self.rules:
            if not isinstance(rule, FaultRule):
                raise FaultSpecError(f"plan rules must be FaultRule objects, got {rule!r}")
        if self.state_dir is not None:
            object.__setattr__(self, "state_dir", os.fspath(self.state_dir))

    @classmethod
    def parse(cls, spec: str) -> FaultPlan:
        """Parse an inline spec (blank: an empty plan); FaultSpecError names the bad part, shows the grammar."""
        if not isinstance(spec, str):
            raise FaultSpecError(f"fault spec must be a string, got {spec!r}")
        if not spec.strip():
            return cls()
        return cls(tuple(_parse_rule(part, i) for i, part in enumerate(spec.split(","))))

    @classmethod
    def from_json(cls, text: str) -> FaultPlan:
        """Parse the JSON plan ``{"rules": [...], "state_dir": "..."}``; FaultSpecError on bad input."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FaultSpecError(f"fault plan is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise FaultSpecError("fault plan must be a JSON object with a 'rules' list")
        if extra := set(data) - _PLAN_KEYS:
            raise FaultSpecError(f"fault plan: unknown key(s) {sorted(extra)}")
        rules = data.get("rules", [])
        if not isinstance(rules, list):
            raise FaultSpecError("fault plan: 'rules' must be a list")
        state_dir = data.get("state_dir")
        if state_dir is not None and not isinstance(state_dir, str):
            raise FaultSpecError("fault plan: 'state_dir' must be a string or null")
        return cls(tuple(FaultRule.from_dict(r) for r in rules), state_dir)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> FaultPlan:
        """Read a JSON plan file.  Raises :class:`FaultSpecError` or ``OSError``."""
        with open(path, encoding="utf-8") as fh:
            return cls.from_json(fh.read())

    @classmethod
    def coerce(cls, plan: FaultPlan | str) -> FaultPlan:
        return plan if isinstance(plan, FaultPlan) else cls.parse(plan)

    def to_spec(self) -> str:
        """Inline-spec form (drops ``state_dir``)."""
        return ",".join(rule.to_spec() for rule in self.rules)

    def to_json(self) -> str:
        """The JSON plan-file form (includes ``state_dir``)."""
        return json.dumps({"rules": [r.to_dict() for r in self.rules], "state_dir": self.state_dir}, indent=2)

    def env(self, state_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
        """Environment variables that arm this plan in a child process. ``TWOPC_FAULT_STATE`` is
        *state_dir*, else the plan's; with neither each run of the child counts in a folder of its
        own. Callers should also drop an inherited ``TWOPC_FAULT_PLAN``."""
        chosen = state_dir if state_dir is not None else self.state_dir
        env = {ENV_SPEC: self.to_spec()}
        if chosen is not None:
            env[ENV_STATE] = os.fspath(chosen)
        return env

    def validate(self, known: Mapping[str, str] | None = None) -> FaultPlan:
        """Check every rule's point is in *known* (default: the declared points); returns ``self``,
        raises :class:`UnknownFaultPoint` listing the known names."""
        if known is None:
            from ._registry import declared_points
            known = declared_points()
        if unknown := [r.point for r in self.rules if r.point not in known]:
            raise UnknownFaultPoint(list(dict.fromkeys(unknown)), known)
        return self
