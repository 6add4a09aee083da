"""Typed view of a validated ``spec.driver.upgradePolicy`` with the docs/policy.md#the-fields
defaults.

Build it only from a policy that passed validation; it does not re-check what validation checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from reconciler.policy.quantity import Quantity, parse_quantity

Fallback = Literal["rollback", "pause"]


@dataclass(frozen=True, slots=True)
class UpgradeStep:
    replicas: Quantity
    #: milliseconds to wait after the step completes; None means a manual gate (pauseDuration
    #: left out)
    pause_ms: int | None

    @property
    def is_gate(self) -> bool:
        return self.pause_ms is None


# The values a real install of the vendor's operator carries (docs/policy.md#the-fields
# and docs/policy.md#the-fields).
DEFAULT_MAX_PARALLEL = Quantity(100, percent=True)
DEFAULT_MAX_UNAVAILABLE = Quantity(0, percent=True)
DEFAULT_MAX_FAILURE_THRESHOLD = 5
DEFAULT_FALLBACK: Fallback = "pause"


@dataclass(frozen=True, slots=True)
class UpgradePolicy:
    enable_rollout: bool = False
    steps: tuple[UpgradeStep, ...] = ()
    pause: bool = False
    max_parallel: Quantity = DEFAULT_MAX_PARALLEL
    max_unavailable: Quantity = DEFAULT_MAX_UNAVAILABLE
    max_failure_threshold: int = DEFAULT_MAX_FAILURE_THRESHOLD
    fallback: Fallback = DEFAULT_FALLBACK

    @classmethod
    def from_spec(cls, raw: Mapping[str, Any] | None) -> UpgradePolicy:
        raw = raw or {}
        steps = tuple(
            UpgradeStep(
                replicas=parse_quantity(step["replicas"]),
                pause_ms=step.get("pauseDuration") if isinstance(step.get("pauseDuration"), int)
                else None,
            )
            for step in raw.get("upgradeSteps") or ()
        )
        written = raw.get("fallback")
        fallback: Fallback = written if written in ("rollback", "pause") else DEFAULT_FALLBACK
        return cls(
            enable_rollout=bool(raw.get("enableRollout", False)),
            steps=steps,
            pause=bool(raw.get("pause", False)),
            max_parallel=parse_quantity(raw["maxParallel"]) if "maxParallel" in raw
            else DEFAULT_MAX_PARALLEL,
            max_unavailable=parse_quantity(raw["maxUnavailable"]) if "maxUnavailable" in raw
            else DEFAULT_MAX_UNAVAILABLE,
            max_failure_threshold=int(raw.get("maxFailureThreshold",
                                              DEFAULT_MAX_FAILURE_THRESHOLD)),
            fallback=fallback,
        )

    def step_targets(self, total: int) -> list[int]:
        """Cumulative node targets per step against ``total`` rollout nodes, capped at it.

        A target not above the previous one is kept as is: that step adds no nodes but its pause
        still applies (docs/policy.md#how-the-numbers-resolve).
        """
        return [min(step.replicas.resolve(total, minimum=1), total) for step in self.steps]

    def batch_max_parallel(self, batch_size: int) -> int:
        """maxParallel against the current batch's size, rounded up, at least 1."""
        return self.max_parallel.resolve(batch_size, minimum=1)

    def resolved_max_unavailable(self, total: int) -> int:
        return self.max_unavailable.resolve(total)
