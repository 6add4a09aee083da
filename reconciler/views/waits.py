"""What a rollout waits for (docs/dashboard.md): one list of typed entries, built once from a status
snapshot, the node states and ``now``, for ``reconciler status``, the dashboard, the demo and,
later, notifications and forge commit statuses.

Every entry (``Wait``) has a ``kind`` (one of ``KINDS``), a title, a detail, the exact action a
person takes and, for ``reconciler status``'s text, the whole of it in one sentence (``text``).
What the planner holds fresh starts for is read as data, never parsed back from a message: the
recorded holds (``upgradeStatus.holds`` in builtin mode, the snapshot's ``holds`` in operator
mode: ``{kind, until, detail}``), the health checks' verdicts (``upgradeStatus.health``) and the
promotion gate's (``promotion.held``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from reconciler.firmware.status_view import firmware_rows
from reconciler.names import ACTIVE_PHASES
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.stored_status import conditions_by_type
from reconciler.timefmt import format_clock, format_time, format_wait
from reconciler.timefmt import parse_time_or_none as parse_time
from reconciler.views.nodes import NodeStates

#: every kind of entry, in the order entries are listed
KINDS: Final = ("rejection", "fallback", "gate", "policy-pause", "pause", "health", "window",
                "promotion", "draining", "busy", "unavailable", "firmware")
#: kinds that stop the rollout until a person acts or a hold ends (a gate does not: the
#: dashboard's prediction counts it and says so)
HOLDING_KINDS: Final = frozenset({"fallback", "policy-pause", "rejection", "window",
                                  "promotion"})
#: the kinds a recorded hold may have (``upgradeStatus.holds``)
HOLD_KINDS: Final = frozenset({"window", "health", "draining"})
#: a health check's verdicts that hold the rollout (``reconciler.health.checks.HealthState``)
_WAITING_HEALTH, _FAILED_HEALTH = "Waiting", "Failed"


@dataclass(frozen=True, slots=True)
class Wait:
    """One thing the rollout waits for, with the exact action a person takes."""

    kind: str  # one of KINDS
    title: str
    detail: str = ""
    #: what a person does: a Git change (``change``), a command, or nothing (it goes on)
    action: str = ""
    #: the file and the edit for a Git change: {path, line, before, after, field}
    change: Mapping[str, Any] | None = None
    until: str | None = None  # RFC 3339: when a timer ends, a window opens, a gate may pass
    nodes: tuple[str, ...] = ()
    items: tuple[str, ...] = ()  # e.g. the pods to finish, the findings, the checks' values
    #: the entry in one sentence (``reconciler status``'s text output)
    text: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["nodes"] = list(self.nodes)
        data["items"] = list(self.items)
        data["change"] = dict(self.change) if self.change else None
        return data


@dataclass(frozen=True, slots=True)
class GitContext:
    """What the Git side knows for the actions: where the cluster's policy lives. ``None`` in
    place of a context: no Git (controller-only mode), a person patches the object."""

    policy_file: str | None = None  # path of the file holding upgradePolicy
    pause_line: int | None = None  # 1-based line of ``pause:`` in it, if present
    branch: str = "main"


def pause_line(text: bytes | None) -> int | None:
    """The 1-based line of ``pause:`` under ``upgradePolicy`` in a policy file."""
    if not text:
        return None
    try:
        for doc in YAML(typ="rt").load_all(text.decode("utf-8", "replace")):
            try:
                policy = doc["spec"]["driver"]["upgradePolicy"]
            except (KeyError, TypeError, IndexError):
                continue
            if "pause" in policy:
                return int(policy.lc.key("pause")[0]) + 1
    except (YAMLError, AttributeError, ValueError):
        return None
    return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def pause_change(git: GitContext | None, object_name: str, *,
                 value: str = "false") -> tuple[str, Mapping[str, Any] | None]:
    """The action that sets ``pause`` to ``value``, and the Git edit (None: a patch)."""
    if git is None:
        patch = ('{"spec":{"driver":{"upgradePolicy":{"pause":' + value + '}}}}')
        return (f"kubectl patch clusteroperator {object_name} --type merge -p '{patch}'", None)
    if git.policy_file is None:
        return f"merge a change to `pause: {value}` into {git.branch}", None
    where = f"{git.policy_file}:{git.pause_line}" if git.pause_line else git.policy_file
    return (
        f"merge a change of {where} to `pause: {value}` into {git.branch}",
        {"path": git.policy_file, "line": git.pause_line, "before": "pause: true",
         "after": f"pause: {value}", "field": "spec.driver.upgradePolicy.pause"},
    )


def health_rows(health: Mapping[str, Any]) -> list[dict[str, str]]:
    """``upgradeStatus.health.checks`` as rows, by check name: check, node (node checks),
    state (Passed, Waiting, Failed), value, since."""
    rows = []
    for name, entry in sorted(_mapping(health.get("checks")).items()):
        entry = _mapping(entry)
        rows.append({"check": str(name), "node": str(entry.get("node") or ""),
                     "state": str(entry.get("state") or ""),
                     "value": str(entry.get("value") or ""),
                     "since": str(entry.get("since") or "")})
    return rows


def recorded_holds(snapshot: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The holds recorded as data: ``upgradeStatus.holds`` (builtin mode) and the snapshot's
    ``holds`` (operator mode), each ``{kind, until, detail}``."""
    upgrade = _mapping(snapshot.get("upgradeStatus"))
    out: list[Mapping[str, Any]] = []
    for source in (upgrade.get("holds"), snapshot.get("holds")):
        if isinstance(source, list):
            out += [h for h in source if isinstance(h, Mapping)
                    and h.get("kind") in HOLD_KINDS and h not in out]
    return out


