"""Hostile sizes through ``reconciler validate`` as a child process (address-space limit, hang
bound): every finding is located, in linear time overall, and the command ends with its exit
code. The bound is generous (60 s); bench/validate measures how fast it really is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.policy.commands import validate_bounded
from tests.policy.texts import SEED_10

pytestmark = pytest.mark.slow  # CLI runs as child processes: minutes on a loaded machine

FINDING = re.compile(
    r"^policy\.yaml:(\d+):(\d+): (error|warning|info): (.*) \[([a-z0-9-]+)\]$")


def findings(stdout: str) -> list[tuple[int, int, str, str, str]]:
    """The errors and warnings (SEED_10 has only spec.driver: its info says what it leaves
    out, docs/validation.md#severities)."""
    parsed = []
    for line in stdout.splitlines():
        match = FINDING.match(line)
        assert match, line
        if match[3] != "info":
            parsed.append((int(match[1]), int(match[2]), match[3], match[4], match[5]))
    return parsed


def write(tmp_path: Path, text: str) -> bytes:
    (tmp_path / "policy.yaml").write_text(text)
    return (tmp_path / "policy.yaml").read_bytes()


def test_forty_thousand_unknown_keys_validate_and_each_is_located_at_its_key(
    tmp_path: Path,
) -> None:
    count = 40_000
    first = SEED_10.count("\n") + 1
    before = write(tmp_path, SEED_10 + "".join(f"unknown{i}: value{i}\n" for i in range(count)))
    assert len(before) > 500_000  # the file: 549 KB took 93 s before
    result = validate_bounded(tmp_path, "policy.yaml")
    assert result.returncode == 1, result.stderr
    found = findings(result.stdout)
    assert [(line, column, rule) for line, column, _, _, rule in found] == [
        (first + i, 1, "unknown-field") for i in range(count)]
    assert found[-1][3].startswith(f"unknown field 'unknown{count - 1}' at the top level")
    assert f"{count} error(s)" in result.stderr
    assert (tmp_path / "policy.yaml").read_bytes() == before


def test_forty_thousand_aliases_are_each_located_at_the_alias(tmp_path: Path) -> None:
    count = 40_000
    text = SEED_10.replace("  name: cluster-operator\n", "  name: cluster-operator\n"
                           "  annotations:\n    a: &flag true\n"
                           + "".join(f"    b{i}: *flag\n" for i in range(count)))
    write(tmp_path, text)
    result = validate_bounded(tmp_path, "policy.yaml")
    assert result.returncode == 1, result.stderr
    found = [f for f in findings(result.stdout) if f[0] > 6]
    assert [(line, column, rule) for line, column, _, _, rule in found] == [
        (7 + i, len(f"    b{i}: ") + 1, "schema-type") for i in range(count)]
    assert all("alias *flag, anchored as &flag at line 6" in f[3] for f in found)


def test_an_integer_of_a_hundred_thousand_digits_is_an_error_at_the_value(tmp_path: Path) -> None:
    lines = SEED_10.splitlines(keepends=True)
    lines[24] = "      maxFailureThreshold: " + "7" * 100_000 + "\n"
    before = write(tmp_path, "".join(lines))
    result = validate_bounded(tmp_path, "policy.yaml")
    assert result.returncode == 1, result.stderr
    ((line, column, severity, message, rule),) = findings(result.stdout)
    assert (line, column, severity, rule) == (25, 28, "error", "integer-range")
    assert "(100000 characters)" in message and "signed 64-bit" in message
    assert "Traceback" not in result.stderr
    assert (tmp_path / "policy.yaml").read_bytes() == before


@pytest.mark.parametrize(("line", "written", "rule", "column"), [
    (23, '      maxParallel: "{digits}%"', "percent-range", 20),
    (14, "        - replicas: {digits}%", "percent-range", 21),
    (23, '      maxParallel: "{digits}"', "percent-format", 20),
    (17, '          pauseDuration: "{digits}s"', "schema-type", 26),
    (25, '      maxFailureThreshold: "{digits}"', "schema-type", 28),
])
def test_digit_strings_of_thousands_of_digits_are_judged_at_the_value(
    tmp_path: Path, line: int, written: str, rule: str, column: int
) -> None:
    # Python converts at most 4300 digits to an int: a hint or a percentage that converted
    # them would end in a traceback
    lines = SEED_10.splitlines(keepends=True)
    lines[line - 1] = written.format(digits="9" * 5000) + "\n"
    write(tmp_path, "".join(lines))
    result = validate_bounded(tmp_path, "policy.yaml")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    found = findings(result.stdout)
    assert (line, column, "error", rule) in {(f[0], f[1], f[2], f[4]) for f in found}, found
    assert all(len(f[3]) < 400 for f in found)  # the value is shortened in messages
