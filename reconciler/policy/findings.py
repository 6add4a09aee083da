"""Findings: what validation reports, each located at ``file:line:column`` and a JSON pointer."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

#: ``error``: refused (nothing of the file is applied); ``warning``: applied, but probably not
#: what was meant; ``info``: applied as written, worth knowing (docs/validation.md#severities)
Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem in one file. ``line`` and ``column`` are 1-based; ``pointer`` is RFC 6901."""

    file: str
    line: int
    column: int
    pointer: str
    rule: str
    severity: Severity
    message: str

    def as_dict(self) -> dict[str, Any]:
        """Exactly the keys of ``reconciler validate --format json``."""
        return asdict(self)

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    @property
    def is_warning(self) -> bool:
        return self.severity == "warning"

    @property
    def is_info(self) -> bool:
        return self.severity == "info"


@dataclass(slots=True)
class ValidationResult:
    """Findings of one file, and its parsed content as plain dict/list data (None if unparsable).

    ``obj`` is what the daemon applies when ``ok``; it holds no ruamel types.
    """

    file: str
    findings: list[Finding] = field(default_factory=list)
    obj: Any = None

    @property
    def ok(self) -> bool:
        return not any(f.is_error for f in self.findings)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.is_error]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.is_warning]

    @property
    def infos(self) -> list[Finding]:
        return [f for f in self.findings if f.is_info]


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Source order, like a compiler: by file, line, column, then rule."""
    return sorted(findings, key=lambda f: (f.file, f.line, f.column, f.rule, f.pointer))


def escape_pointer_token(token: str | int) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def join_pointer(parent: str, token: str | int) -> str:
    return f"{parent}/{escape_pointer_token(token)}"


def split_pointer(pointer: str) -> list[str]:
    if not pointer:
        return []
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:]]
