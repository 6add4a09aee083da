"""The firmware upgrade planner (docs/firmware.md): snapshot + settings + now in, actions and the
new ``status.firmwareUpgrade`` out. Pure: no Kubernetes, no clock.

Each pass reads everything it needs from the snapshot (status, node annotations, Events), so a
planner run after a restart, or after a write that was lost, asks again for what is missing and
nothing more.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler import planning
from reconciler.firmware.actions import (
    AnnotateNode,
    ApplyFirmwareSpec,
    Cordon,
    FirmwareAction,
    RecordEvent,
    RunRebootHook,
    Uncordon,
)
from reconciler.firmware.model import (
    STAGES,
    TERMINAL_STAGES,
    FirmwareNode,
    FirmwareRequest,
    FirmwareSettings,
    FirmwareSnapshot,
)
from reconciler.firmware.preflight import Refusal, preflight, published_facts, vbios_versions
from reconciler.names import (
    BOOT_ID_ANNOTATION,
    CORDONED_BEFORE_ANNOTATION,
    FLOW_ANNOTATION,
    FLOW_ANNOTATIONS,
    VBIOS_BEFORE_ANNOTATION,
)
from reconciler.names import FIRMWARE_DONE_PHASES as DONE_PHASES
from reconciler.timefmt import format_duration, format_seconds, parse_seconds

#: at most this many node names in a one-line message
_NAMES_SHOWN = 10
_RUNNING = ("Upgrading", "AwaitingReboot", "Verifying")


#: what ``plan`` returns; ``requeue_at`` is the next stage timeout
Plan = planning.Plan[FirmwareAction]


@dataclass(slots=True)
class _Pass:
    snap: FirmwareSnapshot
    now: float
    settings: FirmwareSettings
    status: dict[str, Any]
    actions: list[FirmwareAction] = field(default_factory=list)
    deadlines: list[float] = field(default_factory=list)

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.actions.append(RecordEvent("Warning" if warning else "Normal", reason, message))

    def deadline(self, since: float | None, timeout: float) -> bool:
        """Whether ``timeout`` after ``since`` has passed (0 = never); records the deadline."""
        if not timeout or since is None:
            return False
        if self.now >= since + timeout:
            return True
        self.deadlines.append(since + timeout)
        return False


def flow_id(request: Mapping[str, Any]) -> str:
    """A flow is named after its request, so a controller that acted but died before its status
    write recognises, when it starts the same request again, the nodes it already prepared."""
    digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
    return f"fw-{digest[:10]}"


def _flow_of(node: FirmwareNode) -> tuple[str, float] | None:
    """``(flow id, start epoch)`` from the node's flow annotation (``<flow>.<start epoch>``)."""
    flow, _, started = node.annotations.get(FLOW_ANNOTATION, "").partition(".")
    return (flow, float(started)) if flow and started.isdigit() else None


def reboot_token(flow: str, node: str) -> str:
    return f"{flow}-{node}"


def plan(snap: FirmwareSnapshot, now: float, settings: FirmwareSettings) -> Plan:
    status = copy.deepcopy(dict(snap.status))
    p = _Pass(snap, now, settings, status)
    status["preflight"] = published_facts(snap.nodes.values(), settings.labels)
    phase = str(status.get("phase") or "Idle")
    if phase in DONE_PHASES or phase == "Preflight":
        _idle(p)
    else:
        _running(p)
    before = {k: v for k, v in snap.status.items() if k != "updatedAt"}
    after = {k: v for k, v in status.items() if k != "updatedAt"}
    changed = before != after
    if changed:
        status["updatedAt"] = format_seconds(now)
    return planning.Plan(tuple(p.actions), status, changed, min(p.deadlines, default=None))


# -- no flow running: a new request? -----------------------------------------------------------

