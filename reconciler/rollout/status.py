"""``status.upgradeStatus`` (docs/rollout.md#status-fields): field names, timestamps and condition
bookkeeping.

The planner reads the CR's JSON once into a frozen ``UpgradeStatus`` and writes back JSON shaped
exactly like the CR status, so the controller writes what it gets and a restarted planner reads
back everything it needs. The dict helpers below serve the controller's own condition
(``PlanningFailed``), which it sets on the JSON the planner could not read.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Self

from reconciler.names import ConditionType, Phase, StepState
from reconciler.stored_status import READY_REPLICAS, conditions_in_force, read_upgrade_status
from reconciler.timefmt import (
    EARLIEST_TIME_TEXT as EARLIEST_TIME_TEXT,
)
from reconciler.timefmt import (
    LATEST_TIME as LATEST_TIME,
)
from reconciler.timefmt import (
    LATEST_TIME_TEXT as LATEST_TIME_TEXT,
)
from reconciler.timefmt import (
    after_ms as after_ms,
)
from reconciler.timefmt import (
    format_time as format_time,
)
from reconciler.timefmt import (
    parse_time as parse_time,
)
from reconciler.timefmt import (
    parse_time_or as parse_time_or,
)

PHASE_IDLING: Final = Phase.IDLING
PHASE_PROGRESSING: Final = Phase.PROGRESSING
PHASE_TERMINATING: Final = Phase.TERMINATING
PHASE_DISABLING: Final = Phase.DISABLING
PHASE_DISABLED: Final = Phase.DISABLED

STEP_INIT: Final = StepState.INIT
STEP_UPGRADE: Final = StepState.UPGRADE
STEP_PAUSED: Final = StepState.PAUSED
STEP_READY: Final = StepState.READY
STEP_COMPLETED: Final = StepState.COMPLETED

COND_PROGRESSING: Final = ConditionType.PROGRESSING
COND_MANUAL_GATE: Final = ConditionType.MANUAL_GATE
COND_BATCH_FAILED: Final = ConditionType.BATCH_FAILED
COND_ROLLED_BACK: Final = ConditionType.ROLLED_BACK

REASON_THRESHOLD: Final = "FailureThresholdReached"
REASON_DISABLED: Final = "RolloutDisabled"


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
        "conditions": [],
        "phase": PHASE_IDLING,
        "message": "",
        "status": {
            "lastPodSpecRevision": "",
            "upgradingPodSpecRevision": "",
            "currentStepIndex": 0,
            "currentUpgradeReplicas": 0,
            READY_REPLICAS: 0,
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
    """A deep copy with every docs/rollout.md#status-fields field present (missing ones take their
    empty value), read in the CRD's spelling (``stored_status.read_upgrade_status``: the
    manual's ``condition`` and ``currentUpgradeReadyReplicas`` too; conditions in force only)."""
    read = read_upgrade_status(status)
    result = empty_status()
    for key, value in read.items():
        if key != "status":
            result[key] = value
    inner = read.get("status") or {}
    for key, value in inner.items():
        result["status"][key] = value
    result["conditions"] = list(result["conditions"] or [])
    return result


