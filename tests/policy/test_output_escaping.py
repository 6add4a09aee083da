"""Terminal and annotation output (issue 15, item 6): control characters from a file's content or
its name (CR, LF, ESC sequences, C1 controls, bidi overrides) never reach a terminal or a CI log
raw, in every output format of ``validate``, in ``simulate`` and in ``status``; GitHub workflow
commands escape ``%``, CR, LF, and ``:`` ``,`` in properties."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from reconciler.cli.validate import format_github, format_json, format_text
from reconciler.files import printable
from reconciler.policy.findings import Finding
from tests.policy.commands import git, reconciler
from tests.policy.texts import EXAMPLES

LAB = "clusters/lab-10/cluster-operator.yaml"
#: every character that must never be printed raw (tab is harmless and kept)
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: what a hostile value carries: a colour, a line rewrite, a screen clear, an 8-bit CSI, a
#: right-to-left override, a forged second annotation
HOSTILE = "\x1b[31mred\x1b[0m\rover\x1b[2J\x9b1m\u202eevil\n::error file=x::forged"


def _no_raw(text: str) -> None:
    lines = text.splitlines()  # splitlines also splits at \r, \x1c-\x1e, \x85, \u2028/9
    assert text.count("\n") == len(lines), f"a line break inside a line in {text!r}"
    assert not RAW.search(text), f"raw control character in {text!r}"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "policy"
    shutil.copytree(EXAMPLES, root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial policy")
    return root


def _hostile_value(repo: Path) -> None:
    """maxParallel set to a YAML double-quoted string holding HOSTILE's characters."""
    path = repo / LAB
    escaped = json.dumps(HOSTILE)  # a JSON string is a valid YAML double-quoted string
    path.write_text(path.read_text().replace("maxParallel: 100%", f"maxParallel: {escaped}"))


def test_printable_escapes_every_control_character_visibly() -> None:
    assert printable("plain text, tab\tkept; ünïcödé ✓") == "plain text, tab\tkept; ünïcödé ✓"
    assert printable(HOSTILE) == ("\\e[31mred\\e[0m\\rover\\e[2J\\x9b1m\\u202eevil\\n"
                                  "::error file=x::forged")
    for code in [*range(0x20), 0x7f, *range(0x80, 0xa0), 0x2028, 0x2029, 0x202e, 0x2066]:
        if code != 0x09:
            assert not RAW.search(printable(chr(code))), hex(code)


def not_info(stdout: str) -> list[str]:
    """The text or github lines that are not infos (the example policy, with only spec.driver,
    gets one: docs/validation.md#severities)."""
    return [line for line in stdout.splitlines()
            if ": info: " not in line and not line.startswith("::notice ")]


@pytest.mark.parametrize("output_format", ["text", "github", "json"])
def test_validate_escapes_control_characters_from_file_content(
    repo: Path, output_format: str
) -> None:
    _hostile_value(repo)
    result = reconciler(repo, "validate", "--format", output_format, LAB)
    assert result.returncode == 1, result.stdout + result.stderr
    _no_raw(result.stdout)
    _no_raw(result.stderr)
    lines = not_info(result.stdout)
    if output_format == "json":
        (finding,) = [f for f in json.loads(result.stdout) if f["severity"] != "info"]
        assert HOSTILE.split("\n")[0] in finding["message"], "json keeps the value as it is"
        assert "\\u001b" in result.stdout and "\\u009b" in result.stdout
        assert "\\u202e" in result.stdout
    else:
        (line,) = lines
        assert "\\e[31mred\\e[0m\\rover\\e[2J\\x9b1m\\u202eevil" in line
    if output_format == "github":
        (line,) = lines
        assert line.startswith(f"::error file={LAB},line=31,col=20,title=schema-type::") or \
            line.startswith(f"::error file={LAB},line=31,col=20,title=percent-format::"), line
        # the forged command stays inside this annotation's message, on its line
        assert line.endswith("\\n::error file=x::forged'"), line


