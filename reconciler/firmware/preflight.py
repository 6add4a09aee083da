"""Firmware preflight (docs/firmware.md): refuse before touching anything, naming each node and
reason.

The facts come from node labels (keys configurable, ``NodeLabelKeys``). The same rules run
offline in ``reconciler validate``, where the facts come from the ``preflight`` section the
orchestrator publishes in ``status.firmwareUpgrade`` and the sync copies into the Git status
snapshot. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.firmware.model import FirmwareNode, NodeLabelKeys
from reconciler.names import ACTIVE_PHASES
from reconciler.policy.findings import Finding
from reconciler.policy.rules import RuleContext
from reconciler.policy.validation import PolicyRule

#: The seed: every VBIOS on a server must be below 1.12.0.0, or every one at or above it.
VBIOS_THRESHOLD = (1, 12, 0, 0)
SRIOV_VIRTUALISED_VALUES = frozenset({"support", "supported", "enabled", "true"})
#: The published facts list at most this many nodes per rule (10,000-node fleets).
PUBLISHED_LIMIT = 100
FW_POLICY_POINTER = "/spec/driver/fwUpgradePolicy"


@dataclass(frozen=True, slots=True, order=True)
class Refusal:
    node: str  # "*" when no single node is concerned
    rule: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"node": self.node, "rule": self.rule, "reason": self.reason}


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def _version(text: str) -> tuple[int, ...] | None:
    parts = text.split(".")
    if not parts or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def vbios_versions(labels: Mapping[str, str], keys: NodeLabelKeys) -> list[str]:
    """The node's VBIOS versions: one label value, several joined by ``_``."""
    value = labels.get(keys.vbios_version, "")
    return [v for v in value.split("_") if v]


def is_virtualised(labels: Mapping[str, str], keys: NodeLabelKeys) -> bool:
    return labels.get(keys.sriov, "").strip().lower() in SRIOV_VIRTUALISED_VALUES


def node_refusals(node: FirmwareNode, keys: NodeLabelKeys) -> list[Refusal]:
    """Refusals that hold for any firmware upgrade of this node (SR-IOV is separate)."""
    out: list[Refusal] = []
    labels = node.labels
    if _true(labels.get(keys.vfio_pci)) or node.vfio_gpus > 0:
        why = (f"{node.vfio_gpus} GPU(s) allocatable as metax-tech.com/vfio-gpu"
               if node.vfio_gpus > 0 else f"label {keys.vfio_pci}=true")
        out.append(Refusal(node.name, "vfio-pci",
                           f"GPUs are bound to vfio-pci ({why}); firmware upgrade does not "
                           "support them"))
    if _true(labels.get(keys.virtual_machine)):
        out.append(Refusal(node.name, "virtual-machine",
                           f"is a virtual machine (label {keys.virtual_machine}=true); firmware "
                           "upgrade runs on physical hosts only, PF only"))
    if _true(labels.get(keys.multi_host)):
        out.append(Refusal(node.name, "multi-host",
                           f"is part of a multi-host interconnect (label {keys.multi_host}=true); "
                           "firmware upgrade does not support it"))
    versions = vbios_versions(labels, keys)
    parsed = [_version(v) for v in versions]
    if not versions:
        out.append(Refusal(node.name, "vbios-unknown",
                           f"has no VBIOS version label {keys.vbios_version}; the 1.12.0.0 rule "
                           "cannot be checked"))
    elif any(p is None for p in parsed):
        bad = next(v for v, p in zip(versions, parsed, strict=True) if p is None)
        out.append(Refusal(node.name, "vbios-unknown",
                           f"VBIOS version {bad!r} (label {keys.vbios_version}) is not a dotted "
                           "version; the 1.12.0.0 rule cannot be checked"))
    else:
        below = sorted({v for v, p in zip(versions, parsed, strict=True)
                        if p is not None and p < VBIOS_THRESHOLD})
        above = sorted({v for v, p in zip(versions, parsed, strict=True)
                        if p is not None and p >= VBIOS_THRESHOLD})
        if below and above:
            out.append(Refusal(node.name, "vbios-straddle",
                               f"VBIOS versions straddle 1.12.0.0 ({', '.join(below)} below, "
                               f"{', '.join(above)} at or above); all must be on one side"))
    return out


def sriov_refusal(node: FirmwareNode, keys: NodeLabelKeys) -> Refusal | None:
    """``fwEnableVirt: true`` on a node whose firmware is not virtualised."""
    if is_virtualised(node.labels, keys):
        return None
    value = node.labels.get(keys.sriov)
    shown = f"label {keys.sriov}={value}" if value is not None else f"no label {keys.sriov}"
    return Refusal(node.name, "sriov-unsupported",
                   f"firmware is not virtualised ({shown}); fwEnableVirt: true would change "
                   "non-virtualised to virtualised firmware, which needs a person to confirm "
                   "the server model supports it")