def _idle(p: _Pass) -> None:
    status, snap = p.status, p.snap
    status.setdefault("phase", "Idle")
    request = snap.request.to_json() if snap.request is not None else None
    if request is None or request in (status.get("request"), status.get("ignoredRequest")):
        # nothing new (a request taken over before is never run twice)
        if snap.request_error is not None:
            _warn(p, f"request not taken over: {snap.request_error}")
        elif snap.driver_spec.get("fwUpgradePolicy") == "PreferCloud":
            _warn(p, "fwUpgradePolicy is PreferCloud on the cluster but no firmware request "
                     "asked for it: nodes are neither cordoned nor verified; set it back to "
                     "Never and make a request (docs/firmware.md)")
        return
    assert snap.request is not None
    flow = flow_id(request)
    done_flow, _, done_phase = (snap.done or "").partition(":")
    if done_flow == flow:
        # finished before, but the status writes that said so were lost
        status.update({"phase": done_phase or "Completed", "request": request, "flow": flow,
                       "sourceCommit": snap.request.source_commit,
                       "message": f"this request already ran to {done_phase or 'its end'}; its "
                                  "per-node details were lost with a status write"})
        # ... and perhaps the restores after its final Never: finish them
        left = sorted(n for n, node in snap.nodes.items() if (_flow_of(node) or ("",))[0] == flow)
        if left:
            status["nodes"] = {name: {"stage": "awaiting-upgrade"} for name in left}
            status["phase"] = "Verifying"
            _ended_unrecorded(p, done_phase or "Completed")
            _finish(p, snap.request)
        return
    refusals = preflight(snap.nodes.values(), enable_virt=snap.request.fw_enable_virt,
                         keys=p.settings.labels, rollout_phase=snap.rollout_phase)
    # the same request started before (its status write lost): keep its start
    earlier = [f[1] for n in snap.nodes.values() if (f := _flow_of(n)) and f[0] == flow]
    started = format_seconds(min([*earlier, p.now]))
    for key in ("appliedAt", "finishedAt", "ignoredRequest", "flow", "aborted"):
        status.pop(key, None)
    status.update({
        "request": request,
        "flow": flow,
        "sourceCommit": snap.request.source_commit,
        "startedAt": started,
        "refusals": [r.to_json() for r in refusals],
    })
    if not refusals and not snap.nodes:
        refusals = [Refusal("*", "no-gpu-nodes", "there are no GPU nodes")]
        status["refusals"] = [r.to_json() for r in refusals]
    if refusals:
        shown = "; ".join(f"{r.node}: {r.reason}" if r.node != "*" else r.reason
                          for r in refusals[:3])
        more = f" (and {len(refusals) - 3} more)" if len(refusals) > 3 else ""
        status.update({"phase": "Refused", "nodes": {}, "finishedAt": started,
                       "message": f"firmware upgrade refused, nothing was touched: "
                                  f"{shown}{more}"})
        # Never under our field manager: the sync writes it back, so Git does not keep saying
        # PreferCloud for an upgrade that will not run (docs/gitops.md#git-stays-the-truth)
        virt = snap.driver_spec.get("fwEnableVirt")
        p.actions.append(ApplyFirmwareSpec("Never", virt if isinstance(virt, bool) else None,
                                           done=f"{flow}:Refused"))
        p.event("FirmwareUpgradeRefused", status["message"], warning=True)
        return
    status.update({
        "phase": "Cordoning",
        "nodes": {name: {"stage": "awaiting-upgrade", "since": started}
                  for name in sorted(snap.nodes)},
        "message": f"cordoning {len(snap.nodes)} GPU node(s)",
    })
    p.event("FirmwareUpgradeStarted",
            f"firmware upgrade started for {len(snap.nodes)} GPU node(s) "
            f"(fwEnableVirt: {str(snap.request.fw_enable_virt).lower()}, source commit "
            f"{snap.request.source_commit or 'none'})")
    _running(p)


def _warn(p: _Pass, message: str) -> None:
    """A standing problem: in the message, and one Warning event when it first shows."""
    if p.status.get("message") != message:
        p.event("FirmwareRequestIgnored", message, warning=True)
    p.status["message"] = message


# -- a flow is running ---------------------------------------------------------------------------

def _request(status: Mapping[str, Any]) -> FirmwareRequest:
    raw = status.get("request") or {}
    return FirmwareRequest(
        str(raw.get("fwUpgradePolicy", "PreferCloud")), raw.get("fwEnableVirt") is True,
        raw.get("sourceCommit"), raw.get("expectedVersion"))


