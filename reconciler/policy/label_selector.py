"""Kubernetes label selectors and label keys, as the API server reads them: the string form of
``rollout.drain.podSelector`` (``app=web,tier!=db,zone in (a,b),!legacy,gpu``) and the
``matchLabels``/``matchExpressions`` form of a PodDisruptionBudget's selector. Pure.

A selector that does not parse is a ``LabelSelectorError`` saying where; a key is checked as the
API server checks one (an optional DNS-subdomain prefix of at most 253 characters, a name of at
most 63).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
#: the whitespace of the API server's selector lexer (not Unicode's: a no-break space is text)
_WS = " \t\r\n"
#: one requirement of the string form; ``in``/``notin`` take a parenthesised list (``in(a)``
#: too: the API server's lexer ends a word at a parenthesis)
_TOKEN = re.compile(
    r"{w}*(?:(?P<not>!){w}*(?P<nkey>[^{ws}=!,()]+)"
    r"|(?P<key>[^{ws}=!,()]+){w}*(?:(?P<op>==|!=|=|{w}+(?:not)?in(?:{w}+|(?=\())){w}*"
    r"(?:\((?P<set>[^()]*)\)|(?P<value>[^{ws},()]*)))?){w}*"
    .replace("{w}", r"[ \t\r\n]").replace("{ws}", r" \t\r\n")
)

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]


class LabelSelectorError(ValueError):
    """A selector or a label key the API server would refuse; the message says what."""


def label_key_error(key: str) -> str | None:
    """Why ``key`` is not a label key (None when it is one)."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix)):
        return (f"{_cut(key)} is not a label key: its prefix must be a DNS subdomain "
                "(lowercase letters, digits, '-' and '.', at most 253 characters)")
    if not name or len(name) > 63 or not _NAME.match(name):
        return (f"{_cut(key)} is not a label key: its name must be 1-63 characters of letters, "
                "digits, '-', '_' and '.', starting and ending with a letter or a digit")
    return None


def label_value_error(value: str) -> str | None:
    """Why ``value`` is not a label value (None when it is one)."""
    if len(value) > 63 or not _VALUE.match(value):
        return (f"{_cut(value)} is not a label value (at most 63 letters, digits, '-', '_' "
                "and '.', starting and ending with a letter or a digit)")
    return None


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """All requirements must hold; no requirement matches everything (as the API's ``''``)."""

    requirements: tuple[Requirement, ...] = ()
    #: the text as written (empty for a selector built from an object)
    text: str = ""

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """The string form (``kubectl -l``). Raises ``LabelSelectorError`` naming the part."""
        requirements: list[Requirement] = []
        stripped = text.strip(_WS)
        if not stripped:
            return cls((), text)
        for part in _split(stripped):
            match = _TOKEN.fullmatch(part)
            if match is None or not part.strip(_WS):
                raise LabelSelectorError(_unparsed(part, text))
            key = match["nkey"] or match["key"]
            error = label_key_error(key)
            if error is not None:
                raise LabelSelectorError(f"{error} (in selector {_cut(text)})")
            if match["not"]:
                requirements.append(Requirement(key, "DoesNotExist"))
                continue
            op = (match["op"] or "").strip(_WS)
            if not op:
                if match["set"] is not None or match["value"] is not None:
                    raise LabelSelectorError(_unparsed(part, text))
                requirements.append(Requirement(key, "Exists"))
                continue
            if op in ("in", "notin"):
                if match["set"] is None:
                    raise LabelSelectorError(
                        f"{op} needs a list in parentheses: {_cut(part.strip(_WS))} in selector "
                        f"{_cut(text)}")
                values = [v.strip(_WS) for v in match["set"].split(",")]
                if not values or any(not v for v in values):
                    raise LabelSelectorError(
                        f"empty value in {_cut(part.strip(_WS))} in selector {_cut(text)}")
            else:
                if match["set"] is not None or match["value"] is None:
                    raise LabelSelectorError(_unparsed(part, text))
                values = [match["value"]]
            for value in values:
                error = label_value_error(value)
                if error is not None:
                    raise LabelSelectorError(f"{error} (in selector {_cut(text)})")
            operator: Operator = "NotIn" if op in ("!=", "notin") else "In"
            requirements.append(Requirement(key, operator, frozenset(values)))
        return cls(tuple(requirements), text)

    @classmethod
    def from_object(cls, obj: Mapping[str, object] | None) -> LabelSelector | None:
        """A ``metav1.LabelSelector`` (``matchLabels``, ``matchExpressions``) as the API returns
        it. None for a missing selector (a budget without one selects no pod, as in policy/v1
        an empty one selects every pod of its namespace)."""
        if obj is None:
            return None
        requirements: list[Requirement] = []
        labels = obj.get("matchLabels") or obj.get("match_labels") or {}
        if isinstance(labels, Mapping):
            for key, value in labels.items():
                requirements.append(Requirement(str(key), "In", frozenset({str(value)})))
        expressions = obj.get("matchExpressions") or obj.get("match_expressions") or []
        if isinstance(expressions, list):
            for expr in expressions:
                if not isinstance(expr, Mapping):
                    continue
                op = str(expr.get("operator"))
                if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
                    return cls((Requirement("", "In"),))  # unknown operator: matches nothing
                values = expr.get("values") or []
                requirements.append(Requirement(
                    str(expr.get("key")), op,  # type: ignore[arg-type]
                    frozenset(str(v) for v in values) if isinstance(values, list) else frozenset(),
                ))
        return cls(tuple(requirements))


def _unparsed(part: str, text: str) -> str:
    return f"cannot parse {_cut(part.strip(_WS))} in selector {_cut(text)}"


def _cut(text: str) -> str:
    """``repr(text)`` for a message, cut to about 80 characters (a selector in Git may be
    megabytes long)."""
    shown = repr(text)
    return shown if len(shown) <= 80 else f"{shown[:60]}...{shown[-10:]} ({len(text)} characters)"


def _split(text: str) -> list[str]:
    """Split at the commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts
