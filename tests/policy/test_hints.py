"""Hints fit the field: every replacement a message suggests is accepted by that very field.

A grid of fields (int-or-percent, int-only, int-or-{}, bool, enum, patterned strings) times
values people write by mistake; each suggestion is read back out of the message, written into
the field, and the file validated again."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from reconciler.policy.validation import validate_document
from tests.policy.texts import SEED_10, replace_line

P = "/spec/driver/upgradePolicy"
#: (line of SEED_10, text before the value, pointer)
FIELDS = {
    "enableRollout": (12, "      enableRollout: ", f"{P}/enableRollout"),
    "replicas": (14, "        - replicas: ", f"{P}/upgradeSteps/0/replicas"),
    "pauseDuration": (15, "          pauseDuration: ", f"{P}/upgradeSteps/0/pauseDuration"),
    "pause": (22, "      pause: ", f"{P}/pause"),
    "maxParallel": (23, "      maxParallel: ", f"{P}/maxParallel"),
    "maxUnavailable": (24, "      maxUnavailable: ", f"{P}/maxUnavailable"),
    "maxFailureThreshold": (25, "      maxFailureThreshold: ", f"{P}/maxFailureThreshold"),
    "fallback": (26, "      fallback: ", f"{P}/fallback"),
    "version": (10, "      version: ", "/spec/driver/payload/version"),
    "name": (4, "  name: ", "/metadata/name"),
}
VALUES = ['"3"', '"0"', '"1"', '"100"', '"150"', "3%", '"3%"', "0%", '"50 %"', "-10%", "3.0",
          "0.0", "1e30", "true", '"true"', '"False"', "yes", "off", "3", "-1", "10s", '"10m"',
          "2.33", "Pause", "rolback", "~", "9223372036854775808.0", '" 7 "']
#: rules that judge a value's form (not the order of steps, which a lone field cannot know)
VALUE_RULES = {"percent-format", "percent-range", "integer-range", "non-finite-number"}

def as_string(text: str) -> str:
    return json.dumps(text)


def as_plain(text: str) -> str:
    return text


SUGGESTIONS: list[tuple[str, Callable[[str], str]]] = [
    # (pattern, how the captured replacement is written in YAML)
    (r"write (-?[0-9]+) without", as_plain),
    (r"milliseconds: write ([0-9]+)", as_plain),
    (r"'([^']*)' for a percentage", as_string),
    (r"make it a string: '([^']*)'", as_string),
    (r"remove the spaces: '([^']*)'", as_string),
    (r"write '([^']*)'", as_string),
    (r"did you mean '([^']*)'\?", as_string),
    (r"is a string, (true|false) is a boolean", as_plain),
]


def value_errors(text: str, pointer: str) -> list[str]:
    return [f.message for f in validate_document(text, "f.yaml").errors
            if f.pointer == pointer and (f.rule.startswith("schema-") or f.rule in VALUE_RULES)]


def suggestions(message: str) -> list[str]:
    found = [write(m) for pattern, write in SUGGESTIONS for m in re.findall(pattern, message)]
    if "write true or false" in message:
        found += ["true", "false"]
    return found


def test_every_suggested_replacement_is_accepted_by_its_field() -> None:
    offered = 0
    for field, (line, prefix, pointer) in FIELDS.items():
        for value in VALUES:
            for message in value_errors(replace_line(SEED_10, line, prefix + value), pointer):
                for replacement in suggestions(message):
                    offered += 1
                    fixed = replace_line(SEED_10, line, prefix + replacement)
                    assert value_errors(fixed, pointer) == [], (field, value, message)
    assert offered >= 25  # the grid does exercise the hints


@pytest.mark.parametrize(("field", "value", "hint", "absent"), [
    # the case: maxFailureThreshold takes no percentage
    ("maxFailureThreshold", '"3"', "write 3 without quotes", "%"),
    ("maxParallel", '"3"', "write 3 without quotes for a node count, or '3%' for a percentage",
     None),
    ("maxUnavailable", '"0"', "write 0 without quotes for a node count, or '0%'", None),
    ("maxFailureThreshold", "10%", "maxFailureThreshold takes an integer, not a percentage",
     None),
    ("pauseDuration", '"3"', "write 3 without quotes", "%"),
    ("pauseDuration", "10s", "pauseDuration is in milliseconds: write 10000", None),
    ("maxParallel", "3.0", "write 3 without a decimal point", None),
])
def test_hint_names_only_what_the_field_takes(
    field: str, value: str, hint: str, absent: str | None
) -> None:
    line, prefix, pointer = FIELDS[field]
    (message,) = value_errors(replace_line(SEED_10, line, prefix + value), pointer)
    assert hint in message, message
    if absent is not None:
        assert absent not in message.split(";", 1)[1], message


@pytest.mark.parametrize(("field", "value"), [
    ("maxParallel", '"0"'),  # neither 0 nor 0% is a valid maxParallel
    ("replicas", '"150"'),  # 150 would do, but 150% would not: only the count is offered
    ("fallback", "true"),  # 'true' is not one of rollback, pause
    ("maxFailureThreshold", "1e30"),  # 10^30 is beyond int64
    ("name", "3"),  # '3' would do; a quoted boolean would not
])
def test_no_suggestion_the_field_would_refuse(field: str, value: str) -> None:
    line, prefix, pointer = FIELDS[field]
    messages = value_errors(replace_line(SEED_10, line, prefix + value), pointer)
    assert messages
    for message in messages:
        for replacement in suggestions(message):
            fixed = replace_line(SEED_10, line, prefix + replacement)
            assert value_errors(fixed, pointer) == [], (message, replacement)
    if value in ('"0"', "true", "1e30"):
        assert all(suggestions(m) == [] for m in messages), messages
    if value == '"150"':
        assert all("%" not in m.split(";", 1)[-1] for m in messages if ";" in m), messages