def _running(p: _Pass) -> None:
    status, snap = p.status, p.snap
    request = _request(status)
    _refuse_other_request(p, request)
    done_flow, _, done_phase = (snap.done or "").partition(":")
    if done_flow == status.get("flow") and done_phase and status["phase"] != "Finishing":
        _ended_unrecorded(p, done_phase)
        _finish(p, request)
        return
    phase = status["phase"]
    if phase == "Cordoning":
        if _cordon_all(p) and _workloads_gone(p):
            if _spec_differs(snap, "PreferCloud", request.fw_enable_virt):
                p.actions.append(ApplyFirmwareSpec("PreferCloud", request.fw_enable_virt))
                return  # once the spec is applied, the next pass moves on
            status["appliedAt"] = format_seconds(p.now)
            status["phase"] = phase = "Upgrading"
        elif status["phase"] != "Finishing":  # still cordoning or waiting for workloads
            return
    if phase in _RUNNING:
        _cordon_all(p)
        _advance_nodes(p, request)
        stages = [n["stage"] for n in status["nodes"].values()]
        if not all(s in TERMINAL_STAGES for s in stages):
            _hold_spec(p, request)
        if all(s in TERMINAL_STAGES for s in stages):
            status["phase"] = "Finishing"
        elif "awaiting-reboot" in stages:
            status["phase"] = "AwaitingReboot"
        elif "awaiting-upgrade" in stages:
            status["phase"] = "Upgrading"
        else:
            status["phase"] = "Verifying"
        status["message"] = _progress_message(p)
    if status["phase"] == "Finishing":
        _finish(p, request)


def _ended_unrecorded(p: _Pass, phase: str) -> None:
    """The flow's final Never (with its end) was applied, but the status write that followed
    was lost, and the controller may have died before restoring every node: finish from what
    the end says. Nodes already restored carry no records and are not touched again; a node
    whose final stage was lost stays cordoned unless the flow completed (every node verified)
    or was aborted while cordoning (nothing was flashed)."""
    status = p.status
    if phase != "Completed" and status["phase"] == "Cordoning" and not status.get("aborted"):
        status["aborted"] = ("the flow was aborted while cordoning (its reason was lost with a "
                             "status write); nothing was upgraded")
    for entry in status["nodes"].values():
        if entry["stage"] not in TERMINAL_STAGES:
            if phase == "Completed":  # written only once every node was verified
                entry.clear()
                entry["stage"] = "verified"
            else:
                entry.update(stage="failed", since=format_seconds(p.now),
                             message="final stage lost with a status write; check this node")
    status["phase"] = "Finishing"


def _refuse_other_request(p: _Pass, running: FirmwareRequest) -> None:
    """A different request while a flow runs: firmware parameters cannot change now."""
    new = p.snap.request
    if new is None:
        return
    raw = new.to_json()
    if raw in (p.status.get("request"), p.status.get("ignoredRequest")):
        return
    p.status["ignoredRequest"] = raw
    reason = (f"firmware parameters cannot change while an upgrade is running: the request "
              f"from {new.source_commit or 'an unnamed source'} (fwEnableVirt: "
              f"{str(new.fw_enable_virt).lower()}) is refused; the running upgrade "
              f"(from {running.source_commit or 'an unnamed source'}) goes on")
    _add_refusal(p, "*", "firmware-running", reason)
    p.event("FirmwareRequestRefused", reason, warning=True)


def _add_refusal(p: _Pass, node: str, rule: str, reason: str) -> None:
    refusals = p.status.setdefault("refusals", [])
    entry = {"node": node, "rule": rule, "reason": reason}
    if entry not in refusals:
        refusals.append(entry)


def _spec_differs(snap: FirmwareSnapshot, policy: str, enable_virt: bool) -> bool:
    return (snap.driver_spec.get("fwUpgradePolicy") != policy
            or (snap.driver_spec.get("fwEnableVirt") is True) != enable_virt)