def find_condition(status: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    """The condition ``ctype`` if it is in force (on the list; the manual's ``condition``
    entries only when their status is True)."""
    for cond in conditions_in_force(status):
        if cond.get("type") == ctype:
            return cond
    return None


def condition_true(status: Mapping[str, Any], ctype: str) -> bool:
    return find_condition(status, ctype) is not None


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
    """Puts a condition in force (``value`` "True") or takes it off the list (any other
    ``value``: the CRD's conditions have no status, a condition listed is in force);
    lastTransitionTime moves when it comes into force (or ``touch``)."""
    conditions = conditions_in_force(status)
    status.pop("condition", None)
    status["conditions"] = conditions
    for index, cond in enumerate(conditions):
        if cond.get("type") == ctype:
            if value != "True":
                del conditions[index]
                return
            conditions[index] = {
                "type": ctype,
                "reason": reason,
                "message": message,
                "lastTransitionTime": now_text if touch else cond.get("lastTransitionTime")
                or now_text,
            }
            return
    if value == "True":
        conditions.append({"type": ctype, "reason": reason, "message": message,
                           "lastTransitionTime": now_text})


def without_update_time(status: Mapping[str, Any]) -> dict[str, Any]:
    inner = dict(status.get("status") or {})
    inner.pop("lastUpdateTime", None)
    result = dict(status)
    result["status"] = inner
    return result


# -- the typed view ----------------------------------------------------------------------------


def _text(raw: object) -> str:
    return "" if raw is None else str(raw)


def _count(raw: object) -> int:
    """A counter as stored; a value that is not a number reads as 0 (the planner rewrites it)."""
    if isinstance(raw, int):
        return raw
    if not raw:
        return 0
    try:
        return int(str(raw)) if isinstance(raw, str) else int(float(str(raw)))
    except (TypeError, ValueError, OverflowError):
        return 0


def _mapping(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


def _list(raw: object) -> list[Any]:
    return raw if isinstance(raw, list) else []


@dataclass(frozen=True, slots=True)
class Condition:
    """One entry of ``status.upgradeStatus.conditions``: a condition in force (the CRD's
    entries have no status; ``status`` is always "True" here, kept for the readers that ask)."""

    type: str
    status: str
    last_transition_time: str
    reason: str
    message: str
    #: the entry as read: written back as it was while this condition is not replaced; a
    #: condition the planner sets has none and is written in the form of
    #: docs/rollout.md#status-fields
    source: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Condition:
        return cls(
            type=_text(raw.get("type")),
            status="True",
            last_transition_time=_text(raw.get("lastTransitionTime", "")),
            reason=_text(raw.get("reason", "")),
            message=_text(raw.get("message", "")),
            source=raw,
        )

    def to_json(self) -> dict[str, Any]:
        if self.source is not None:
            return {k: copy.deepcopy(v) for k, v in self.source.items() if k != "status"}
        return {
            "type": str(self.type),
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": self.last_transition_time,
        }


#: (JSON key, attribute) of the top-level fields, and of those under ``status``
_TOP_FIELDS: Final = (
    ("lastAppliedSpec", "last_applied_spec"),
    ("lastCoDriverSpec", "last_co_driver_spec"),
    ("upgrading", "upgrading"),
    ("phase", "phase"),
    ("message", "message"),
    ("health", "health"),
    ("rolledBackSpec", "rolled_back_spec"),
)
_INNER_FIELDS: Final = (
    ("lastPodSpecRevision", "last_pod_spec_revision"),
    ("upgradingPodSpecRevision", "upgrading_pod_spec_revision"),
    ("currentStepIndex", "current_step_index"),
    ("currentUpgradeReplicas", "current_upgrade_replicas"),
    (READY_REPLICAS, "current_upgrade_ready_replicas"),
    ("currentFailureRetry", "current_failure_retry"),
    ("currentStepState", "current_step_state"),
    ("totalUpgradeReplicas", "total_upgrade_replicas"),
    ("totalUpgradeReadyReplicas", "total_upgrade_ready_replicas"),
    ("lastUpdateTime", "last_update_time"),
    ("message", "step_message"),
    ("recheckTime", "recheck_time"),
)
#: the docs/rollout.md#status-fields fields under ``status``, in the order they are written
INNER_FIELDS: Final = tuple(key for key, _ in _INNER_FIELDS)


@dataclass(frozen=True, slots=True)
class UpgradeStatus:
    """``status.upgradeStatus`` (docs/rollout.md#status-fields) as a value: read once from the CR's
    JSON (``from_json``), changed by methods that return a new value, written back by ``to_json``,
    which keeps every field whose value did not change exactly as it was read (unknown keys and
    key order included), so an unchanged status is written as it was."""

    last_applied_spec: Mapping[str, Any] = field(default_factory=dict)
    last_co_driver_spec: Mapping[str, Any] = field(default_factory=dict)
    upgrading: bool = False
    conditions: tuple[Condition, ...] = ()
    phase: str = ""
    message: str = ""
    last_pod_spec_revision: str = ""
    upgrading_pod_spec_revision: str = ""
    current_step_index: int = 0
    current_upgrade_replicas: int = 0
    current_upgrade_ready_replicas: int = 0
    current_failure_retry: int = 0
    current_step_state: str = ""
    total_upgrade_replicas: int = 0
    total_upgrade_ready_replicas: int = 0
    last_update_time: str = ""
    #: ``status.message``: what the current step waits for
    step_message: str = ""
    recheck_time: str = ""
    #: ``health`` (not a docs/rollout.md#status-fields field; absent without a ``health`` section):
    #: the step checks' timers and each check's last value and verdict (docs/health.md)
    health: Mapping[str, Any] = field(default_factory=dict)
    #: ``rolledBackSpec`` (not a docs/rollout.md#status-fields field; absent before the first
    #: rollback): the payload the last completed rollback rolled back, so the completion record
    #: (docs/configuration.md#the-completion-record) names it from a structured field, not from the
    #: ``RolledBack`` condition's message
    rolled_back_spec: Mapping[str, Any] = field(default_factory=dict)
    #: ``holds`` (not a docs/rollout.md#status-fields field; absent when empty): what holds fresh
    #: node starts back, as data (``{kind, until, detail}``), for the read model
    #: (``reconciler.views``)
    holds: tuple[Mapping[str, Any], ...] = ()
    # -- skipped nodes (docs/live-clusters.md#a-node-under-repair)
    #: ``skipped`` (not a docs/rollout.md#status-fields field; absent when empty): the nodes this
    #: rollout skipped (labelled ``upgrade.skip``, or ``unavailableNodes: skip``), in name order; a
    #: decision is frozen for the rollout (a node listed stays skipped), a new rollout starts empty
    skipped: tuple[str, ...] = ()
    # -- issue 32 (live clusters), drain: its own block
    #: ``draining`` (not a docs/rollout.md#status-fields field; absent when empty): the draining
    #: nodes, by name, at most ``drain.STATUS_LIMIT``: ``{node, since, pods, budgets, waitingFor}``
    draining: tuple[Mapping[str, Any], ...] = ()
    # -- issue 32: one block per helper (keys left out of the JSON when empty)
    #: ``topology`` (absent when the rollout started without one): ``rollout.topology``
    #: frozen when the rollout started (``{key, order, maxUnavailablePerDomain}``,
    #: docs/rollout.md#topology-aware-waves)
    topology: Mapping[str, Any] = field(default_factory=dict)
    #: the JSON this value was read from, every field of docs/rollout.md#status-fields present
    #: (``normalized``)
    source: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: the value as read from ``source`` (what ``to_json`` compares with)
    origin: UpgradeStatus | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> UpgradeStatus:
        source = normalized(raw)
        inner: Mapping[str, Any] = source["status"]
        read = cls(
            last_applied_spec=source["lastAppliedSpec"] or {},
            last_co_driver_spec=source["lastCoDriverSpec"] or {},
            upgrading=source["upgrading"] is True,
            conditions=tuple(Condition.from_json(c) for c in source["conditions"]),
            phase=_text(source["phase"]),
            message=_text(source["message"]),
            last_pod_spec_revision=_text(inner["lastPodSpecRevision"]),
            upgrading_pod_spec_revision=_text(inner["upgradingPodSpecRevision"]),
            current_step_index=_count(inner["currentStepIndex"]),
            current_upgrade_replicas=_count(inner["currentUpgradeReplicas"]),
            current_upgrade_ready_replicas=_count(inner[READY_REPLICAS]),
            current_failure_retry=_count(inner["currentFailureRetry"]),
            current_step_state=_text(inner["currentStepState"]),
            total_upgrade_replicas=_count(inner["totalUpgradeReplicas"]),
            total_upgrade_ready_replicas=_count(inner["totalUpgradeReadyReplicas"]),
            last_update_time=_text(inner["lastUpdateTime"]),
            step_message=_text(inner["message"]),
            recheck_time=_text(inner["recheckTime"]),
            health=_mapping(source.get("health")),
            rolled_back_spec=_mapping(source.get("rolledBackSpec")),
            holds=tuple(h for h in _list(source.get("holds")) if isinstance(h, Mapping)),
            skipped=tuple(n for n in _list(source.get("skipped")) if isinstance(n, str)),
            draining=tuple(d for d in _list(source.get("draining")) if isinstance(d, Mapping)),
            topology=_mapping(source.get("topology")),
            source=source,
        )
        object.__setattr__(read, "origin", read)  # frozen: set once, here, before anyone sees it
        return read

    def to_json(self) -> dict[str, Any]:
        """The JSON to write: the source with the fields whose value changed replaced."""
        result = copy.deepcopy(dict(self.source)) or empty_status()
        read = self.origin if self.origin is not None else UpgradeStatus.from_json(result)
        for key, attr in _TOP_FIELDS:
            value = getattr(self, attr)
            if value != getattr(read, attr):
                result[key] = _json_value(value)
        inner = result["status"]
        for key, attr in _INNER_FIELDS:
            value = getattr(self, attr)
            if value != getattr(read, attr):
                inner[key] = _json_value(value)
        result.pop("condition", None)
        result["conditions"] = [c.to_json() for c in self.conditions]
        if self.holds != read.holds:
            if self.holds:
                result["holds"] = [dict(h) for h in self.holds]
            else:
                result.pop("holds", None)  # a new key, left out when empty
        if self.skipped != read.skipped:
            if self.skipped:
                result["skipped"] = list(self.skipped)
            else:
                result.pop("skipped", None)
        if self.draining != read.draining:
            if self.draining:
                result["draining"] = [copy.deepcopy(dict(d)) for d in self.draining]
            else:
                result.pop("draining", None)  # left out when empty, like ``holds``
        if self.topology != read.topology:
            if self.topology:
                result["topology"] = copy.deepcopy(dict(self.topology))
            else:
                result.pop("topology", None)
        return result

    def evolve(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)

    # -- conditions

    def condition(self, ctype: str) -> Condition | None:
        for cond in self.conditions:
            if cond.type == ctype:
                return cond
        return None

    def condition_true(self, ctype: str) -> bool:
        return self.condition(ctype) is not None

    def with_condition(
        self, ctype: str, value: str, reason: str, message: str, now_text: str, *,
        touch: bool = False,
    ) -> Self:
        """Puts a condition in force (``value`` "True") or takes it off the list (any other
        ``value``); lastTransitionTime moves when it comes into force (or ``touch``)."""
        conditions = list(self.conditions)
        for index, cond in enumerate(conditions):
            if cond.type == ctype:
                if value != "True":
                    del conditions[index]
                    return dataclasses.replace(self, conditions=tuple(conditions))
                since = now_text if touch else cond.last_transition_time or now_text
                conditions[index] = Condition(str(ctype), "True", since, reason, message)
                return dataclasses.replace(self, conditions=tuple(conditions))
        if value != "True":
            return self
        conditions.append(Condition(str(ctype), "True", now_text, reason, message))
        return dataclasses.replace(self, conditions=tuple(conditions))

    # -- derived

    @property
    def applied_payload(self) -> Mapping[str, Any] | None:
        """``lastAppliedSpec.payload``: what the rollout rolls out (or rolled out last)."""
        payload = self.last_applied_spec.get("payload")
        return payload if payload else None

    @property
    def previous_payload(self) -> Mapping[str, Any] | None:
        """``lastCoDriverSpec.payload``: what the fleet ran before the rollout."""
        payload = self.last_co_driver_spec.get("payload")
        return payload if payload else None

    def epoch(self) -> str:
        """The batch epoch failures are counted in: the step and when it (re)started."""
        cond = self.condition(COND_PROGRESSING)
        since = cond.last_transition_time if cond is not None else ""
        return f"{self.current_step_index}@{since}"


def _json_value(value: Any) -> Any:
    if isinstance(value, str):
        return str(value)  # a StrEnum member is written as its plain value
    if isinstance(value, Mapping):
        return copy.deepcopy(dict(value))
    return value
