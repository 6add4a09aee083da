"""Int-or-percent quantities of ``upgradePolicy`` (docs/policy.md#how-the-numbers-resolve) and their
resolution.

A percentage is digits followed by ``%`` and nothing else; percentages round up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PERCENT_RE = re.compile(r"^[0-9]+%\Z")
#: Significant digits of the largest int64; a longer digit string is beyond every field's range.
_INT64_DIGITS = 19
#: What a digit string too long to convert counts as: more than any int64, far beyond 100%.
BEYOND_INT64 = 10**_INT64_DIGITS


def digits_value(digits: str) -> int:
    """The number a string of ASCII digits names, or BEYOND_INT64 when it has more significant
    digits than any int64 (Python refuses to convert more than 4300 digits at all)."""
    significant = digits.lstrip("0") or "0"
    return BEYOND_INT64 if len(significant) > _INT64_DIGITS else int(significant)


@dataclass(frozen=True, slots=True)
class Quantity:
    """An absolute count or a percentage of some base."""

    value: int
    percent: bool

    def resolve(self, base: int, *, minimum: int = 0) -> int:
        """Absolute value against ``base`` (percent rounds up), never below ``minimum``."""
        # integer ceiling: exact for any size (a float loses digits past 2**53 and overflows
        # past ~10**308, and a CR patched around validation can carry such a percentage)
        resolved = -(-self.value * base // 100) if self.percent else self.value
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
        return Quantity(digits_value(raw[:-1]), percent=True)
    raise ValueError(f"expected an integer or a percentage string like '50%', got {raw!r}")
