"""GPU health gates (docs/health.md), the pure half: the ``health:`` configuration, the query a
check sends, the verdict of one reading, and the check timers over stored timestamps.

Nothing here reads a clock or the network: ``now`` and the readings come in, and what to store
(a :class:`HealthRecord`, kept in a node annotation or the rollout status) comes out, so a
restarted controller resumes with the same timers. No answer (no sample, several samples, NaN,
a query error) is never a pass.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from reconciler.durations import parse_duration
from reconciler.names import ARCH_SUFFIXES

#: ``HealthFailure.reason`` and the condition type of a fallback it causes
HEALTH_CHECK_FAILED = "HealthCheckFailed"

NODE_PLACEHOLDERS = frozenset({"node", "version"})
STEP_PLACEHOLDERS = frozenset({"nodes", "version"})
ALL_PLACEHOLDERS = NODE_PLACEHOLDERS | STEP_PLACEHOLDERS

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}
_EXPECT = re.compile(
    r"\s*(==|!=|<=|>=|<|>)\s*([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*"
)
# Go's regexp.QuoteMeta set: what RE2 (Prometheus's regex engine) treats as syntax
_RE2_META = frozenset("\\.+*?()|[]{}^$")


# -- configuration ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Expectation:
    """``== 1``: an operator and a finite number; ``text`` is the expectation as written."""

    op: str
    number: float
    text: str

    def holds(self, value: float) -> bool:
        return _OPERATORS[self.op](value, self.number)

    def __str__(self) -> str:
        return f"{self.op} {self.text}"


def parse_expectation(text: str) -> Expectation:
    """Raises ValueError saying what is wrong."""
    match = _EXPECT.fullmatch(text)
    if match is None:
        raise ValueError(
            "expected an operator (==, !=, <, <=, >, >=) and a number, like '== 1' or '< 90'"
        )
    number = float(match.group(2))
    if not math.isfinite(number):
        raise ValueError(f"the number {match.group(2)!r} is too large")
    return Expectation(match.group(1), number, match.group(2))


@dataclass(frozen=True, slots=True)
class NodeCheck:
    name: str
    query: str
    expect: Expectation
    within: float  # seconds after the node's pod turned Ready


@dataclass(frozen=True, slots=True)
class StepCheck:
    name: str
    query: str
    expect: Expectation
    hold: float  # seconds the expectation must hold continuously (``for``)


@dataclass(frozen=True, slots=True)
class HealthConfig:
    prometheus_url: str
    timeout: float = 5.0
    interval: float = 10.0
    node_checks: tuple[NodeCheck, ...] = ()
    step_checks: tuple[StepCheck, ...] = ()

    @classmethod
    def from_obj(cls, obj: Mapping[str, Any]) -> HealthConfig:
        """From a ``health`` section that validation accepted; raises ValueError otherwise."""
        prometheus = obj["prometheus"]
        return cls(
            prometheus_url=str(prometheus["url"]),
            timeout=parse_duration(prometheus.get("timeout", "5s")),
            interval=parse_duration(obj.get("interval", "10s")),
            node_checks=tuple(
                NodeCheck(c["name"], c["query"], parse_expectation(c["expect"]),
                          parse_duration(c.get("within", "5m")))
                for c in obj.get("nodeChecks") or ()
            ),
            step_checks=tuple(
                StepCheck(c["name"], c["query"], parse_expectation(c["expect"]),
                          parse_duration(c.get("for", "0s")))
                for c in obj.get("stepChecks") or ()
            ),
        )


# -- substitution -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Placeholder:
    """``{{name}}`` at ``start:end`` of a query; ``quote`` is the PromQL string it sits in
    (``"``, ``'`` or a backtick), None outside any string."""

    name: str
    start: int
    end: int
    quote: str | None


class PlaceholderError(ValueError):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


def placeholders(query: str) -> list[Placeholder]:
    """Every ``{{...}}`` in ``query``, with the string context PromQL's lexer gives it.
    ``{{`` always opens a placeholder; an unclosed one raises PlaceholderError."""
    found: list[Placeholder] = []
    quote: str | None = None
    i = 0
    while i < len(query):
        if query.startswith("{{", i):
            end = query.find("}}", i + 2)
            if end < 0:
                raise PlaceholderError("'{{' without a closing '}}'", i)
            found.append(Placeholder(query[i + 2:end], i, end + 2, quote))
            i = end + 2
            continue
        char = query[i]
        if quote is None:
            if char in "\"'`":
                quote = char
            elif char == "#":  # a comment runs to the end of the line
                newline = query.find("\n", i)
                i = len(query) if newline < 0 else newline
                continue
        elif char == "\\" and quote != "`":
            i += 1  # the escaped character cannot close the string
        elif char == quote:
            quote = None
        i += 1
    return found


def quote_meta(text: str) -> str:
    """``text`` as an RE2 regex that matches exactly it."""
    return "".join("\\" + c if c in _RE2_META else c for c in text)


def nodes_regex(nodes: Iterable[str]) -> str:
    """``{{nodes}}``: an alternation matching exactly the given node names."""
    names = list(dict.fromkeys(nodes))
    if not names:
        raise ValueError("{{nodes}} needs at least one node")
    return "|".join(quote_meta(name) for name in names)


def escape_string(value: str, quote: str) -> str:
    """``value`` written inside a PromQL string delimited by ``quote`` (``"`` or ``'``)."""
    out = []
    for char in value:
        if char in ("\\", quote):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return "".join(out)


def substitute(query: str, values: Mapping[str, str], allowed: frozenset[str]) -> str:
    """``query`` with each placeholder replaced by its value, escaped for the string it sits
    in. Raises PlaceholderError for an unknown placeholder, one not ``allowed`` here, or one
    outside a single- or double-quoted string (a raw string cannot escape its value)."""
    parts: list[str] = []
    last = 0
    for ph in placeholders(query):
        check_placeholder(ph, allowed)
        assert ph.quote is not None
        parts.append(query[last:ph.start])
        parts.append(escape_string(values[ph.name], ph.quote))
        last = ph.end
    parts.append(query[last:])
    return "".join(parts)


def check_placeholder(ph: Placeholder, allowed: frozenset[str]) -> None:
    """Raises PlaceholderError when ``ph`` cannot be substituted where it is."""
    shown = "{{" + ph.name + "}}"
    if ph.name not in ALL_PLACEHOLDERS:
        known = ", ".join("{{" + n + "}}" for n in sorted(allowed))
        raise PlaceholderError(f"unknown placeholder '{shown}'; here only {known} exist "
                               "(written without spaces)", ph.start)
    if ph.name not in allowed:
        where = "stepChecks" if ph.name == "nodes" else "nodeChecks"
        raise PlaceholderError(f"'{shown}' exists only in {where}", ph.start)
    if ph.quote not in ('"', "'"):
        where = "a raw `...` string" if ph.quote == "`" else "no string"
        raise PlaceholderError(
            f"'{shown}' is in {where}; write it inside a quoted label value, like "
            f"Hostname=\"{shown}\", so its value is escaped", ph.start)


def exporter_version(version: str) -> str:
    """``{{version}}``: the payload version as the exporter's ``driver_version`` label writes
    it, without the arch suffix (``2.33.0.9-amd64`` and ``2.33.0.9`` are one driver,
    docs/policy.md#the-objects-in-the-cluster)."""
    for suffix in ARCH_SUFFIXES:
        if version.endswith(suffix):
            return version[: -len(suffix)]
    return version


def node_query(check: NodeCheck, node: str, version: str) -> str:
    return substitute(check.query, {"node": node, "version": exporter_version(version)},
                      NODE_PLACEHOLDERS)


def step_query(check: StepCheck, nodes: Iterable[str], version: str) -> str:
    return substitute(check.query,
                      {"nodes": nodes_regex(nodes), "version": exporter_version(version)},
                      STEP_PLACEHOLDERS)


# -- readings and verdicts ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class NoSample:
    """The query returned an empty result."""


@dataclass(frozen=True, slots=True)
class ManySamples:
    """The query returned more than one sample (a check must return exactly one)."""

    count: int


@dataclass(frozen=True, slots=True)
class QueryError:
    """No usable answer: Prometheus refused the query, answered garbage, or did not answer.
    ``status`` is the HTTP status, None when no HTTP answer came (refused, timed out)."""

    status: int | None
    message: str


#: one answer to a check's query: a sample value (NaN included), or why there is none
Reading = float | NoSample | ManySamples | QueryError


class Verdict(StrEnum):
    PASS = "Pass"
    FAIL = "Fail"
    WAITING = "Waiting"  # no answer: never a pass, never a failure


def evaluate(check: NodeCheck | StepCheck, reading: Reading | None) -> Verdict:
    """The verdict of one reading (None: not read yet). NaN is no answer: it compares false to
    everything, so ``!= 0`` would pass a GPU that reports nothing meaningful."""
    if isinstance(reading, bool) or not isinstance(reading, float | int):
        return Verdict.WAITING
    if math.isnan(reading):
        return Verdict.WAITING
    return Verdict.PASS if check.expect.holds(float(reading)) else Verdict.FAIL


def describe(reading: Reading | None) -> str:
    """A reading as status messages and conditions show it."""
    if reading is None:
        return "not read yet"
    if isinstance(reading, NoSample):
        return "no sample"
    if isinstance(reading, ManySamples):
        return f"{reading.count} samples (the query must return one)"
    if isinstance(reading, QueryError):
        status = f"HTTP {reading.status}: " if reading.status is not None else ""
        return f"query error: {status}{reading.message}"
    if math.isnan(reading):
        return "NaN"
    return f"{reading:g}"


# -- stored timers ------------------------------------------------------------------------------

def format_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _parse_time(text: object) -> float | None:
    if not isinstance(text, str) or len(text) > 64:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.timestamp() if moment.tzinfo is not None else None


@dataclass(frozen=True, slots=True)
class HealthRecord:
    """What a restart needs: when the checks started (a node: its pod turned Ready; a step: all
    its nodes passed), since when each step check holds, and when each check passed."""

    started: float
    holding: Mapping[str, float] = field(default_factory=dict)
    passed: Mapping[str, float] = field(default_factory=dict)

    def as_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"started": format_time(self.started)}
        if self.holding:
            data["holding"] = {k: format_time(v) for k, v in sorted(self.holding.items())}
        if self.passed:
            data["passed"] = {k: format_time(v) for k, v in sorted(self.passed.items())}
        return data

    def to_text(self) -> str:
        """For a node annotation."""
        return json.dumps(self.as_data(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_data(cls, data: object, default_started: float) -> HealthRecord:
        """From stored data anyone can edit: what does not read as a time is dropped (a check
        dropped from ``passed`` runs again: garbage never passes one)."""
        if not isinstance(data, Mapping):
            return cls(default_started)
        started = _parse_time(data.get("started"))
        return cls(default_started if started is None else started,
                   _times(data.get("holding")), _times(data.get("passed")))

    @classmethod
    def from_text(cls, text: str | None, default_started: float) -> HealthRecord:
        try:
            data = json.loads(text) if text and len(text) <= 65536 else None
        except ValueError:
            data = None
        return cls.from_data(data, default_started)


def _times(data: object) -> dict[str, float]:
    if not isinstance(data, Mapping):
        return {}
    times = {}
    for name, text in data.items():
        moment = _parse_time(text)
        if isinstance(name, str) and moment is not None:
            times[name] = moment
    return times


class HealthState(StrEnum):
    PASSED = "Passed"
    WAITING = "Waiting"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class HealthFailure:
    """A node check not passed within ``within``, or a false step check."""

    check: str
    value: str
    query: str
    node: str | None = None  # None for a step check
    reason: str = HEALTH_CHECK_FAILED

    @property
    def message(self) -> str:
        if self.node is not None:
            return (f"health check {self.check} failed on node {self.node}: value {self.value}"
                    f" (query {self.query})")
        return f"step health check {self.check} failed: value {self.value} (query {self.query})"


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """One check's state after this reading; ``since``: when its current wait began."""

    check: str
    state: HealthState
    value: str
    query: str
    since: float


@dataclass(frozen=True, slots=True)
class Health:
    """The checks of one node (NodeHealth) or one step (StepHealth) after this evaluation."""

    state: HealthState
    checks: tuple[CheckOutcome, ...]
    #: what to store for the next evaluation (annotation / status)
    record: HealthRecord
    failure: HealthFailure | None = None

    @property
    def message(self) -> str:
        """Which check waits and since when, or why it failed ('' when all passed)."""
        if self.failure is not None:
            return self.failure.message
        waiting = [c for c in self.checks if c.state is HealthState.WAITING]
        return "; ".join(f"health check {c.check} waiting since {format_time(c.since)}"
                         f" (last reading: {c.value})" for c in waiting)


NodeHealth = Health
StepHealth = Health


def _overall(outcomes: Sequence[CheckOutcome]) -> HealthState:
    if any(c.state is HealthState.FAILED for c in outcomes):
        return HealthState.FAILED
    if all(c.state is HealthState.PASSED for c in outcomes):
        return HealthState.PASSED
    return HealthState.WAITING


def pending_node_queries(checks: Sequence[NodeCheck], node: str, version: str,
                         record: HealthRecord) -> dict[str, str]:
    """Check name -> query for the checks not passed yet (the only ones to send)."""
    return {c.name: node_query(c, node, version) for c in checks if c.name not in record.passed}


def pending_step_queries(checks: Sequence[StepCheck], nodes: Sequence[str], version: str,
                         record: HealthRecord) -> dict[str, str]:
    return {c.name: step_query(c, nodes, version) for c in checks if c.name not in record.passed}


def node_health(checks: Sequence[NodeCheck], node: str, version: str, record: HealthRecord,
                readings: Mapping[str, Reading], now: float) -> NodeHealth:
    """A node's checks: each passes at its first true reading and stays passed; a false reading
    once ``within`` has run out since ``record.started`` fails the node; no answer waits, also
    past ``within`` (Prometheus being down is not the node's failure)."""
    passed = dict(record.passed)
    outcomes: list[CheckOutcome] = []
    failure: HealthFailure | None = None
    for check in checks:
        query = node_query(check, node, version)
        reading = readings.get(check.name)
        if check.name in passed:
            outcomes.append(CheckOutcome(check.name, HealthState.PASSED, describe(reading),
                                         query, passed[check.name]))
            continue
        verdict = evaluate(check, reading)
        state = HealthState.WAITING
        if verdict is Verdict.PASS:
            state = HealthState.PASSED
            passed[check.name] = now
        elif verdict is Verdict.FAIL and now - record.started >= check.within:
            state = HealthState.FAILED
            if failure is None:
                failure = HealthFailure(check.name, describe(reading), query, node)
        outcomes.append(CheckOutcome(check.name, state, describe(reading), query,
                                     passed.get(check.name, record.started)))
    return Health(_overall(outcomes), tuple(outcomes),
                  HealthRecord(record.started, {}, passed), failure)


def step_health(checks: Sequence[StepCheck], nodes: Sequence[str], version: str,
                record: HealthRecord, readings: Mapping[str, Reading], now: float) -> StepHealth:
    """A step's checks: each must hold for ``hold`` seconds of true readings in a row (the first
    is stored in ``record.holding``); it then stays passed. A false reading fails the step at
    once; no answer restarts the hold (continuity is not proven) but fails nothing."""
    holding = dict(record.holding)
    passed = dict(record.passed)
    outcomes: list[CheckOutcome] = []
    failure: HealthFailure | None = None
    for check in checks:
        query = step_query(check, nodes, version)
        reading = readings.get(check.name)
        if check.name in passed:
            outcomes.append(CheckOutcome(check.name, HealthState.PASSED, describe(reading),
                                         query, passed[check.name]))
            continue
        verdict = evaluate(check, reading)
        since = record.started
        state = HealthState.WAITING
        if verdict is Verdict.PASS:
            since = holding.setdefault(check.name, now)
            if now - since >= check.hold:
                state = HealthState.PASSED
                passed[check.name] = now
                del holding[check.name]
        else:
            holding.pop(check.name, None)
            if verdict is Verdict.FAIL:
                state = HealthState.FAILED
                if failure is None:
                    failure = HealthFailure(check.name, describe(reading), query)
        outcomes.append(CheckOutcome(check.name, state, describe(reading), query, since))
    return Health(_overall(outcomes), tuple(outcomes),
                  HealthRecord(record.started, holding, passed), failure)
