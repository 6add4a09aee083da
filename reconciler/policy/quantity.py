"""Int-or-percent quantities of ``upgradePolicy`` (SPEC section 3) and their resolution.

A percentage is digits followed by ``%`` and nothing else; percentages round up.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

PERCENT_RE = re.compile(r"^[0-9]+%$")


@dataclass(frozen=True, slots=True)
class Quantity:
    """An absolute count or a percentage of some base."""

    value: int
    percent: bool

    def resolve(self, base: int, *, minimum: int = 0) -> int:
        """Absolute value against ``base`` (percent rounds up), never below ``minimum``."""
        resolved = math.ceil(self.value * base / 100) if self.percent else self.value
        return max(resolved, minimum)

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


def parse_quantity(raw: object) -> Quantity:
    """Parse a validated int-or-percent value. Raises ValueError for anything else.

    bool is rejected explicitly: in Python it is an int, in the policy it is a mistake.
    """
    if isinstance(raw, bool):
        raise ValueError(f"expected an integer or a percentage string, got boolean {raw!r}")
    if isinstance(raw, int):
        return Quantity(raw, percent=False)
    if isinstance(raw, str) and PERCENT_RE.match(raw):
        return Quantity(int(raw[:-1]), percent=True)
    raise ValueError(f"expected an integer or a percentage string like '50%', got {raw!r}")