@pytest.mark.parametrize("output_format", ["text", "github", "json"])
def test_validate_escapes_control_characters_in_file_names(
    repo: Path, output_format: str
) -> None:
    name = "evil\x1b[2J\rname,with:colon\u202e%\n.yaml"
    (repo / "clusters/lab-10" / name).write_text("kind: [\n")
    result = reconciler(repo, "validate", "--format", output_format, "clusters/lab-10")
    assert result.returncode == 1, result.stdout + result.stderr
    _no_raw(result.stdout)
    if output_format == "text":
        assert not_info(result.stdout)[0].startswith(
            "clusters/lab-10/evil\\e[2J\\rname,with:colon\\u202e%\\n.yaml:2:1: error: ")
    elif output_format == "github":
        assert not_info(result.stdout)[0].startswith(
            "::error file=clusters/lab-10/evil\\e[2J\\rname%2Cwith%3Acolon\\u202e%25\\n.yaml,"
            "line=2,col=1,title=yaml-syntax::")
    else:
        files = {f["file"] for f in json.loads(result.stdout) if f["severity"] != "info"}
        assert files == {f"clusters/lab-10/{name}"}


def test_github_format_follows_the_workflow_command_rules() -> None:
    finding = Finding("a:b,c%.yaml", 3, 4, "", "rule:x,y", "warning", "100% done\r\nnext: a,b")
    assert format_github([finding]) == (
        "::warning file=a%3Ab%2Cc%25.yaml,line=3,col=4,title=rule%3Ax%2Cy::"
        "100%25 done\\r\\nnext: a,b\n")
    assert format_text([finding]) == (
        "a:b,c%.yaml:3:4: warning: 100% done\\r\\nnext: a,b [rule:x,y]\n")
    text = format_json([Finding("f\x9b.yaml", 1, 1, "", "r", "error", "m\u2028\x1b")])
    assert "\\u009b" in text and "\\u2028" in text and "\\u001b" in text
    assert json.loads(text)[0]["message"] == "m\u2028\x1b"


def test_simulate_escapes_what_it_echoes(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("driver:\n  payload: {version: 2.0.0.1}\n  upgradePolicy:\n"
                      f"    maxParallel: {json.dumps(HOSTILE)}\n")
    result = reconciler(tmp_path, "simulate", str(policy), "--nodes", "3",
                        "--from-version", "1.0.0.0")
    assert result.returncode == 2, result.stderr
    assert "\\e[31mred" in result.stderr
    _no_raw(result.stderr)
    good = tmp_path / "good.yaml"
    good.write_text("driver:\n  payload: {version: 2.0.0.1}\n")
    result = reconciler(tmp_path, "simulate", str(good), "--nodes", "3",
                        "--from-version", "1.0\x1b[2J\r\u202e")
    assert result.returncode == 2, result.stderr  # no image tag: refused, echoed escaped
    assert "--from-version: expected an image tag" in result.stderr
    _no_raw(result.stdout)
    _no_raw(result.stderr)


def test_status_prints_snapshot_text_escaped_and_never_as_markup(
    repo: Path, tmp_path: Path
) -> None:
    snapshot = repo / "status/lab-10.yaml"
    hostile = json.dumps("[bold red]gate[/bold red] " + HOSTILE + " [/nope]")
    snapshot.write_text(snapshot.read_text().replace(
        "message: waiting at the manual gate after step 1", f"message: {hostile}"))
    git(repo, "commit", "-qam", "status with control characters")
    result = reconciler(repo, "status", "--cluster", "lab-10", "--repo", str(repo),
                        "--state-dir", str(tmp_path / "state"), env={"COLUMNS": "400"})
    assert result.returncode == 0, result.stderr
    _no_raw(result.stdout)
    assert "[bold red]gate[/bold red] \\e[31mred" in result.stdout
    assert "[/nope]" in result.stdout


@pytest.mark.parametrize("output_format", ["text", "github", "json"])
def test_a_file_name_that_is_not_utf8_is_shown_not_a_traceback(
    tmp_path: Path, output_format: str
) -> None:
    (tmp_path / "files").mkdir()
    with open(bytes(tmp_path / "files") + b"/bad\xff\x1b.yaml", "w") as handle:
        handle.write("kind: [\n")
    result = reconciler(tmp_path, "validate", "--format", output_format, "files")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    _no_raw(result.stdout)
    if output_format == "json":
        assert json.loads(result.stdout)[0]["file"] == "files/bad\udcff\x1b.yaml"
    else:
        assert "files/bad\\xff\\e.yaml" in result.stdout
