"""Commit messages and trailers, and how the reconciler recognises its own commits.

Pure: the message is text in, text out. The reconciler marks every commit it makes with the
``Reconciler-Commit: true`` trailer (and a dedicated author identity, for people reading the log);
the trailer alone decides, so changing the identity in the settings never makes old commits look
like a person's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

OWN_COMMIT_TRAILER = "Reconciler-Commit"
CHANGE_ID_TRAILER = "Reconciler-Change-Id"
SOURCE_COMMIT_TRAILER = "Source-Commit"
ROLLOUT_STEP_TRAILER = "Rollout-Step"
PHASE_TRAILER = "Phase"
#: marks a ``mode: auto`` promotion commit (docs/configuration.md#promotion): the reconciler wrote
#: it, but it is a policy change like a person's (applied), so it carries no ``Reconciler-Commit:
#: true``
PROMOTION_TRAILER = "Reconciler-Promotion"
#: marks an operator-mode maintenance-window pause (``pause``) or its undoing (``resume``),
#: applied like a person's commit; how the sync knows after a restart that a pause is its own
WINDOW_TRAILER = "Reconciler-Window"

_TRAILER_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]*):\s*(.*)$")


@dataclass(frozen=True, slots=True)
class Identity:
    name: str = "gpu-gitops-reconciler"
    email: str = "gpu-gitops-reconciler@localhost"


@dataclass(frozen=True, slots=True)
class Person:
    name: str
    email: str

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


@dataclass(frozen=True, slots=True)
class CommitInfo:
    sha: str
    author: Person
    committer: Person
    authored_at: int
    committed_at: int
    message: str

    @property
    def subject(self) -> str:
        return self.message.split("\n", 1)[0]

    @property
    def trailers(self) -> dict[str, str]:
        return parse_trailers(self.message)

    @property
    def is_own(self) -> bool:
        return is_own_message(self.message)


def parse_trailers(message: str) -> dict[str, str]:
    """Trailers of the message's last paragraph (``Key: value`` lines); the last value wins.

    A message of a single paragraph has no trailers (that paragraph is the subject).
    """
    paragraphs = [p for p in re.split(r"\n\s*\n", message.strip()) if p.strip()]
    if len(paragraphs) < 2:
        return {}
    trailers: dict[str, str] = {}
    last_key: str | None = None
    for line in paragraphs[-1].splitlines():
        if line[:1].isspace() and last_key is not None:
            trailers[last_key] += " " + line.strip()
            continue
        match = _TRAILER_RE.match(line)
        if match is None:
            return {}
        last_key = match.group(1)
        trailers[last_key] = match.group(2).strip()
    return trailers


def is_own_message(message: str) -> bool:
    return parse_trailers(message).get(OWN_COMMIT_TRAILER, "").lower() == "true"


def format_message(
    subject: str, body: str | None = None, trailers: Iterable[tuple[str, str]] = ()
) -> str:
    """A commit message: one-line subject, optional body, trailers in the last paragraph."""
    subject = " ".join(subject.split())
    parts = [subject]
    if body and body.strip():
        parts.append(body.strip())
    lines = [f"{key}: {' '.join(value.split())}" for key, value in trailers]
    if lines:
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def own_trailers(change_id: str, extra: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    return [*extra, (OWN_COMMIT_TRAILER, "true"), (CHANGE_ID_TRAILER, change_id)]


def applied_trailers(change_id: str, extra: Sequence[tuple[str, str]] = ()
                     ) -> list[tuple[str, str]]:
    """Trailers of a commit of ours that is a policy change (a ``mode: auto`` promotion, a
    window pause): found again by its change id (never committed twice), and not one of the
    reconciler's own commits (the sync applies it)."""
    return [*extra, (CHANGE_ID_TRAILER, change_id)]
