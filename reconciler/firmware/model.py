"""The firmware planner's inputs: settings, the request, node observations, the snapshot. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from reconciler.durations import parse_duration

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
