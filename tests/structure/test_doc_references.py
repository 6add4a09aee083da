"""Every reference to the documentation names a page and a section that exist.

Code, ``--help`` texts, schemas, manifests, examples and tests cite the rules they follow as
``docs/<page>.md#<section>``; Markdown links to a page (``[...](rollout.md#steps)``) are checked
the same way. A section is the GitHub anchor of a heading of that page. The contract lives in
these pages, so a citation of a document outside the repository (by its section numbers) fails
too.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

DOC_REF = re.compile(r"(?<![\w/.-])(docs/[\w.-]+?\.md)(?:#([\w-]+))?")
MD_LINK = re.compile(r"\]\(([^)\s#]*?\.md)?(?:#([^)\s]*))?\)")
OUTSIDE_CONTRACT = re.compile(r"\bSP" r"EC\b(?!_)(?:'s)?(?:[ \t]*(?:sections?|§))?"
                              r"[ \t]*(?:\d+(?:\.\d+)*)?")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
FENCE = re.compile(r"^ {0,3}(```|~~~)")


def tracked_text_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return sorted({name for name in listed.splitlines()
                   if name and (ROOT / name).is_file() and not (ROOT / name).is_symlink()})


def read_text(name: str) -> str | None:
    try:
        return (ROOT / name).read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = text.lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(text: str) -> frozenset[str]:
    """The anchors of a Markdown text's headings; a repeated heading gets -1, -2, ..."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    in_fence = False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        match = None if in_fence else HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


@cache
def anchors(page: str) -> frozenset[str] | None:
    """The anchors of a Markdown page of the repository, None when there is no such page."""
    text = read_text(page) if (ROOT / page).is_file() else None
    return None if text is None else anchors_of(text)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _check(where: str, page: str, anchor: str | None) -> str | None:
    known = anchors(page)
    if known is None:
        return f"{where}: {page} does not exist"
    if anchor and anchor not in known:
        return f"{where}: {page} has no section #{anchor}"
    return None


def broken_references() -> list[str]:
    broken: list[str] = []
    for name in tracked_text_files():
        if name == THIS:
            continue
        text = read_text(name)
        if text is None:
            continue
        if "docs/" in text:
            for match in DOC_REF.finditer(text):
                problem = _check(f"{name}:{_line(text, match.start())}", match.group(1),
                                 match.group(2))
                if problem:
                    broken.append(problem)
        if name.endswith(".md"):
            folder = Path(name).parent
            for match in MD_LINK.finditer(text):
                target, anchor = match.group(1), match.group(2)
                if target and re.match(r"[a-z][a-z0-9+.-]*:", target):
                    continue  # a URL, not a page of the repository
                page = (folder / target).as_posix() if target else name
                page = str(Path(page)) if not page.startswith("..") else \
                    (ROOT / folder / target).resolve().relative_to(ROOT).as_posix()
                problem = _check(f"{name}:{_line(text, match.start())}", page, anchor)
                if problem:
                    broken.append(problem)
    return broken


def outside_citations() -> list[str]:
    found: list[str] = []
    for name in tracked_text_files():
        if name == THIS:
            continue
        text = read_text(name)
        if text is None or "SP" "EC" not in text:
            continue
        found += [f"{name}:{_line(text, m.start())}: {m.group(0).strip()!r}"
                  for m in OUTSIDE_CONTRACT.finditer(text)]
    return found


def test_slugs_are_githubs() -> None:
    assert slug("Fallback, rollback and pause") == "fallback-rollback-and-pause"
    assert slug("A fleet of clusters: `clusters.<name>`, `windows`, `promotion`") == \
        "a-fleet-of-clusters-clustersname-windows-promotion"
    assert slug("What the vendor operator's install looks like") == \
        "what-the-vendor-operators-install-looks-like"
    assert slug("Every forge's webhook (issue 33)") == "every-forges-webhook-issue-33"


def test_duplicate_headings_get_numbered_anchors() -> None:
    text = "# Page\n## Steps\n```\n# not a heading\n```\n### Steps\n## Steps\n"
    assert anchors_of(text) == {"page", "steps", "steps-1", "steps-2"}
    assert anchors("docs/no-such-page.md") is None


def test_every_docs_reference_names_a_page_and_section_that_exist() -> None:
    assert broken_references() == []


def test_the_contract_is_cited_from_the_repositorys_own_docs() -> None:
    assert outside_citations() == []