def rollout_refusal(rollout_phase: str | None) -> Refusal | None:
    if rollout_phase in ACTIVE_PHASES:
        return Refusal("*", "rollout-active",
                       f"a driver rollout is in progress (phase {rollout_phase}); a rollout and "
                       "a firmware upgrade never run at the same time")
    return None


def preflight(
    nodes: Iterable[FirmwareNode], *, enable_virt: bool, keys: NodeLabelKeys,
    rollout_phase: str | None,
) -> list[Refusal]:
    """Every reason to refuse this firmware upgrade, sorted by node."""
    out: list[Refusal] = []
    refusal = rollout_refusal(rollout_phase)
    if refusal is not None:
        out.append(refusal)
    for node in nodes:
        out.extend(node_refusals(node, keys))
        if enable_virt:
            sriov = sriov_refusal(node, keys)
            if sriov is not None:
                out.append(sriov)
    return sorted(out)


def published_facts(nodes: Iterable[FirmwareNode], keys: NodeLabelKeys) -> dict[str, Any]:
    """The standing preflight facts for ``status.firmwareUpgrade.preflight`` (and so the Git
    snapshot): bounded in size, enough for the offline check to refuse the same way."""
    count = 0
    refusals: list[Refusal] = []
    not_virtualised: list[str] = []
    for node in nodes:
        count += 1
        refusals.extend(node_refusals(node, keys))
        if not is_virtualised(node.labels, keys):
            not_virtualised.append(node.name)
    refusals.sort()
    not_virtualised.sort()
    return {
        "nodes": count,
        "refusalCount": len(refusals),
        "refusals": [r.to_json() for r in refusals[:PUBLISHED_LIMIT]],
        "nonVirtualisedCount": len(not_virtualised),
        "nonVirtualised": not_virtualised[:PUBLISHED_LIMIT],
    }


def offline_preflight(
    facts: Mapping[str, Any] | None, *, enable_virt: bool, rollout_phase: str | None,
) -> list[Refusal]:
    """The preflight from published facts (a status snapshot), for ``reconciler validate``."""
    out: list[Refusal] = []
    refusal = rollout_refusal(rollout_phase)
    if refusal is not None:
        out.append(refusal)
    if not isinstance(facts, Mapping):
        return out
    for raw in facts.get("refusals") or ():
        if isinstance(raw, Mapping):
            out.append(Refusal(str(raw.get("node", "*")), str(raw.get("rule", "")),
                               str(raw.get("reason", ""))))
    more = _int(facts.get("refusalCount")) - len(facts.get("refusals") or ())
    if more > 0:
        out.append(Refusal("*", "more-refusals", f"and {more} more node refusal(s) not listed "
                                                 "in the status snapshot"))
    if enable_virt:
        names = [str(n) for n in facts.get("nonVirtualised") or ()]
        for name in names:
            out.append(Refusal(name, "sriov-unsupported",
                               "firmware is not virtualised; fwEnableVirt: true would change "
                               "non-virtualised to virtualised firmware, which needs a person "
                               "to confirm the server model supports it"))
        more = _int(facts.get("nonVirtualisedCount")) - len(names)
        if more > 0:
            out.append(Refusal("*", "sriov-unsupported",
                               f"and {more} more node(s) with non-virtualised firmware"))
    return sorted(out)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _driver(spec: Any) -> Mapping[str, Any]:
    driver = spec.get("driver") if isinstance(spec, Mapping) else None
    return driver if isinstance(driver, Mapping) else {}


def firmware_preflight_rule(snapshot: Mapping[str, Any] | None) -> PolicyRule:
    """A validation rule (``validate_document(extra_rules=...)``): a change that turns
    ``fwUpgradePolicy`` to ``PreferCloud`` is rejected for every node refusal the cluster's
    last status snapshot supports (``firmware.preflight``)."""
    firmware = snapshot.get("firmware") if isinstance(snapshot, Mapping) else None
    facts = firmware.get("preflight") if isinstance(firmware, Mapping) else None

    def rule(ctx: RuleContext) -> Iterator[Finding]:
        obj = ctx.doc.obj
        new = _driver(obj.get("spec") if isinstance(obj, Mapping) else None)
        if new.get("fwUpgradePolicy") != "PreferCloud":
            return
        if ctx.previous_spec is not None and \
                _driver(ctx.previous_spec).get("fwUpgradePolicy") == "PreferCloud":
            return  # not a new request
        enable_virt = new.get("fwEnableVirt") is True
        # a rollout in progress is the transition rules' finding (transition-locked-field)
        for refusal in offline_preflight(facts, enable_virt=enable_virt, rollout_phase=None):
            where = "" if refusal.node == "*" else f"node {refusal.node}: "
            yield ctx.doc.finding(
                FW_POLICY_POINTER, f"firmware-preflight-{refusal.rule}",
                f"firmware upgrade refused: {where}{refusal.reason}")

    return rule
