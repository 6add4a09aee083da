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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

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


def parse_faults(
    data: Any, *, source: str = "faults", locate: Callable[[str], str] | None = None
) -> list[Fault]:
    """Faults from decoded YAML/JSON data (``{"faults": [...]}``); ``locate`` turns a JSON
    pointer into ``file:line:col`` for the messages (default: ``source``)."""
    def at(pointer: str) -> str:
        return locate(pointer) if locate is not None else source

    if data is None:
        return []
    if not isinstance(data, Mapping) or set(data) - {"faults"}:
        raise FaultFileError(f"{at('')}: expected a mapping with one key 'faults'")
    entries = data.get("faults") or []
    if not isinstance(entries, list):
        raise FaultFileError(f"{at('/faults')}: 'faults' must be a list")
    kinds = ", ".join(k.value for k in FaultKind)
    faults = []
    for index, entry in enumerate(entries):
        item = f"/faults/{index}"
        where = f"{at(item)}: faults[{index}]"
        if not isinstance(entry, Mapping):
            raise FaultFileError(f"{where}: expected a mapping with 'node' and 'fault'")
        unknown = set(entry) - {"node", "fault", "version"}
        if unknown:
            raise FaultFileError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
        node, kind, version = entry.get("node"), entry.get("fault"), entry.get("version")
        if not isinstance(node, str) or not node:
            raise FaultFileError(f"{at(item + '/node')}: faults[{index}]: 'node' must be a node "
                                 "name such as node-0003")
        if kind not in {k.value for k in FaultKind}:
            raise FaultFileError(f"{at(item + '/fault')}: faults[{index}]: 'fault' must be one "
                                 f"of {kinds}, got {kind!r}")
        if version is not None and not isinstance(version, str):
            raise FaultFileError(
                f"{at(item + '/version')}: faults[{index}]: 'version' must be a string (quote "
                f"it: '{version}'), got {type(version).__name__}"
            )
        faults.append(Fault(node=node, kind=FaultKind(kind), version=version))
    return faults


def load_faults(path: Path) -> list[Fault]:
    """The fault file at ``path``, read like a policy file: no link, a regular file of at most
    1 MiB, parsed with the same nesting and alias bounds; errors are located (file:line:col)."""
    from reconciler.files import FileRefused, read_bounded
    from reconciler.policy.document import parse_document

    try:
        raw = read_bounded(path)
    except FileRefused as refused:
        reason = refused.reason
        if not reason.startswith("cannot read"):
            reason = f"cannot read: {reason}"
        raise FaultFileError(f"{path}: {reason}") from None
    doc = parse_document(raw, str(path))
    errors = [f for f in doc.findings if f.is_error]
    if errors and errors[0].rule != "empty-document":
        first = errors[0]
        raise FaultFileError(f"{first.file}:{first.line}:{first.column}: not valid YAML: "
                             f"{first.message}")

    def locate(pointer: str) -> str:
        loc = doc.locate(pointer)
        return f"{path}:{loc.line}:{loc.column}"

    return parse_faults(None if errors else doc.obj, source=str(path), locate=locate)


def faults_by_node(faults: Iterable[Fault]) -> dict[str, list[Fault]]:
    table: dict[str, list[Fault]] = {}
    for fault in faults:
        table.setdefault(fault.node, []).append(fault)
    return table
