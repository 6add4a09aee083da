"""The firmware planner's inputs: settings, the request, node observations, the snapshot. Pure."""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from reconciler.policy.repo_config import parse_duration

#: Annotations (prefix ``gpu.metax-tech.com/``): the request on the ClusterOperator, and per node
#: whether it was cordoned before the flow (written in the same patch that cordons it).
REQUEST_ANNOTATION = "gpu.metax-tech.com/firmware-request"
CORDONED_BEFORE_ANNOTATION = "gpu.metax-tech.com/firmware-cordoned-before"
#: set with the cordon: which flow prepared the node, its boot ID and VBIOS version(s) then
FLOW_ANNOTATION = "gpu.metax-tech.com/firmware-flow"
BOOT_ID_ANNOTATION = "gpu.metax-tech.com/firmware-boot-id"
VBIOS_BEFORE_ANNOTATION = "gpu.metax-tech.com/firmware-vbios-before"
FLOW_ANNOTATIONS = (FLOW_ANNOTATION, BOOT_ID_ANNOTATION, VBIOS_BEFORE_ANNOTATION)
#: on the ClusterOperator, applied with the final ``Never``: ``<flow id>:<phase>``, so a flow
#: whose last status writes were lost is never run again
DONE_ANNOTATION = "gpu.metax-tech.com/firmware-done"

PHASES = ("Idle", "Preflight", "Refused", "Cordoning", "Upgrading", "AwaitingReboot",
          "Verifying", "Finishing", "Completed", "Failed")
#: phases in which no flow runs (kept equal to policy.transitions.FIRMWARE_IDLE_PHASES)
DONE_PHASES = frozenset({"Idle", "Completed", "Failed", "Refused"})

Stage = Literal["awaiting-upgrade", "awaiting-reboot", "rebooting", "verified", "failed"]
STAGES: tuple[Stage, ...] = ("awaiting-upgrade", "awaiting-reboot", "rebooting", "verified",
                             "failed")
TERMINAL_STAGES = frozenset({"verified", "failed"})

RebootMode = Literal["manual", "hook"]


@dataclass(frozen=True, slots=True)
class NodeLabelKeys:
    """Node label keys the preflight reads its facts from (repository config
    ``firmware.nodeLabels``); the defaults match the simulator and real nodes' labels."""

    vbios_version: str = "metax-tech.com/gpu.vbios.version"
    vfio_pci: str = "metax-tech.com/gpu.vfio-pci"
    virtual_machine: str = "metax-tech.com/node.virtual-machine"
    multi_host: str = "metax-tech.com/gpu.multi-host"
    sriov: str = "metax-tech.com/gpu.sriov"


_LABEL_CONFIG_KEYS = {
    "vbiosVersion": "vbios_version",
    "vfioPci": "vfio_pci",
    "virtualMachine": "virtual_machine",
    "multiHost": "multi_host",
    "sriov": "sriov",
}


@dataclass(frozen=True, slots=True)
class StageTimeouts:
    """Seconds per stage; 0 means wait forever."""

    workloads: float = 0.0  # all nodes cordoned -> no GPU workload left (0: wait forever)
    upgrade: float = 1800.0  # PreferCloud applied -> the node's NodeNeedReboot event
    manual_reboot: float = 0.0  # awaiting a person's reboot
    reboot: float = 900.0  # reboot started -> Ready with a new boot ID
    verify: float = 120.0  # back -> the expected VBIOS version label
    hook: float = 120.0  # one reboot hook command


_TIMEOUT_CONFIG_KEYS = {
    "workloads": "workloads",
    "upgrade": "upgrade",
    "manualReboot": "manual_reboot",
    "reboot": "reboot",
    "verify": "verify",
    "hook": "hook",
}


class SettingsError(ValueError):
    """The repository config's ``firmware`` section cannot be used; the message says where."""


