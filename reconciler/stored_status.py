"""Where the ClusterOperator keeps what the controllers record
(docs/rollout.md#where-the-state-lives).

The vendor's CRD gives ``status`` a structural schema and no room for anything else: the API
server prunes every field it does not name, on writes and on reads of stored objects alike. So
the record is kept in two places:

- ``status.upgradeStatus``: exactly the CRD's fields and spelling (``conditions``,
  ``CurrentUpgradeReadyReplicas``, ``lastAppliedSpec`` and ``lastCoDriverSpec`` as JSON text,
  date-time fields left out while empty, conditions without a ``status`` key: the CRD has none,
  so a condition on the list is one in force);
- our own fields that the CRD has no room for (``OWN_UPGRADE_FIELDS``: holds, frozen topology,
  drain records, skipped nodes, health timers, the spec last rolled back) in the annotation
  ``ROLLOUT_STATE_ANNOTATION`` of the same object, and the whole firmware flow's record
  (``firmwareUpgrade``, which the CRD does not know) in ``FIRMWARE_STATUS_ANNOTATION``.

Everything inside the program (the planner, the read model, the status snapshots in Git) works
on one merged mapping, ``upgradeStatus`` as the CRD spells it plus our fields, with the two
spec copies as mappings. ``upgrade_status_of`` makes it from an object, ``split_upgrade_status``
cuts it into what each place stores. Reading takes the manual's spelling as well
(``condition`` with ``status: True/False``, ``currentUpgradeReadyReplicas``), so an object
written by the vendor's operator, by an older release of ours or a snapshot in Git all read
the same. The bottom layer: imports nothing from ``reconciler`` but ``names``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, Final

from reconciler.names import ANNOTATION_PREFIX

#: on the ClusterOperator: our part of the rollout's record (JSON object of ``OWN_UPGRADE_FIELDS``)
ROLLOUT_STATE_ANNOTATION: Final = ANNOTATION_PREFIX + "rollout-state"
#: on the ClusterOperator: the firmware flow's record (``firmwareUpgrade``, JSON)
FIRMWARE_STATUS_ANNOTATION: Final = ANNOTATION_PREFIX + "firmware-status"

#: fields of the merged ``upgradeStatus`` that the CRD has no room for
OWN_UPGRADE_FIELDS: Final = ("holds", "skipped", "draining", "topology", "health",
                             "rolledBackSpec")
#: ``upgradeStatus`` fields the CRD keeps (top level), and those of ``upgradeStatus.status``
CRD_UPGRADE_FIELDS: Final = ("conditions", "lastAppliedSpec", "lastCoDriverSpec", "message",
                             "phase", "status", "upgrading")
READY_REPLICAS: Final = "CurrentUpgradeReadyReplicas"
CRD_STEP_FIELDS: Final = (READY_REPLICAS, "currentFailureRetry", "currentStepIndex",
                          "currentStepState", "currentUpgradeReplicas", "lastPodSpecRevision",
                          "lastUpdateTime", "message", "recheckTime", "totalUpgradeReadyReplicas",
                          "totalUpgradeReplicas", "upgradingPodSpecRevision")
#: the CRD's required step fields: always written
_REQUIRED_STEP_FIELDS: Final = (READY_REPLICAS, "currentFailureRetry", "currentStepState",
                                "currentUpgradeReplicas", "totalUpgradeReadyReplicas",
                                "totalUpgradeReplicas")
_STEP_TIMES: Final = ("lastUpdateTime", "recheckTime")
_STEP_COUNTS: Final = frozenset({READY_REPLICAS, "currentFailureRetry", "currentStepIndex",
                                 "currentUpgradeReplicas", "totalUpgradeReadyReplicas",
                                 "totalUpgradeReplicas"})
_CONDITION_FIELDS: Final = ("type", "reason", "message", "lastTransitionTime", "lastUpdateTime")
#: ``status.state`` (the CRD requires it): what the controller writes where nothing set it
STATE_READY: Final = "ready"
STATE_VALUES: Final = frozenset({"init", "deploying", "ready"})
_INT32_MAX: Final = 2**31 - 1


def _mapping(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


def _annotation_json(obj: Mapping[str, Any], key: str) -> dict[str, Any]:
    text = _mapping(_mapping(obj.get("metadata")).get("annotations")).get(key)
    if not isinstance(text, str) or not text:
        return {}
    try:
        loaded = json.loads(text)
    except ValueError:
        return {}
    return dict(loaded) if isinstance(loaded, Mapping) else {}


def spec_text(spec: object) -> str:
    """A spec copy as the CRD stores it (a string): compact JSON, keys sorted, so the same spec
    is always the same text."""
    if isinstance(spec, str):
        return spec
    if not spec:
        return ""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def spec_mapping(raw: object) -> dict[str, Any]:
    """A spec copy as stored (JSON text, or a mapping in older records) as a mapping."""
    if isinstance(raw, Mapping):
        return copy.deepcopy(dict(raw))
    if isinstance(raw, str) and raw.strip():
        try:
            loaded = json.loads(raw)
        except ValueError:
            return {}
        return dict(loaded) if isinstance(loaded, Mapping) else {}
    return {}


def conditions_in_force(upgrade: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The conditions in force, in order, each without a ``status`` key. The CRD's
    ``conditions`` lists only those; the manual's ``condition`` (and our older records) carry
    ``status``, and an entry whose status is not ``True`` is not in force."""
    raw = upgrade.get("conditions")
    if raw is None:
        raw = upgrade.get("condition")
    result: list[dict[str, Any]] = []
    for entry in raw if isinstance(raw, list) else ():
        if not isinstance(entry, Mapping) or not entry.get("type"):
            continue
        if "status" in entry and str(entry.get("status")) != "True":
            continue
        result.append({k: copy.deepcopy(v) for k, v in entry.items() if k != "status"})
    return result