@dataclass(frozen=True, slots=True)
class _Rollout:
    """The few facts of the snapshot every entry reads."""

    phase: str
    active: bool
    step: str  # "i/n"
    step_state: str
    failures: int
    max_failures: int
    conditions: Mapping[str, Mapping[str, Any]]  # type -> condition, status True only
    pause: bool  # the policy's ``pause: true``
    recheck: float | None


def max_failure_threshold(policy: Mapping[str, Any]) -> int:
    """The policy's ``maxFailureThreshold`` as the planner reads it (its default when the policy
    does not parse)."""
    try:
        return UpgradePolicy.from_spec(policy).max_failure_threshold
    except (ValueError, TypeError, KeyError):
        return UpgradePolicy().max_failure_threshold


def _rollout(snapshot: Mapping[str, Any]) -> _Rollout:
    upgrade = _mapping(snapshot.get("upgradeStatus"))
    inner = _mapping(upgrade.get("status"))
    policy = _mapping(_mapping(_mapping(snapshot.get("spec")).get("driver")).get(
        "upgradePolicy"))
    steps = [s for s in policy.get("upgradeSteps") or () if isinstance(s, Mapping)]
    index = _int(inner.get("currentStepIndex"))
    phase = str(upgrade.get("phase") or "unknown")
    return _Rollout(
        phase=phase,
        active=phase in ACTIVE_PHASES,
        step=f"{index}/{len(steps)}" if steps else str(index),
        step_state=str(inner.get("currentStepState") or ""),
        failures=_int(inner.get("currentFailureRetry")),
        max_failures=max_failure_threshold(policy),
        conditions=dict(conditions_by_type(upgrade)),
        pause=policy.get("pause") is True,
        recheck=parse_time(inner.get("recheckTime")),
    )