def _hold_spec(p: _Pass, request: FirmwareRequest) -> None:
    """Someone changed the firmware parameters on the object mid-flow: refuse, apply ours."""
    if not _spec_differs(p.snap, "PreferCloud", request.fw_enable_virt):
        return
    spec = p.snap.driver_spec
    reason = (f"firmware parameters cannot change while an upgrade is running: found "
              f"fwUpgradePolicy {spec.get('fwUpgradePolicy')!r}, fwEnableVirt "
              f"{spec.get('fwEnableVirt')!r} on the cluster; PreferCloud and fwEnableVirt "
              f"{str(request.fw_enable_virt).lower()} applied again")
    _add_refusal(p, "*", "firmware-locked", reason)
    p.actions.append(ApplyFirmwareSpec("PreferCloud", request.fw_enable_virt))
    p.event("FirmwareParametersRestored", reason, warning=True)


def _cordon_all(p: _Pass) -> bool:
    """Cordon every node of the flow that is not cordoned for it yet; True when all are."""
    flow = str(p.status.get("flow"))
    done = True
    for name, entry in p.status["nodes"].items():
        if entry["stage"] in TERMINAL_STAGES and p.status["phase"] != "Cordoning":
            continue
        node = p.snap.nodes.get(name)
        if node is None:
            if entry["stage"] not in TERMINAL_STAGES:
                _fail(p, name, "left the cluster during the firmware upgrade")
            continue
        prepared = (_flow_of(node) or ("", 0.0))[0] == flow
        if prepared and node.unschedulable:
            continue
        annotations: list[tuple[str, str]] = []
        if not prepared:
            annotations = [
                (FLOW_ANNOTATION, f"{flow}.{int(parse_seconds(p.status['startedAt']) or 0)}"),
                (BOOT_ID_ANNOTATION, node.boot_id),
                (VBIOS_BEFORE_ANNOTATION, node.labels.get(p.settings.labels.vbios_version, "")),
            ]
            if CORDONED_BEFORE_ANNOTATION not in node.annotations:
                annotations.append(
                    (CORDONED_BEFORE_ANNOTATION, "true" if node.unschedulable else "false"))
        if annotations:  # recorded in the cordon's own patch (the controller merges them)
            p.actions.append(AnnotateNode(name, dict(annotations)))
        p.actions.append(Cordon(name))
        done = False
    return done


def _restore(p: _Pass, name: str, *, uncordon: bool) -> None:
    """Remove the flow's records; uncordon a node that was not cordoned before (one patch)."""
    p.actions.append(AnnotateNode(
        name, dict.fromkeys((*FLOW_ANNOTATIONS, CORDONED_BEFORE_ANNOTATION))))
    if uncordon:
        p.actions.append(Uncordon(name))


def _workloads_gone(p: _Pass) -> bool:
    """The seed: no workload may run while the firmware is upgraded. Cordoned nodes take no new
    GPU pods; the flow waits for the running ones (named in the status) to finish, and fails
    the nodes that still run one after ``timeouts.workloads``."""
    nodes = p.status["nodes"]
    busy = {name: p.snap.nodes[name].workloads for name in sorted(nodes)
            if nodes[name]["stage"] not in TERMINAL_STAGES and name in p.snap.nodes
            and p.snap.nodes[name].workloads}
    for name, entry in nodes.items():
        if entry["stage"] == "awaiting-upgrade":
            if name in busy:
                entry["message"] = ("waiting for GPU workload(s) to finish: "
                                    f"{_names(list(busy[name]))}")
            else:
                entry.pop("message", None)
    if not busy:
        return True
    timeout = p.settings.timeouts.workloads
    if p.deadline(parse_seconds(p.status.get("startedAt")), timeout):
        # fwUpgradePolicy is cluster-wide: nothing is flashed, every node is restored
        reason = (f"GPU workload(s) still running after {format_duration(timeout)} on "
                  f"{_names(list(busy))}")
        for name, entry in nodes.items():
            if entry["stage"] not in TERMINAL_STAGES:
                pods = busy.get(name)
                _set_stage(p, name, "failed", f"not upgraded: {reason}" if pods is None else
                           f"GPU workload(s) still running: {_names(list(pods))}")
        p.status["aborted"] = f"{reason}; nothing was upgraded"
        p.status["phase"] = "Finishing"
        return False
    count = sum(len(v) for v in busy.values())
    p.status["message"] = (f"all GPU nodes cordoned; waiting for {count} GPU workload(s) on "
                           f"{len(busy)} node(s) to finish: {_names(list(busy))}")
    return False


