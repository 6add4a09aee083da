"""Semantic rules of the ``health:`` sections of ``reconciler.yaml`` (docs/health.md), at the top
level and in ``clusters.<name>.health``: what the schema cannot say about an expectation, a
duration, a check name, a placeholder, a PromQL query or the Prometheus URL.

Like the other rules they judge only values whose type the schema accepted.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import promql_parser

from reconciler.durations import parse_duration
from reconciler.health.checks import (
    NODE_PLACEHOLDERS,
    STEP_PLACEHOLDERS,
    PlaceholderError,
    check_placeholder,
    nodes_regex,
    parse_expectation,
    placeholders,
    substitute,
)
from reconciler.policy.document import ParsedDocument
from reconciler.policy.findings import Finding, join_pointer

#: longer durations are mistakes (and would overflow timestamp arithmetic long before a float)
MAX_DURATION = 7 * 24 * 3600.0
MAX_QUERY = 4096  # the schema's maxLength; longer queries are reported there
#: brackets deeper than this are refused before parsing (the parser's time grows with depth)
MAX_NESTING = 64
#: what the placeholders stand for when a query is parsed at validation
SAMPLE_VALUES = {"node": "node-0001", "nodes": nodes_regex(["node-0001", "node-0002"]),
                 "version": "2.33.0.9"}
_KINDS = (("nodeChecks", NODE_PLACEHOLDERS, "within"), ("stepChecks", STEP_PLACEHOLDERS, "for"))


def health_rules(doc: ParsedDocument) -> Iterator[Finding]:
    obj = doc.obj
    if not isinstance(obj, dict):
        return
    sections: list[tuple[str, str, Any]] = [("/health", "health", obj.get("health"))]
    clusters = obj.get("clusters")
    for name, settings in clusters.items() if isinstance(clusters, dict) else ():
        if isinstance(settings, dict):
            pointer = join_pointer(join_pointer("/clusters", name), "health")
            sections.append((pointer, f"clusters.{name}.health", settings.get("health")))
    for pointer, label, section in sections:
        if isinstance(section, dict):
            yield from _section(doc, pointer, label, section)


def _section(doc: ParsedDocument, pointer: str, label: str,
             section: Mapping[str, Any]) -> Iterator[Finding]:
    prometheus = section.get("prometheus")
    if isinstance(prometheus, dict):
        url = prometheus.get("url")
        if isinstance(url, str):
            problem = _url_problem(url)
            if problem:
                got = "" if "@" in url else f", got '{_shown(url)}'"  # never echo a password
                yield doc.finding(f"{pointer}/prometheus/url", "health-prometheus-url",
                                  f"{label}.prometheus.url: {problem}{got}")
        yield from _duration(doc, f"{pointer}/prometheus/timeout",
                             f"{label}.prometheus.timeout", prometheus.get("timeout"))
    yield from _duration(doc, f"{pointer}/interval", f"{label}.interval",
                         section.get("interval"))
    names: dict[str, str] = {}  # check name -> where it was first defined
    for kind, allowed, timer in _KINDS:
        checks = section.get(kind)
        for index, check in enumerate(checks if isinstance(checks, list) else ()):
            if not isinstance(check, dict):
                continue
            where = f"{pointer}/{kind}/{index}"
            shown = f"{label}.{kind}[{index}]"
            name = check.get("name")
            if isinstance(name, str):
                if name in names:
                    yield doc.finding(
                        f"{where}/name", "health-duplicate-check",
                        f"{shown}.name: the check name '{name}' is already used by "
                        f"{names[name]}; names identify checks in conditions and metrics")
                else:
                    line = doc.locate(f"{where}/name").line
                    names[name] = f"{shown} (line {line})"
            expect = check.get("expect")
            if isinstance(expect, str):
                try:
                    parse_expectation(expect)
                except ValueError as exc:
                    yield doc.finding(f"{where}/expect", "health-expect",
                                      f"{shown}.expect: {exc}, got '{_shown(expect)}'")
            query = check.get("query")
            if isinstance(query, str) and len(query) <= MAX_QUERY:
                yield from _query(doc, f"{where}/query", f"{shown}.query", query, allowed)
            yield from _duration(doc, f"{where}/{timer}", f"{shown}.{timer}", check.get(timer),
                                 zero=timer == "for")


def _query(doc: ParsedDocument, pointer: str, label: str, query: str,
           allowed: frozenset[str]) -> Iterator[Finding]:
    problems: list[str] = []
    try:
        for ph in placeholders(query):
            try:
                check_placeholder(ph, allowed)
            except PlaceholderError as exc:
                problems.append(f"{exc} (at character {exc.offset + 1})")
    except PlaceholderError as exc:
        problems.append(f"{exc} (at character {exc.offset + 1})")
    for problem in dict.fromkeys(problems):
        yield doc.finding(pointer, "health-placeholder", f"{label}: {problem}")
    if problems:
        return
    text = substitute(query, SAMPLE_VALUES, allowed)
    if _nesting(text) > MAX_NESTING:
        yield doc.finding(pointer, "health-promql",
                          f"{label}: brackets nested more than {MAX_NESTING} deep")
        return
    try:
        expr = promql_parser.parse(text)
    except ValueError as exc:
        yield doc.finding(pointer, "health-promql", f"{label}: not valid PromQL: {exc}")
        return
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # a panic in the Rust parser (pyo3's PanicException)
        yield doc.finding(pointer, "health-promql",
                          f"{label}: the PromQL parser failed on this query ({exc!r:.100})")
        return
    kind = _result_kind(expr)
    if kind is not None:
        yield doc.finding(pointer, "health-promql",
                          f"{label}: the query returns {kind}; a check needs an instant vector "
                          "or a scalar (one sample)")


def _result_kind(expr: promql_parser.Expr) -> str | None:
    """What a query returns when that is never one sample."""
    while isinstance(expr, promql_parser.ParenExpr):
        expr = expr.expr
    if isinstance(expr, promql_parser.MatrixSelector | promql_parser.SubqueryExpr):
        return "a range vector"
    if isinstance(expr, promql_parser.StringLiteral):
        return "a string"
    return None


def _nesting(query: str) -> int:
    depth = deepest = 0
    quote: str | None = None
    escaped = False
    for char in query:
        if quote is not None:
            if escaped:
                escaped = False
            elif char == "\\" and quote != "`":
                escaped = True
            elif char == quote:
                quote = None
        elif char in "\"'`":
            quote = char
        elif char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth -= 1
    return deepest


def _duration(doc: ParsedDocument, pointer: str, label: str, value: object, *,
              zero: bool = False) -> Iterator[Finding]:
    if not isinstance(value, str):
        return
    try:
        seconds = parse_duration(value)
    except ValueError:
        return  # the schema's pattern reported it
    if not math.isfinite(seconds) or seconds > MAX_DURATION:
        yield doc.finding(pointer, "health-duration",
                          f"{label}: at most 168h, got '{_shown(value)}'")
    elif seconds == 0 and not zero:
        yield doc.finding(pointer, "health-duration",
                          f"{label}: must be longer than 0, got '{_shown(value)}'")


def _url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        return "not a valid URL"
    if parts.scheme not in ("http", "https"):
        return "expected an http:// or https:// URL"
    if not parts.hostname:
        return "the URL has no host"
    if parts.username is not None or parts.password is not None:
        return "the URL carries credentials, and reconciler.yaml is in Git: remove them"
    if parts.query or parts.fragment:
        return "the URL must be the server's base address, without '?' or '#'"
    return None


def _shown(text: str) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= 60 else f"{text[:40]}...{text[-10:]} ({len(text)} characters)"