def waits(snapshot: Mapping[str, Any], *, now: float, nodes: NodeStates | None = None,
          git: GitContext | None = None, object_name: str = "cluster-operator") -> list[Wait]:
    """What the rollout the status ``snapshot`` describes waits for, and why, each entry with
    the action a person takes. ``nodes``: the node states (when the cluster is read);
    ``git``: where the policy lives (None: no Git, the object is patched)."""
    r = _rollout(snapshot)
    nodes = nodes or NodeStates()
    out: list[Wait] = []
    rejection = _mapping(snapshot.get("rejection"))
    if rejection:
        out.append(_rejection(rejection))
    if r.active and r.step_state == "StepPaused":
        out += _paused(r, nodes, git, object_name, now=now)
    elif r.active and r.pause:
        action, change = pause_change(git, object_name)
        out.append(Wait(kind="policy-pause", title="a person: the policy says `pause: true`",
                        detail="nodes in flight finish; nothing new starts",
                        action=action, change=change,
                        text="a person: the policy says `pause: true`; merge `pause: false` "
                             "to go on"))
    holds = recorded_holds(snapshot)
    if r.active:
        out += _health(_mapping(_mapping(snapshot.get("upgradeStatus")).get("health")), holds)
        out += [_window(h, now=now) for h in holds if h.get("kind") == "window"]
    out += _promotion(_mapping(snapshot.get("promotion")))
    out += _draining(nodes, [h for h in holds if h.get("kind") == "draining"],
                     draining_entries(_mapping(snapshot.get("upgradeStatus"))))
    if nodes.busy:
        out.append(_per_node(
            "busy", {n: ", ".join(p) for n, p in nodes.busy.items()},
            title=f"busy nodes: {len(nodes.busy)} wait for their GPU pods to finish",
            detail="a node that runs GPU pods waits (it is not failed)",
            action="let these pods finish (or move them off the nodes); the nodes then upgrade",
            lead="busy nodes (GPU pods must finish first)"))
    if r.active and nodes.unavailable:
        out.append(_per_node(
            "unavailable", nodes.unavailable,
            title=f"unavailable nodes: {len(nodes.unavailable)} (maxUnavailable counts them)",
            detail="fresh starts wait while more nodes than maxUnavailable are unavailable",
            action="bring the nodes back (Ready, uncordoned) or remove them from the cluster",
            lead="unavailable nodes"))
    firmware = _mapping(snapshot.get("firmware"))
    if firmware.get("phase") == "AwaitingReboot":
        waiting = tuple(row.node for row in firmware_rows(firmware)
                        if row.stage == "awaiting-reboot")
        named = ", ".join(waiting) or "the nodes"
        out.append(Wait(kind="firmware", title="a person: reboot the nodes (firmware upgrade)",
                        detail="the new firmware is flashed; it takes effect after a reboot, "
                               "and the flow goes on when each node is back",
                        action=f"reboot {named}" if waiting else
                        "reboot the nodes the firmware upgrade names",
                        nodes=waiting, text=f"a person: reboot {named} (firmware upgrade)"))
    return out


def _per_node(kind: str, reasons: Mapping[str, str], *, title: str, detail: str, action: str,
              lead: str) -> Wait:
    """An entry about nodes, each with why (``reasons``: node -> why)."""
    named = ", ".join(f"{n} ({why})" for n, why in sorted(reasons.items()))
    return Wait(kind=kind, title=title, detail=detail, action=action, nodes=tuple(reasons),
                items=tuple(f"{n}: {why}" for n, why in reasons.items()),
                text=f"{lead}: {named}")


def _rejection(rejection: Mapping[str, Any]) -> Wait:
    findings = [f for f in rejection.get("findings") or () if isinstance(f, Mapping)]
    first = findings[0] if findings else {}
    commit = str(rejection.get("commit", ""))[:12]
    where = f"{first.get('file', '')}:{first.get('line', '')}".strip(":")
    return Wait(
        kind="rejection",
        title=f"a fixed commit: {commit} was rejected",
        detail=str(first.get("message", "")),
        action=f"fix {first.get('file', 'the policy file')}"
               + (f" line {first.get('line')}" if first.get("line") else "")
               + " and merge the fix",
        items=tuple(f"{f.get('file', '')}:{f.get('line', '')}: {f.get('message', '')}"
                    for f in findings),
        text=f"a fixed commit: {commit} was rejected ({where}: {first.get('message', '')})",
    )