def _set_stage(p: _Pass, name: str, stage: str, message: str | None = None, **extra: Any) -> None:
    """Entries stay small (10,000 nodes share one object with the rollout status): messages
    only where they tell something the stage does not, no ``since`` once verified."""
    entry: dict[str, Any] = {"stage": stage}
    if stage != "verified":
        entry["since"] = format_seconds(p.now)
    if message:
        entry["message"] = message
    entry.update(extra)
    p.status["nodes"][name] = entry


def _fail(p: _Pass, name: str, message: str) -> None:
    _set_stage(p, name, "failed", message)
    p.event("FirmwareNodeFailed", f"node {name}: {message}", warning=True)


def _expected(p: _Pass, request: FirmwareRequest) -> str | None:
    return request.expected_version or p.settings.expected_version


def _advance_nodes(p: _Pass, request: FirmwareRequest) -> None:
    status, snap, timeouts = p.status, p.snap, p.settings.timeouts
    started = parse_seconds(status.get("startedAt")) or 0.0
    applied = parse_seconds(status.get("appliedAt"))
    flow = str(status.get("flow"))
    hook = p.settings.reboot_mode == "hook"
    waiting_for_slot: list[str] = []
    for name in sorted(status["nodes"]):
        entry = status["nodes"][name]
        stage = entry["stage"]
        if stage in TERMINAL_STAGES:
            continue
        node = snap.nodes.get(name)
        if node is None:
            _fail(p, name, "left the cluster during the firmware upgrade")
            continue
        since = parse_seconds(entry.get("since"))
        rebooted = _rebooted(node)
        if stage == "awaiting-upgrade":
            if node.need_reboot_at is not None and node.need_reboot_at >= started:
                _set_stage(p, name, "awaiting-reboot")
                stage = "awaiting-reboot"
                since = p.now
            elif rebooted:
                _set_stage(p, name, "rebooting", "rebooted before reporting NodeNeedReboot")
                stage = "rebooting"
                since = p.now
            elif p.deadline(applied, timeouts.upgrade):
                _fail(p, name, f"no NodeNeedReboot event within "
                               f"{format_duration(timeouts.upgrade)} after PreferCloud was applied")
                continue
        if stage == "awaiting-reboot":
            if rebooted or not node.ready:
                _set_stage(p, name, "rebooting")
                stage = "rebooting"
                since = p.now
            elif not hook and p.deadline(since, timeouts.manual_reboot):
                _fail(p, name, f"not rebooted within {format_duration(timeouts.manual_reboot)} "
                               "after it reported NodeNeedReboot")
                continue
            elif hook:
                waiting_for_slot.append(name)
                continue
        if stage == "rebooting":
            _check_reboot(p, name, node, request, since, flow)
    _start_hooks(p, waiting_for_slot, flow)


def _rebooted(node: FirmwareNode) -> bool:
    before = node.annotations.get(BOOT_ID_ANNOTATION)
    return bool(before) and bool(node.boot_id) and node.boot_id != before


def _check_reboot(p: _Pass, name: str, node: FirmwareNode, request: FirmwareRequest,
                  since: float | None, flow: str) -> None:
    entry = p.status["nodes"][name]
    timeouts = p.settings.timeouts
    token = entry.get("rebootToken")
    if token is not None and token in p.snap.hook_failures:
        _fail(p, name, f"reboot hook failed: {p.snap.hook_failures[token]}")
        return
    if not (_rebooted(node) and node.ready):
        if p.deadline(since, timeouts.reboot):
            _fail(p, name, f"did not come back (Ready with a new boot ID) within "
                           f"{format_duration(timeouts.reboot)}")
        return
    versions = vbios_versions(node.labels, p.settings.labels)
    expected = _expected(p, request)
    before = [v for v in node.annotations.get(VBIOS_BEFORE_ANNOTATION, "").split("_") if v]
    shown = "_".join(versions) or "no version label"
    if expected is not None:
        ok = bool(versions) and all(v == expected for v in versions)
        wanted = f"expected {expected}"
    else:
        ok = bool(versions) and not set(versions) & set(before)
        wanted = f"expected a version other than {'_'.join(before) or 'the old one'}"
    if ok:
        _set_stage(p, name, "verified", version=shown)
        return
    back = parse_seconds(entry.get("backAt"))
    if back is None:
        back = p.now
        entry["backAt"] = format_seconds(p.now)
    if p.deadline(back, timeouts.verify):
        _fail(p, name, f"came back with VBIOS {shown}, {wanted}")
        return
    entry["message"] = f"back with VBIOS {shown}; waiting for the version label ({wanted})"


