"""The parse layer's bounds: size, depth, alias expansion. Never a traceback, never unbounded
memory, always a located finding."""

from __future__ import annotations

import pytest

from reconciler.policy.document import MAX_DEPTH, MAX_EXPANDED_NODES, parse_document
from reconciler.policy.validation import validate_document
from tests.policy.texts import SEED_10


def rules(text: str | bytes, **kwargs: int) -> list[tuple[str, int, int]]:
    result = validate_document(text, "f.yaml", **kwargs)  # type: ignore[arg-type]
    return [(f.rule, f.line, f.column) for f in result.errors]


def test_file_over_the_size_limit_is_rejected_before_parsing() -> None:
    big = SEED_10 + "# " + "x" * (1024 * 1024) + "\n"
    assert rules(big) == [("file-too-large", 1, 1)]
    assert rules(SEED_10, max_bytes=100) == [("file-too-large", 1, 1)]


def test_billion_laughs_is_rejected_without_expanding() -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]")
    result = validate_document("\n".join(lines) + "\n", "bomb.yaml")
    assert [(f.rule, f.line) for f in result.findings] == [("alias-bomb", 1)]
    assert str(MAX_EXPANDED_NODES) in result.findings[0].message
    assert result.obj is None


def test_moderate_alias_use_is_fine() -> None:
    text = "a: &a [x, x, x]\nb: [*a, *a, *a]\n"
    doc = parse_document(text, "f.yaml")
    assert doc.findings == [] and doc.obj == {"a": ["x"] * 3, "b": [["x"] * 3] * 3}


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5_000, 200_000])
def test_deep_flow_nesting_is_rejected_not_crashing(depth: int) -> None:
    # libyaml's composer recurses on the C stack: 200,000 levels would crash the process
    text = "[" * depth + "]" * depth
    assert rules(text) == [("too-deep", 1, MAX_DEPTH + 1)]


def test_deep_block_nesting_is_rejected() -> None:
    text = "".join(" " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 5)) + " " * 200 + "v: 1\n"
    found = rules(text)
    assert found and found[0][0] == "too-deep"


def test_nesting_below_the_limit_is_accepted() -> None:
    text = "a: " + "[" * 50 + "]" * 50 + "\n"
    doc = parse_document(text, "f.yaml")
    assert doc.findings == []


def test_many_flow_collections_still_parse() -> None:
    # more brackets than the cheap bound allows, but shallow: the precise check lets it through
    text = "items:\n" + "".join(f"  - {{replicas: {i}, pauseDuration: {{}}}}\n" for i in range(600))
    doc = parse_document(text, "f.yaml")
    assert doc.findings == [] and len(doc.obj["items"]) == 600


def test_syntax_error_is_located_and_explained() -> None:
    result = validate_document("a: [1, 2\nb: 3\n", "f.yaml")
    (finding,) = result.findings
    assert (finding.rule, finding.line) == ("yaml-syntax", 2)
    assert "flow sequence that starts at line 1" in finding.message


def test_duplicate_keys_are_all_reported() -> None:
    result = validate_document("a: 1\nb: 2\na: 3\nb: 4\n", "f.yaml")
    dupes = [(f.line, f.pointer) for f in result.findings if f.rule == "duplicate-key"]
    assert dupes == [(3, "/a"), (4, "/b")]


def test_pointer_escapes_slash_and_tilde() -> None:
    text = SEED_10.replace("  name: cluster-operator\n",
                           "  name: cluster-operator\n  labels:\n    a/b~c: 1\n")
    (finding,) = validate_document(text, "f.yaml").errors
    assert finding.pointer == "/metadata/labels/a~1b~0c"
    assert (finding.line, finding.column) == (6, 12)


def test_non_utf8_reports_the_byte_position() -> None:
    data = b"a: 1\nb: caf\xe9\n"
    assert rules(data) == [("not-utf8", 2, 7)]


def test_text_with_a_lone_surrogate_is_not_utf8() -> None:
    assert rules("a: 1\nb: x\udce9\n") == [("not-utf8", 2, 5)]
