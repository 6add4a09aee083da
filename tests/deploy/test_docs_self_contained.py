"""The documentation speaks of the project only: what it cites is in the repository (a file, a
commit, a command), never a folder on the machine that wrote it or the work session it was
written in."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP_DIRS = ("bench", "deploy", "docs", "examples-repo", "reconciler", "schemas", "scripts",
            "tests")
# a developer's or a benchmark machine's own folders (examples under /tmp, /var, /etc are fine)
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home|Users)/\S*")
WHO_WROTE_IT = re.compile(
    r"\b(?:session \d+|(?:this|that|last|previous|next|earlier|later) session)\b", re.IGNORECASE)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
REPO_PATH = re.compile(rf"`((?:{'|'.join(TOP_DIRS)})/[\w./-]*[\w/])`")


def markdown_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in sorted(set(listed.stdout.split()))
            if (ROOT / name).is_file()]


DOCS = markdown_files()


def _located(path: Path, text: str, offset: int) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, offset) + 1}"


def test_docs_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in DOCS}
    assert {"README.md", "docs/rollout.md", "docs/operations.md", "deploy/README.md"} <= names


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_doc_cites_no_folder_of_the_machine_that_wrote_it(path: Path) -> None:
    text = path.read_text()
    found = [f"{_located(path, text, m.start())}: {m.group(0)}"
             for m in MACHINE_PATH.finditer(text)]
    assert found == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_doc_names_commits_not_the_session_that_wrote_them(path: Path) -> None:
    text = path.read_text()
    found = [f"{_located(path, text, m.start())}: {m.group(0)}"
             for m in WHO_WROTE_IT.finditer(text)]
    assert found == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_file_a_doc_links_or_names_is_in_the_repository(path: Path) -> None:
    text = path.read_text()
    missing = []
    for m in LINK.finditer(text):
        target = m.group(1)
        if not re.match(r"[a-z][a-z0-9+.-]*:", target) and not (path.parent / target).exists():
            missing.append(f"{_located(path, text, m.start())}: {target}")
    for m in REPO_PATH.finditer(text):
        if not (ROOT / m.group(1)).exists():
            missing.append(f"{_located(path, text, m.start())}: {m.group(1)}")
    assert missing == []


def test_the_checks_find_what_they_look_for() -> None:
    assert MACHINE_PATH.search("JSON per run in `/work/bench-runs/` on the machine")
    assert not MACHINE_PATH.search("file:///tmp/capture/remote.git and /var/cache/x")
    assert WHO_WROTE_IT.search("1. Session 4's code (cordon ahead)")
    assert WHO_WROTE_IT.search("the runs of this session")
    assert not WHO_WROTE_IT.search("`control_plane` (session): one control plane")
    assert REPO_PATH.search("see `bench/results/run-aj.json`")
