"""The firmware status for people and for Git: ``reconciler status`` rows and the status
snapshot's ``firmware`` section. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.stored_status import firmware_status_of as stored_firmware_status


@dataclass(frozen=True, slots=True)
class FirmwareRow:
    node: str
    stage: str
    message: str
    since: str


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def firmware_status_of(cluster_operator: Mapping[str, Any]) -> Mapping[str, Any]:
    """The firmware flow's record of a ClusterOperator object (empty when absent): its
    annotation (``reconciler.stored_status``)."""
    return stored_firmware_status(cluster_operator)


def firmware_rows(status: Mapping[str, Any]) -> list[FirmwareRow]:
    """One row per node of the flow (from ``status.firmwareUpgrade`` or a snapshot's
    ``firmware`` section, whose nodes map to bare stages), failed nodes first, then by stage
    and name; then one row per refusal (node ``*`` when it concerns no single node)."""
    order = {"failed": 0, "awaiting-reboot": 1, "rebooting": 2, "awaiting-upgrade": 3,
             "verified": 4}
    rows = []
    for name, entry in _mapping(status.get("nodes")).items():
        if isinstance(entry, Mapping):
            rows.append(FirmwareRow(str(name), str(entry.get("stage", "")),
                                    _node_message(entry), str(entry.get("since", ""))))
        else:
            rows.append(FirmwareRow(str(name), str(entry), "", ""))
    rows.sort(key=lambda r: (order.get(r.stage, 9), r.node))
    for refusal in status.get("refusals") or ():
        if isinstance(refusal, Mapping):
            rows.append(FirmwareRow(str(refusal.get("node", "*")), "refused",
                                    str(refusal.get("reason", "")), ""))
    return rows


_STAGE_MESSAGES = {
    "awaiting-upgrade": "waiting for its NodeNeedReboot event",
    "awaiting-reboot": "NodeNeedReboot reported: reboot this node",
    "rebooting": "rebooting",
}


def _node_message(entry: Mapping[str, Any]) -> str:
    if entry.get("message"):
        return str(entry["message"])
    if entry.get("stage") == "verified" and entry.get("version"):
        return f"VBIOS {entry['version']} after reboot"
    if entry.get("stage") == "rebooting" and entry.get("rebootToken"):
        return "reboot hook run"
    return _STAGE_MESSAGES.get(str(entry.get("stage")), "")


def firmware_summary(status: Mapping[str, Any]) -> str:
    """One line: phase, source commit and message."""
    phase = str(status.get("phase") or "Idle")
    commit = status.get("sourceCommit")
    text = phase + (f" (source commit {str(commit)[:12]})" if commit else "")
    message = status.get("message")
    return f"{text}: {message}" if message else text


def firmware_snapshot(status: Mapping[str, Any]) -> dict[str, Any]:
    """The Git status snapshot's ``firmware`` section (schemas/status-snapshot.schema.json):
    nodes map to their stage only, so the file stays small and diffs read well."""
    out: dict[str, Any] = {"phase": str(status.get("phase") or "Idle")}
    for key in ("message", "sourceCommit", "startedAt", "finishedAt"):
        if status.get(key) is not None:
            out[key] = status[key]
    nodes = _mapping(status.get("nodes"))
    out["nodes"] = {str(name): str(entry.get("stage", "")) if isinstance(entry, Mapping)
                    else str(entry) for name, entry in sorted(nodes.items())}
    failed = {str(name): str(entry.get("message", "")) for name, entry in sorted(nodes.items())
              if isinstance(entry, Mapping) and entry.get("stage") == "failed"}
    if failed:
        out["failures"] = failed
    if status.get("refusals"):
        out["refusals"] = [dict(r) for r in status["refusals"] if isinstance(r, Mapping)]
    if isinstance(status.get("preflight"), Mapping):
        out["preflight"] = dict(status["preflight"])
    return out