def _paused(r: _Rollout, nodes: NodeStates, git: GitContext | None, object_name: str, *,
            now: float) -> list[Wait]:
    action, change = pause_change(git, object_name)
    if "BatchFailed" in r.conditions:
        message = str(r.conditions["BatchFailed"].get("message", ""))
        return [Wait(
            kind="fallback",
            title=f"a person: the batch failed ({r.failures} of {r.max_failures} failures)",
            detail=message,
            action=f"fix the cause, then {action} (or set `enableRollout: false` to roll back)",
            change=change,
            nodes=tuple(nodes.failed),
            items=tuple(f"{n}: {why}" for n, why in nodes.failed.items()),
            text=f"a person: the batch failed ({message}); fix the cause, then merge "
                 "`pause: false` (or `enableRollout: false` to roll back)",
        )]
    if "ManualGate" in r.conditions:
        return [Wait(
            kind="gate", title=f"a person: step {r.step} is done (manual gate)",
            detail="the next batch starts when the gate is released",
            action=action, change=change,
            text=f"a person: step {r.step} is done; merge `pause: false` to release the next "
                 "batch (manual gate)",
        )]
    if r.pause:
        return [Wait(kind="policy-pause", title="a person: the policy says `pause: true`",
                     detail="no node starts while the policy pauses the rollout; nodes in "
                            "flight finish",
                     action=action, change=change,
                     text="a person: the policy says `pause: true`; merge `pause: false` to "
                          "go on")]
    if r.recheck is None:
        return []
    left = r.recheck - now
    return [Wait(
        kind="pause",
        title=f"the pause after step {r.step}: {format_wait(left)} left" if left > 0
        else "the pause ended; the next step starts now",
        detail=f"the step's pauseDuration runs until {format_clock(r.recheck)}",
        until=format_time(r.recheck)[:19] + "Z",
        action="nothing: the next step starts by itself",
        text=f"the pause timer: {format_wait(left)} left (until {format_clock(r.recheck)})"
        if left > 0 else "the pause timer ended; the next step starts now",
    )]


def _health(health: Mapping[str, Any], holds: Sequence[Mapping[str, Any]]) -> list[Wait]:
    """A check that waits for an answer or failed (docs/health.md): each check, its value and since
    when; a recorded health hold (no answer, a section that does not validate)."""
    out = []
    for row in health_rows(health):
        if row["state"] not in (_WAITING_HEALTH, _FAILED_HEALTH):
            continue
        where = f" on {row['node']}" if row["node"] else ""
        failed = row["state"] == _FAILED_HEALTH
        title = f"health check {row['check']}{where}: {row['state'].lower()}"
        detail = f"value {row['value'] or 'none'} since {row['since'] or '?'}"
        out.append(Wait(
            kind="health", title=title, detail=detail,
            nodes=(row["node"],) if row["node"] else (),
            items=(f"{row['check']}: {row['value']} since {row['since']}",),
            action=(f"look at {row['node'] or 'the step'}: the failure counts toward "
                    "maxFailureThreshold (the node is retried, or the batch falls back)")
            if failed else "nothing: the rollout goes on when the check passes (it fails if "
                           "it does not pass in time)",
            text=f"{title} ({detail})",
        ))
    for hold in holds:
        if hold.get("kind") != "health":
            continue
        detail = str(hold.get("detail") or "")
        out.append(Wait(
            kind="health", title="the health checks hold fresh node starts", detail=detail,
            action="fix the `health` section of reconciler.yaml or the metrics source it "
                   "queries (Prometheus); starts resume on the next answer",
            text=f"the health checks hold fresh node starts ({detail})",
        ))
    return out


def _window(hold: Mapping[str, Any], *, now: float) -> Wait:
    """A closed maintenance calendar (docs/configuration.md#maintenance-windows): why, and when the
    next window opens."""
    why = str(hold.get("detail") or "outside the maintenance windows")
    until = hold.get("until")
    opens = parse_time(until)
    if opens is None:
        return Wait(kind="window", title=f"a maintenance window ({why})",
                    detail="no window opens within 5 years",
                    action="change `windows` in reconciler.yaml",
                    text=f"a maintenance window ({why}); no window opens within 5 years")
    return Wait(
        kind="window", title=f"a maintenance window ({why})",
        detail=f"fresh node starts wait until {until} ({format_wait(opens - now)} from now)",
        until=str(until),
        action="nothing: fresh node starts resume when the window opens (nodes in flight "
               "finish; repairs are not held)",
        text=f"a maintenance window ({why}): fresh node starts wait until {until} "
             f"({format_wait(opens - now)} from now)",
    )


