"""``status.upgradeStatus`` (SPEC 4.1): field names, timestamps and condition bookkeeping.

The planner works on a plain dict shaped exactly like the CR status, so the controller writes
what it gets and a restarted planner reads back everything it needs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

PHASE_IDLING: Final = "Idling"
PHASE_PROGRESSING: Final = "Progressing"
PHASE_TERMINATING: Final = "Terminating"
PHASE_DISABLING: Final = "Disabling"
PHASE_DISABLED: Final = "Disabled"
ACTIVE_PHASES: Final = frozenset({PHASE_PROGRESSING, PHASE_TERMINATING, PHASE_DISABLING})

STEP_INIT: Final = "StepUpgradeInit"
STEP_UPGRADE: Final = "StepUpgrade"
STEP_PAUSED: Final = "StepPaused"
STEP_READY: Final = "StepReady"
STEP_COMPLETED: Final = "Completed"

# Condition types. lastTransitionTime of PROGRESSING is the start of the current batch epoch
# (step start or resume after a fallback); failures are counted per epoch.
COND_PROGRESSING: Final = "Progressing"
COND_MANUAL_GATE: Final = "ManualGate"
COND_BATCH_FAILED: Final = "BatchFailed"
COND_ROLLED_BACK: Final = "RolledBack"

REASON_THRESHOLD: Final = "FailureThresholdReached"
REASON_DISABLED: Final = "RolloutDisabled"

INNER_FIELDS: Final = (
    "lastPodSpecRevision",
    "upgradingPodSpecRevision",
    "currentStepIndex",
    "currentUpgradeReplicas",
    "currentUpgradeReadyReplicas",
    "currentFailureRetry",
    "currentStepState",
    "totalUpgradeReplicas",
    "totalUpgradeReadyReplicas",
    "lastUpdateTime",
    "message",
    "recheckTime",
)


#: the instants RFC 3339 (four-digit years) can write: a deadline past the last one (a pause of
#: up to 2^63-1 ms is valid policy) is written as the last one, i.e. never reached in practice
LATEST_TIME: Final = datetime.max.replace(microsecond=999000, tzinfo=UTC).timestamp()
LATEST_TIME_TEXT: Final = "9999-12-31T23:59:59.999Z"
EARLIEST_TIME: Final = datetime.min.replace(tzinfo=UTC).timestamp()
EARLIEST_TIME_TEXT: Final = "0001-01-01T00:00:00Z"


def format_time(t: float) -> str:
    """RFC 3339 in UTC; milliseconds only when the instant has a fraction of a second. Instants
    outside years 1..9999 are clamped to the nearest one that can be written."""
    if not t < LATEST_TIME:  # NaN too: no deadline can be computed, so none is ever reached
        return LATEST_TIME_TEXT
    if t <= EARLIEST_TIME:
        return EARLIEST_TIME_TEXT
    moment = datetime.fromtimestamp(t, UTC)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def after_ms(t: float, ms: int) -> float:
    """``ms`` milliseconds after ``t``, clamped to the instants ``format_time`` can write (no
    integer of any size overflows: the comparison is exact)."""
    if ms >= (LATEST_TIME - t) * 1000:
        return LATEST_TIME
    if ms <= (EARLIEST_TIME - t) * 1000:
        return EARLIEST_TIME
    return t + ms / 1000


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def parse_time_or(text: object, default: float) -> float:
    """``parse_time`` for values anyone can edit (annotations): garbage reads as ``default``."""
    if not isinstance(text, str) or not text:
        return default
    try:
        return parse_time(text)
    except ValueError:
        return default


def int_or(text: object, default: int) -> int:
    try:
        return int(str(text))
    except ValueError:
        return default


def empty_status() -> dict[str, Any]:
    return {
        "lastAppliedSpec": {},
        "lastCoDriverSpec": {},
        "upgrading": False,
        "condition": [],
        "phase": PHASE_IDLING,
        "message": "",
        "status": {
            "lastPodSpecRevision": "",
            "upgradingPodSpecRevision": "",
            "currentStepIndex": 0,
            "currentUpgradeReplicas": 0,
            "currentUpgradeReadyReplicas": 0,
            "currentFailureRetry": 0,
            "currentStepState": "",
            "totalUpgradeReplicas": 0,
            "totalUpgradeReadyReplicas": 0,
            "lastUpdateTime": "",
            "message": "",
            "recheckTime": "",
        },
    }


def normalized(status: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy with every SPEC 4.1 field present (missing ones take their empty value)."""
    result = empty_status()
    for key, value in status.items():
        if key != "status":
            result[key] = copy.deepcopy(value)
    inner = status.get("status") or {}
    for key, value in inner.items():
        result["status"][key] = copy.deepcopy(value)
    result["condition"] = list(result["condition"] or [])
    return result


def find_condition(status: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in status.get("condition") or ():
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def condition_true(status: Mapping[str, Any], ctype: str) -> bool:
    cond = find_condition(status, ctype)
    return cond is not None and cond.get("status") == "True"


def set_condition(
    status: dict[str, Any],
    ctype: str,
    value: str,
    reason: str,
    message: str,
    now_text: str,
    *,
    touch: bool = False,
) -> None:
    """Upsert a condition; lastTransitionTime moves when ``status`` flips (or ``touch``)."""
    conditions: list[dict[str, Any]] = status["condition"]
    for index, cond in enumerate(conditions):
        if cond.get("type") == ctype:
            changed = cond.get("status") != value or touch
            conditions[index] = {
                "type": ctype,
                "status": value,
                "lastTransitionTime": now_text if changed else cond.get("lastTransitionTime", ""),
                "reason": reason,
                "message": message,
            }
            return
    conditions.append(
        {
            "type": ctype,
            "status": value,
            "lastTransitionTime": now_text,
            "reason": reason,
            "message": message,
        }
    )


def without_update_time(status: Mapping[str, Any]) -> dict[str, Any]:
    inner = dict(status.get("status") or {})
    inner.pop("lastUpdateTime", None)
    result = dict(status)
    result["status"] = inner
    return result