@dataclass(frozen=True, slots=True)
class FirmwareSettings:
    labels: NodeLabelKeys = NodeLabelKeys()
    timeouts: StageTimeouts = StageTimeouts()
    reboot_mode: RebootMode = "manual"
    reboot_command: tuple[str, ...] = ()
    max_concurrent_reboots: int = 1
    expected_version: str | None = None

    @classmethod
    def from_config(cls, firmware: Mapping[str, Any] | None) -> FirmwareSettings:
        """From the repository config's ``firmware`` section (already schema-checked for the
        keys the schema knows; the rest is checked here)."""
        firmware = firmware or {}
        if not isinstance(firmware, Mapping):
            raise SettingsError("firmware: expected a mapping")
        labels = firmware.get("nodeLabels") or {}
        unknown = sorted(set(labels) - set(_LABEL_CONFIG_KEYS))
        if unknown:
            raise SettingsError(f"firmware.nodeLabels: unknown key(s) {', '.join(unknown)}; "
                                f"known: {', '.join(_LABEL_CONFIG_KEYS)}")
        label_keys = NodeLabelKeys(**{_LABEL_CONFIG_KEYS[k]: str(v) for k, v in labels.items()})
        raw_timeouts = firmware.get("timeouts") or {}
        unknown = sorted(set(raw_timeouts) - set(_TIMEOUT_CONFIG_KEYS))
        if unknown:
            raise SettingsError(f"firmware.timeouts: unknown key(s) {', '.join(unknown)}; "
                                f"known: {', '.join(_TIMEOUT_CONFIG_KEYS)}")
        timeouts: dict[str, float] = {}
        for key, value in raw_timeouts.items():
            try:
                timeouts[_TIMEOUT_CONFIG_KEYS[key]] = (
                    0.0 if value in (0, "0") else parse_duration(str(value)))
            except ValueError as exc:
                raise SettingsError(f"firmware.timeouts.{key}: {exc}") from exc
        reboot = firmware.get("reboot") or {}
        mode = reboot.get("mode", "manual")
        if mode not in ("manual", "hook"):
            raise SettingsError(f"firmware.reboot.mode: expected manual or hook, got {mode!r}")
        command = tuple(str(part) for part in reboot.get("command") or ())
        if mode == "hook" and not command:
            raise SettingsError("firmware.reboot.command: required when mode is hook")
        limit = reboot.get("maxConcurrent", 1)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise SettingsError(
                f"firmware.reboot.maxConcurrent: expected an integer >= 1, got {limit!r}")
        expected = firmware.get("expectedVersion")
        return cls(
            labels=label_keys,
            timeouts=StageTimeouts(**timeouts),
            reboot_mode=mode,
            reboot_command=command,
            max_concurrent_reboots=limit,
            expected_version=str(expected) if expected is not None else None,
        )


@dataclass(frozen=True, slots=True)
class FirmwareRequest:
    """What the sync role (or a person) asked for in the request annotation."""

    fw_upgrade_policy: str
    fw_enable_virt: bool
    source_commit: str | None = None
    expected_version: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"fwUpgradePolicy": self.fw_upgrade_policy,
                               "fwEnableVirt": self.fw_enable_virt}
        if self.source_commit is not None:
            out["sourceCommit"] = self.source_commit
        if self.expected_version is not None:
            out["expectedVersion"] = self.expected_version
        return out


@dataclass(frozen=True, slots=True)
class FirmwareNode:
    """One GPU node as the planner sees it."""

    name: str
    ready: bool = True
    unschedulable: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    boot_id: str = ""
    vfio_gpus: int = 0
    #: the newest NodeNeedReboot Event's time for this node (epoch seconds), if any
    need_reboot_at: float | None = None
    #: running or pending pods that use a GPU (``namespace/name``): the seed requires an idle
    #: cluster before the firmware is upgraded
    workloads: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FirmwareSnapshot:
    nodes: Mapping[str, FirmwareNode]
    #: ``spec.driver`` of the ClusterOperator (fwUpgradePolicy, fwEnableVirt, ...)
    driver_spec: Mapping[str, Any]
    #: the parsed request annotation; None when absent
    request: FirmwareRequest | None
    #: why the request annotation could not be read, if it could not
    request_error: str | None
    #: ``status.firmwareUpgrade``
    status: Mapping[str, Any]
    #: ``status.upgradeStatus.phase`` (the driver rollout)
    rollout_phase: str | None = None
    #: reboot hook runs that failed, by reboot token: what went wrong
    hook_failures: Mapping[str, str] = field(default_factory=dict)
    #: the ClusterOperator's ``firmware-done`` annotation
    done: str | None = None


#: the last and first instants RFC 3339 (four-digit years) can write; later or earlier ones
#: are clamped to them
_LATEST = float(calendar.timegm((9999, 12, 31, 23, 59, 59, 0, 0, 0)))
_EARLIEST = float(calendar.timegm((1, 1, 1, 0, 0, 0, 0, 0, 0)))


def format_time(epoch: float) -> str:
    if not epoch < _LATEST:  # NaN included
        return "9999-12-31T23:59:59Z"
    if epoch <= _EARLIEST:
        return "0001-01-01T00:00:00Z"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def parse_time(text: Any) -> float | None:
    """RFC 3339 (as written by ``format_time`` or the API server) to epoch seconds."""
    if not isinstance(text, str) or len(text) < 19:
        return None
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "forever" if seconds > 0 else "?"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"