def conditions_by_type(upgrade: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``conditions_in_force`` by type."""
    return {str(c["type"]): c for c in conditions_in_force(upgrade)}


def condition_in_force(upgrade: Mapping[str, Any], ctype: str) -> bool:
    return ctype in conditions_by_type(upgrade)


def read_upgrade_status(upgrade: Mapping[str, Any],
                        own: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The merged ``upgradeStatus`` from the CRD's part (or any older spelling) and ours."""
    result: dict[str, Any] = {}
    for key, value in upgrade.items():
        if key in ("condition", "conditions"):
            continue
        result[key] = copy.deepcopy(value)
    if "condition" in upgrade or "conditions" in upgrade:
        result["conditions"] = conditions_in_force(upgrade)
    for key in ("lastAppliedSpec", "lastCoDriverSpec"):
        if key in result:
            result[key] = spec_mapping(result[key])
    inner = result.get("status")
    if isinstance(inner, Mapping):
        inner = dict(inner)
        legacy = inner.pop("currentUpgradeReadyReplicas", None)
        if READY_REPLICAS not in inner and legacy is not None:
            inner[READY_REPLICAS] = legacy
        result["status"] = inner
    for key, value in (own or {}).items():
        if key in OWN_UPGRADE_FIELDS and key not in result:
            result[key] = copy.deepcopy(value)
    return result


def upgrade_status_of(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """The merged ``upgradeStatus`` of a ClusterOperator: its status and our annotation."""
    if not obj:
        return {}
    upgrade = _mapping(_mapping(obj.get("status")).get("upgradeStatus"))
    own = _annotation_json(obj, ROLLOUT_STATE_ANNOTATION)
    if not upgrade and not own:
        return {}
    return read_upgrade_status(upgrade, own)


def firmware_status_of(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """The firmware flow's record of a ClusterOperator (``firmwareUpgrade``): our annotation,
    or the status field an older release wrote (the CRD prunes it since)."""
    if not obj:
        return {}
    own = _annotation_json(obj, FIRMWARE_STATUS_ANNOTATION)
    if own:
        return own
    return copy.deepcopy(dict(_mapping(_mapping(obj.get("status")).get("firmwareUpgrade"))))


def _condition_entry(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    entry = {k: raw[k] for k in _CONDITION_FIELDS if k in raw}
    for key in ("lastTransitionTime", "lastUpdateTime"):
        if not entry.get(key):
            entry.pop(key, None)
    if not entry.get("type"):
        return None
    entry["type"] = str(entry["type"])
    entry["reason"] = str(entry.get("reason") or "")
    entry["message"] = str(entry.get("message") or "")
    return entry


def _count(raw: object) -> int:
    if isinstance(raw, bool):
        return int(raw)
    if isinstance(raw, int):
        return max(min(raw, _INT32_MAX), -_INT32_MAX - 1)
    try:
        return _count(int(str(raw)))
    except ValueError:
        return 0


def crd_upgrade_status(merged: Mapping[str, Any]) -> dict[str, Any]:
    """``status.upgradeStatus`` as the CRD stores it: nothing the API server would prune or
    refuse, so what is written reads back the same (a status that changed on its way in would
    be written again at every pass)."""
    result: dict[str, Any] = {}
    conditions = [c for c in (_condition_entry(raw) for raw in conditions_in_force(merged)) if c]
    if conditions or "conditions" in merged or "condition" in merged:
        result["conditions"] = conditions
    for key in ("lastAppliedSpec", "lastCoDriverSpec"):
        if key in merged:
            result[key] = spec_text(merged[key])
    for key in ("message", "phase"):
        if key in merged:
            result[key] = "" if merged[key] is None else str(merged[key])
    result["upgrading"] = merged.get("upgrading") is True
    inner = _mapping(read_upgrade_status({"status": merged.get("status") or {}}).get("status"))
    step: dict[str, Any] = {}
    for key in CRD_STEP_FIELDS:
        if key not in inner and key not in _REQUIRED_STEP_FIELDS:
            continue
        value = inner.get(key)
        if key in _STEP_COUNTS:
            step[key] = _count(value)
        elif key in _STEP_TIMES:
            if value:
                step[key] = str(value)
        else:
            step[key] = "" if value is None else str(value)
    result["status"] = step
    return result


def own_upgrade_fields(merged: Mapping[str, Any]) -> dict[str, Any]:
    """Our fields of the merged ``upgradeStatus`` (empty ones left out)."""
    return {k: copy.deepcopy(merged[k]) for k in OWN_UPGRADE_FIELDS if merged.get(k)}


def split_upgrade_status(merged: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the CRD's ``upgradeStatus``, our fields for ``ROLLOUT_STATE_ANNOTATION``)."""
    return crd_upgrade_status(merged), own_upgrade_fields(merged)


def annotation_text(fields: Mapping[str, Any]) -> str | None:
    """An annotation's value for ``fields`` (None: remove the annotation)."""
    if not fields:
        return None
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def annotation_value(obj: Mapping[str, Any] | None, key: str) -> str | None:
    value = _mapping(_mapping((obj or {}).get("metadata")).get("annotations")).get(key)
    return value if isinstance(value, str) else None


def status_with_upgrade(obj: Mapping[str, Any] | None, crd_upgrade: Mapping[str, Any]
                        ) -> dict[str, Any]:
    """The whole ``status`` to write with ``crd_upgrade`` in it: what else the object has
    that the CRD keeps (``state``, set to ``ready`` where nothing set it: the builtin
    controller stands for the operator, and the components it drives exist)."""
    current = _mapping(_mapping(obj or {}).get("status"))
    status: dict[str, Any] = {}
    state = current.get("state")
    status["state"] = state if state in STATE_VALUES else STATE_READY
    status["upgradeStatus"] = copy.deepcopy(dict(crd_upgrade))
    return status


def same_record(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two merged ``upgradeStatus`` mappings store the same (the form written and the
    form read back differ in what the CRD leaves out: empty times, a spec's text)."""
    if not a or not b:
        return not a and not b
    return split_upgrade_status(a) == split_upgrade_status(b)
