"""Fault injection plan for simulated nodes, shared by ``dev-cluster up --faults`` and the fleet.

File format (YAML)::

    faults:
      - {node: node-0003, fault: imagepull}                 # every driver version
      - {node: node-0004, fault: crashloop, version: 2.33.0.9}
      - {node: node-0005, fault: node-notready}
      - {node: node-0006, fault: firmware-no-report}
      - {node: node-0007, fault: gpu-unavailable, version: 2.33.0.9}  # pod Ready, GPUs not

A fault with ``version`` applies only while the node runs that driver version (``2.33.0.9``
and ``2.33.0.9-amd64`` are the same version); it disappears when the node runs another one.
The GPU faults change only what the node's MX Exporter reports (``reconciler.sim.mx_exporter``):
the driver pod turns Ready as usual.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from reconciler.policy.payload import normalize_version


class FaultKind(StrEnum):
    IMAGE_PULL = "imagepull"  # ErrImagePull, then ImagePullBackOff
    CRASH_LOOP = "crashloop"  # CrashLoopBackOff, restartCount grows
    NEVER_READY = "never-ready"  # Running, never Ready
    NODE_NOT_READY = "node-notready"  # the node's Ready condition goes False
    FIRMWARE_NO_REPORT = "firmware-no-report"  # never emits NodeNeedReboot
    FIRMWARE_WRONG_VERSION = "firmware-wrong-version"  # comes back from reboot on the old VBIOS
    GPU_UNAVAILABLE = "gpu-unavailable"  # pod Ready, mx_gpu_state 0 on some GPUs
    GPU_THROTTLING = "gpu-throttling"  # pod Ready, mx_clk_thr non-zero on some GPUs


POD_FAULTS = frozenset({FaultKind.IMAGE_PULL, FaultKind.CRASH_LOOP, FaultKind.NEVER_READY})
GPU_FAULTS = frozenset({FaultKind.GPU_UNAVAILABLE, FaultKind.GPU_THROTTLING})


class FaultFileError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Fault:
    node: str
    kind: FaultKind
    version: str | None = None

    def applies_to(self, version: str | None) -> bool:
        """Whether the fault is active for a node running driver ``version``."""
        if self.version is None:
            return True
        return version is not None and normalize_version(version) == normalize_version(self.version)


def parse_faults(data: Any, *, source: str = "faults") -> list[Fault]:
    """Faults from decoded YAML/JSON data (``{"faults": [...]}``)."""
    if data is None:
        return []
    if not isinstance(data, Mapping) or set(data) - {"faults"}:
        raise FaultFileError(f"{source}: expected a mapping with one key 'faults'")
    entries = data.get("faults") or []
    if not isinstance(entries, list):
        raise FaultFileError(f"{source}: 'faults' must be a list")
    kinds = ", ".join(k.value for k in FaultKind)
    faults = []
    for index, entry in enumerate(entries):
        where = f"{source}: faults[{index}]"
        if not isinstance(entry, Mapping):
            raise FaultFileError(f"{where}: expected a mapping with 'node' and 'fault'")
        unknown = set(entry) - {"node", "fault", "version"}
        if unknown:
            raise FaultFileError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
        node, kind, version = entry.get("node"), entry.get("fault"), entry.get("version")
        if not isinstance(node, str) or not node:
            raise FaultFileError(f"{where}: 'node' must be a node name such as node-0003")
        if kind not in {k.value for k in FaultKind}:
            raise FaultFileError(f"{where}: 'fault' must be one of {kinds}, got {kind!r}")
        if version is not None and not isinstance(version, str):
            raise FaultFileError(
                f"{where}: 'version' must be a string (quote it: '{version}'), "
                f"got {type(version).__name__}"
            )
        faults.append(Fault(node=node, kind=FaultKind(kind), version=version))
    return faults


def load_faults(path: Path) -> list[Fault]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise FaultFileError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        data = YAML(typ="safe", pure=True).load(text)
    except YAMLError as exc:
        raise FaultFileError(f"{path}: not valid YAML: {exc}") from exc
    return parse_faults(data, source=str(path))


def faults_by_node(faults: Iterable[Fault]) -> dict[str, list[Fault]]:
    table: dict[str, list[Fault]] = {}
    for fault in faults:
        table.setdefault(fault.node, []).append(fault)
    return table