def _start_hooks(p: _Pass, waiting: list[str], flow: str) -> None:
    rebooting = sum(1 for e in p.status["nodes"].values() if e["stage"] == "rebooting")
    free = max(0, p.settings.max_concurrent_reboots - rebooting)
    for name in waiting[:free]:
        token = reboot_token(flow, name)
        p.actions.append(RunRebootHook(name, token))
        _set_stage(p, name, "rebooting", rebootToken=token,
                   rebootRequestedAt=format_seconds(p.now))
        if p.settings.timeouts.reboot:
            p.deadlines.append(p.now + p.settings.timeouts.reboot)


def _finish(p: _Pass, request: FirmwareRequest) -> None:
    """Every node verified or failed: Never, then restore the nodes (failed ones stay
    cordoned), then Completed or Failed."""
    status, snap = p.status, p.snap
    nodes = status["nodes"]
    aborted = status.get("aborted")
    failed = sorted(n for n, e in nodes.items() if e["stage"] == "failed")
    done = f"{status.get('flow')}:{'Failed' if aborted or failed else 'Completed'}"
    if _spec_differs(snap, "Never", request.fw_enable_virt) or snap.done != done:
        p.actions.append(ApplyFirmwareSpec("Never", request.fw_enable_virt, done=done))
    for name in sorted(nodes):
        node = snap.nodes.get(name)
        if node is None or (nodes[name]["stage"] != "verified" and not aborted):
            continue
        if any(k in node.annotations for k in (FLOW_ANNOTATION, CORDONED_BEFORE_ANNOTATION)):
            _restore(p, name, uncordon=node.annotations.get(CORDONED_BEFORE_ANNOTATION) == "false")
    if p.actions and any(isinstance(a, ApplyFirmwareSpec | AnnotateNode) for a in p.actions):
        status["message"] = "setting fwUpgradePolicy: Never and uncordoning verified nodes"
        return
    status["finishedAt"] = format_seconds(p.now)
    if aborted:
        status["phase"] = "Failed"
        status["message"] = f"{aborted}; every node is restored"
        p.event("FirmwareUpgradeFailed", status["message"], warning=True)
    elif failed:
        status["phase"] = "Failed"
        status["message"] = (f"{len(failed)} of {len(nodes)} node(s) failed and stay cordoned: "
                             f"{_names(failed)}; fwUpgradePolicy is Never")
        p.event("FirmwareUpgradeFailed", status["message"], warning=True)
    else:
        status["phase"] = "Completed"
        status["message"] = (f"all {len(nodes)} node(s) verified; fwUpgradePolicy is Never and "
                             "the nodes are restored")
        p.event("FirmwareUpgradeCompleted", status["message"])


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    return shown + (f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else "")


def _progress_message(p: _Pass) -> str:
    nodes = p.status["nodes"]
    counts = {s: 0 for s in STAGES}
    for entry in nodes.values():
        counts[entry["stage"]] += 1
    parts = [f"{counts[s]} {s}" for s in STAGES if counts[s]]
    message = ", ".join(parts)
    awaiting = sorted(n for n, e in nodes.items() if e["stage"] == "awaiting-reboot")
    if awaiting and p.settings.reboot_mode == "manual":
        message += f"; reboot: {_names(awaiting)}"
    failed = sorted(n for n, e in nodes.items() if e["stage"] == "failed")
    if failed:
        message += f"; failed: {_names(failed)}"
    return message
