"""What one step of a sync pass returns (Flux's error kinds, in this project's words).

``Accepted`` carries the step's value on to the next step. ``Rejected`` is Flux's *stalling*: a
person must fix the commit; the pass stops, nothing is applied, and the same commit is not tried
again (its findings go to the log, an Event and the status snapshot). ``NothingToApply`` stops
the pass without a rejection (the commit holds no policy for this cluster; the object is kept).
Flux's *waiting* (retry after a delay) is an exception here: a ``KubeError`` or ``GitOpsError``
from an adapter, which the worker retries with back-off.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from reconciler.policy.findings import Finding

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Accepted(Generic[T]):
    value: T


@dataclass(frozen=True, slots=True)
class Rejected:
    """The commit is not applied; ``findings`` say where and why (the first is the reason's)."""

    reason: str
    findings: tuple[Finding, ...]
    #: validation's warnings found on the way (logged, not part of the rejection)
    warnings: tuple[Finding, ...] = ()

    @classmethod
    def of(cls, reason: str, findings: Iterable[Finding]) -> Rejected:
        return cls(reason, tuple(findings))

    @classmethod
    def at(cls, file: str, rule: str, message: str) -> Rejected:
        """A rejection with one finding at the top of ``file``."""
        return cls(message, (finding(file, rule, message),))


@dataclass(frozen=True, slots=True)
class NothingToApply:
    """The pass ends without applying or rejecting; ``message`` says why (logged once)."""

    message: str


@dataclass(frozen=True, slots=True)
class Held:
    """The commit is valid but waits (docs/configuration.md#promotion ``hold``): nothing is applied,
    and the same head is judged again at ``recheck_at`` (wall-clock seconds; None: when the
    upstream's snapshot changes) or when anything changes, and applied then without a new commit."""

    reason: str
    #: what the status snapshot's ``promotion.held`` shows
    held: dict[str, Any]
    recheck_at: float | None = None


Outcome = Accepted[T] | Rejected | NothingToApply | Held


def finding(file: str, rule: str, message: str) -> Finding:
    """An error at the top of ``file`` (or of ``commit <sha>``): for refusals without a line."""
    return Finding(file=file, line=1, column=1, pointer="", rule=rule, severity="error",
                   message=message)
