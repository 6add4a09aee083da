"""Numeric command-line options with finite, documented bounds.

``click.FloatRange`` lets ``nan`` through (every comparison with it is false) and ``inf`` when no
maximum is set, and an unbounded ``IntRange`` lets ``--nodes 1000000000`` start a run that ends
in a MemoryError a minute later. Every numeric option of every command uses these types: a
value outside the bounds is a usage error (exit 2) that states them, and ``--help`` shows them.
"""

from __future__ import annotations

import math
from typing import Any

import click

#: Durations given in seconds: a year is far beyond any install, gate or timeout, and stays
#: below what ``threading`` accepts as a timeout.
MAX_SECONDS = 365 * 24 * 3600.0
#: Python refuses to parse integers of more than 4300 digits; a few more than the largest
#: bound are all a number needs.
_MAX_INT_TEXT = 40


class FiniteFloat(click.FloatRange):
    """A finite float within ``[min, max]`` (``nan``, ``inf`` and ``1e309`` are refused)."""

    name = "number"

    def __init__(self, min: float, max: float = MAX_SECONDS, *, min_open: bool = False) -> None:
        super().__init__(min=min, max=max, min_open=min_open)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        if isinstance(value, str) and len(value) > _MAX_INT_TEXT:
            self.fail(f"{value[:_MAX_INT_TEXT]!r}... is not a number of sensible length",
                      param, ctx)
        number = float(super(click.FloatRange, self).convert(value, param, ctx))
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number; expected {self._describe_range()}",
                      param, ctx)
        return super().convert(number, param, ctx)


class BoundedInt(click.IntRange):
    """An integer within ``[min, max]``; a huge number is refused before it is parsed."""

    def __init__(self, min: int, max: int) -> None:
        super().__init__(min=min, max=max)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        if isinstance(value, str) and len(value.strip()) > _MAX_INT_TEXT:
            self.fail(f"{value.strip()[:_MAX_INT_TEXT]!r}... is not in the range "
                      f"{self._describe_range()}", param, ctx)
        return super().convert(value, param, ctx)