def _promotion(promotion: Mapping[str, Any]) -> list[Wait]:
    """The promotion gate holds a merged change (docs/configuration.md#promotion): the upstream and
    the earliest time; the upstream rolled back what this cluster runs (reported, never acted
    on)."""
    out = []
    rolled = _mapping(promotion.get("upstreamRolledBack"))
    if rolled:
        out.append(Wait(
            kind="promotion", title=f"a person: {rolled.get('message')}",
            detail=f"upstream {rolled.get('upstream')} rolled back {rolled.get('version')}",
            action="decide whether to roll back here too (`enableRollout: false`, or a "
                   "change of the payload version)",
            text=f"a person: {rolled.get('message')}; decide whether to roll back here too",
        ))
    held = _mapping(promotion.get("held"))
    if held:
        earliest = held.get("earliest")
        upstream = held.get("upstream")
        out.append(Wait(
            kind="promotion",
            title=f"the promotion gate: {held.get('version')} waits for {upstream}",
            detail=str(held.get("reason") or ""),
            until=str(earliest) if earliest else None,
            action=f"nothing: the change is applied when the gate opens (at {earliest} at the "
                   "earliest)" if earliest else
                   f"nothing here: the change is applied once {upstream} has completed "
                   f"{held.get('version')} and it soaked there",
            text=f"the promotion gate: {held.get('version')} waits for {upstream} "
                 f"({held.get('reason')})",
        ))
    return out


def draining_entries(upgrade: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``upgradeStatus.draining`` (docs/live-clusters.md#the-drain): per draining node (name order,
    at most 20) ``{node, since, pods, budgets, waitingFor}``: the pods the drain still has to evict,
    the budgets (disruptionsAllowed 0) that hold them, the pods it waits for (with why)."""
    raw = upgrade.get("draining")
    return [e for e in raw if isinstance(e, Mapping) and isinstance(e.get("node"), str)] \
        if isinstance(raw, list) else []


def _names(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def draining_line(entry: Mapping[str, Any]) -> str:
    """One draining node's entry in words: what it evicts, what holds it, what it waits for."""
    parts = []
    pods, budgets, waiting = (_names(entry.get(k)) for k in ("pods", "budgets", "waitingFor"))
    if pods:
        parts.append("evicting " + ", ".join(pods))
    if budgets:
        parts.append(("held by budget " if len(budgets) == 1 else "held by budgets ")
                     + ", ".join(budgets))
    if waiting:
        parts.append("waiting for " + ", ".join(waiting))
    return "; ".join(parts) or "its pods are going"


def _draining(nodes: NodeStates, holds: Sequence[Mapping[str, Any]],
              entries: Sequence[Mapping[str, Any]]) -> list[Wait]:
    """Nodes whose pods are being evicted (or waited for) before they upgrade
    (docs/live-clusters.md#waiting-for-jobs): from the node states, the status's ``draining`` list
    (pods and the budgets that hold them) and a recorded hold."""
    if not nodes.draining and not holds and not entries:
        return []
    recorded = {str(e["node"]): e for e in entries}
    reasons = {n: ", ".join(pods) or "its pods are going" for n, pods in nodes.draining.items()}
    reasons.update({n: draining_line(e) for n, e in recorded.items()})
    named = sorted(reasons)
    budgets = sorted({b for e in entries for b in _names(e.get("budgets"))})
    held = "; ".join(str(h.get("detail") or "") for h in holds if h.get("detail"))
    detail = "; ".join(filter(None, (held, "PodDisruptionBudgets hold evictions: "
                                     + ", ".join(budgets) if budgets else "")))
    until = next((str(h["until"]) for h in holds if h.get("until")), None)
    count = len(named)
    title = (f"draining nodes: {count} wait for their pods to be evicted" if count
             else "draining nodes: pods are being evicted")
    action = ("nothing: the nodes upgrade once their pods are evicted or have finished (a "
              "PodDisruptionBudget may hold an eviction: `kubectl get pdb -A`; the pods "
              "waitFor selects are waited for until waitFor.timeout)")
    if budgets:
        action = ("nothing: evictions go on as the budgets allow (" + ", ".join(budgets)
                  + ": `kubectl get pdb -A`); to go faster, let a budget allow a disruption "
                    "(more replicas, or a looser minAvailable); after drain.timeout, "
                    "onTimeout decides (wait, fail or delete)")
    items = tuple(f"{n}: {reasons[n]}" for n in named)
    # the items name the budgets already: the sentence adds only a recorded hold's detail
    text = title + (": " + "; ".join(items) if items else "") + (f" ({held})" if held else "")
    return [Wait(kind="draining", title=title, detail=detail, until=until, nodes=tuple(named),
                 items=items, action=action, text=text)]
