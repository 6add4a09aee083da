"""What merging a change does to each cluster (docs/plan.md, ``reconciler plan``): pure.

Per cluster it takes the policy object at the ref and in the working tree, the cluster's
settings (``reconciler.yaml`` as the cluster sees it) at both, the settings the merge brings
resolved (``reconciler.config``), its last status snapshot and the located findings ``validate
--against`` gives its files, and says which change the merge is: a rollout (steps resolved to
node counts, its predicted duration and end from the simulator with the planner settings the
controller would run, ``PlannerSettings.for_pass``: readyTimeout, drain, waitFor,
unavailableNodes and topology, with the cluster's windows, health checks and measured install
time), settings only, the firmware flow, a promotion hold (until when), a refusal, or nothing.
Rendering (text, markdown for a pull-request comment, JSON) is here too, so every output says the
same.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from reconciler.config.settings import ClusterSettings
from reconciler.files import printable
from reconciler.fleet.promotion import payload_version, same_version
from reconciler.policy.findings import Finding
from reconciler.policy.upgrade_policy import UpgradePolicy, pause_ms_of
from reconciler.rollout.model import PlannerSettings
from reconciler.rollout.simulator import MODEL_MAX_NODES, SimConfig, simulate
from reconciler.rollout.topology import UNLABELLED
from reconciler.timefmt import LATEST_TIME, format_duration, format_seconds

Change = Literal["rollout", "settings", "firmware", "held", "refused", "none"]

#: the install time assumed when the cluster's snapshot measured none (``simulate``'s default)
DEFAULT_INSTALL_SECONDS = 60.0
#: the longest rollout the model runs (windows can stretch a rollout over weeks)
PREDICTION_HORIZON = 60 * 24 * 3600.0
#: GitHub refuses a comment longer than this (characters)
COMMENT_LIMIT = 65_536
PROMOTION_RULE = "promotion-gate"
PREFER_CLOUD = "PreferCloud"
#: most changed field paths a plan names per cluster (the diff has the rest)
MAX_CHANGED_PATHS = 20


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True, slots=True)
class ClusterInput:
    """One cluster's side of the change."""

    cluster: str
    #: the policy object at the ref (None: no policy file there, a new cluster)
    before: Mapping[str, Any] | None
    #: the policy object in the working tree (None: removed, or not parsable)
    after: Mapping[str, Any] | None
    #: ``reconciler.yaml`` as the cluster sees it, as written (repository-wide, then
    #: ``clusters.<name>``): what the plan compares
    settings_before: Mapping[str, Any] = field(default_factory=dict)
    settings_after: Mapping[str, Any] = field(default_factory=dict)
    #: the cluster's last status snapshot
    snapshot: Mapping[str, Any] | None = None
    #: what ``validate --against`` says about the cluster's files, located
    findings: tuple[Finding, ...] = ()
    #: the cluster's settings as the merge brings them, resolved: what the prediction runs
    settings: ClusterSettings = field(default_factory=ClusterSettings)
    #: when the promotion gate passes by time alone (None: no gate, or it needs the upstream)
    promotion_earliest: float | None = None


@dataclass(frozen=True, slots=True)
class PlanStep:
    step: int
    #: as written: ``2`` or ``"50%"``
    replicas: str
    #: nodes this step adds (None: the node count is unknown)
    nodes: int | None
    #: nodes on the new driver when the step is done
    target: int | None
    #: the pause after the step in seconds; None: a manual gate (``pauseDuration`` left out,
    #: or ``{}``)
    pause_seconds: float | None
    #: ``toleration`` as written (None: left out, 0)
    toleration_written: str | None = None
    #: failures the step tolerates, resolved against its batch
    #: (docs/rollout.md#failures-tolerated-in-a-step; None: the node count is unknown)
    toleration: int | None = 0

    @property
    def gate(self) -> bool:
        return self.pause_seconds is None

    def toleration_label(self) -> str:
        """The failures the step tolerates: the count, with the percentage written."""
        count = "?" if self.toleration is None else str(self.toleration)
        written = self.toleration_written
        return f"{count} ({written})" if written is not None and written.endswith("%") else count

    def pause_label(self) -> str:
        if self.pause_seconds is None:
            return "gate (a person merges pause: false)"
        return "none" if self.pause_seconds == 0 else format_duration(self.pause_seconds)

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "nodes": self.nodes, "pause": "gate" if self.gate
                else self.pause_seconds, "target": self.target, "replicas": self.replicas,
                "gate": self.gate, "toleration": self.toleration}


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    """What merging does to one cluster: ``to_json`` gives the keys of docs/plan.md and more."""

    cluster: str
    change: Change
    #: the version in the ref's policy file, and the working tree's
    from_version: str | None
    to_version: str | None
    #: the rollout nodes (None: the snapshot does not say)
    nodes: int | None = None
    #: where ``nodes`` comes from: ``fleet.nodes``, ``totalUpgradeReplicas`` or None
    nodes_source: str | None = None
    install_seconds: float = DEFAULT_INSTALL_SECONDS
    install_assumed: bool = True
    #: the rollout nodes per domain of ``rollout.topology``'s key the prediction ran on
    #: (``fleet.domains`` of the snapshot; None: no topology, or the snapshot has none for it)
    domains: Mapping[str, int] | None = None
    steps: tuple[PlanStep, ...] = ()
    predicted_seconds: float | None = None
    predicted_end: str | None = None
    predicted_start: str | None = None
    held_until: str | None = None
    findings: tuple[Finding, ...] = ()
    policy_changes: tuple[str, ...] = ()
    settings_changes: tuple[str, ...] = ()
    firmware: bool = False
    #: why there is no prediction, or what the change means beyond the table
    notes: tuple[str, ...] = ()

    @property
    def gates(self) -> int:
        return sum(step.gate for step in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "change": self.change,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "nodes": self.nodes,
            "nodes_source": self.nodes_source,
            "install_seconds": self.install_seconds,
            "install_assumed": self.install_assumed,
            "domains": dict(self.domains) if self.domains is not None else None,
            "steps": [step.to_json() for step in self.steps],
            "gates": self.gates,
            "predicted_start": self.predicted_start,
            "predicted_seconds": self.predicted_seconds,
            "predicted_end": self.predicted_end,
            "held_until": self.held_until,
            "findings": [f.as_dict() for f in self.findings],
            "policy_changes": list(self.policy_changes),
            "settings_changes": list(self.settings_changes),
            "firmware": self.firmware,
            "notes": list(self.notes),
        }


# -- deciding ------------------------------------------------------------------------------------

def changed_paths(before: Any, after: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths of the leaves that differ (a list compares as a whole)."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        for key in sorted(set(before) | set(after), key=str):
            yield from changed_paths(before.get(key), after.get(key),
                                     f"{prefix}.{key}" if prefix else str(key))
    elif before != after:
        yield prefix or "(document)"


def _fleet_nodes(snapshot: Mapping[str, Any] | None) -> tuple[int | None, str | None]:
    snap = _mapping(snapshot)
    nodes = _count(_mapping(snap.get("fleet")).get("nodes"))
    if nodes is not None:
        return nodes, "fleet.nodes"
    total = _count(_mapping(_mapping(snap.get("upgradeStatus")).get("status")).get(
        "totalUpgradeReplicas"))
    if total is not None:
        return total, "totalUpgradeReplicas"
    return None, None


def _domains(snapshot: Mapping[str, Any] | None, key: str, nodes: int
             ) -> tuple[dict[str, int] | None, str | None]:
    """The snapshot's rollout nodes per domain of ``key``; (None, why not) when it has none for
    that key or they do not add up to ``nodes``."""
    measured = _mapping(_mapping(_mapping(snapshot).get("fleet")).get("domains"))
    counts = _mapping(measured.get("nodes"))
    if measured.get("key") != key or not counts:
        return None, (f"the last status snapshot counted no domains of {key} (the sync counts "
                      "them once the key is in force), so every node is in one domain")
    domains = {str(name): n for name, n in counts.items() if _count(n) is not None}
    if sum(domains.values()) != nodes:
        return None, (f"the domains of {key} in the last status snapshot hold "
                      f"{sum(domains.values())} nodes, not {nodes}, so every node is in one "
                      "domain")
    return domains, None


def labelled_fleet(key: str, domains: Mapping[str, int]
                   ) -> tuple[tuple[str, Mapping[str, str]], ...]:
    """Nodes ``node-00001`` .. carrying ``key`` as ``domains`` count them (the domain without
    the label: nodes without it), domain after domain."""
    fleet: list[tuple[str, Mapping[str, str]]] = []
    for domain, count in domains.items():
        labels = {} if domain == UNLABELLED else {key: domain}
        first = len(fleet) + 1
        fleet.extend((f"node-{first + i:05d}", labels) for i in range(count))
    return tuple(fleet)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def _install(snapshot: Mapping[str, Any] | None) -> tuple[float, bool]:
    measured = _mapping(_mapping(snapshot).get("fleet")).get("installSeconds")
    if (isinstance(measured, int | float) and not isinstance(measured, bool)
            and math.isfinite(measured) and measured > 0):
        return float(measured), False
    return DEFAULT_INSTALL_SECONDS, True


def _driver(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return _mapping(_mapping(_mapping(obj).get("spec")).get("driver"))


def _steps(policy: Mapping[str, Any], nodes: int | None) -> tuple[PlanStep, ...]:
    raw_steps = [s for s in policy.get("upgradeSteps") or () if isinstance(s, Mapping)]
    targets: list[int] = []
    tolerations: list[int] = []
    if nodes is not None:
        try:
            model = UpgradePolicy.from_spec(policy)
            targets = model.step_targets(nodes)
            tolerations = model.step_tolerations(nodes)
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            targets = tolerations = []
    steps = []
    before = 0
    for index, raw in enumerate(raw_steps):
        target = targets[index] if index < len(targets) else None
        pause = pause_ms_of(raw)  # left out (or {}): a gate
        written = raw.get("toleration")
        steps.append(PlanStep(index + 1, str(raw.get("replicas")),
                              None if target is None else max(target - before, 0), target,
                              None if pause is None else pause / 1000,
                              None if written is None else str(written),
                              tolerations[index] if index < len(tolerations) else None))
        if target is not None:
            before = max(before, target)
    return tuple(steps)


def classify(inp: ClusterInput) -> Change:
    """Which change merging is for the cluster (docs/plan.md): a cluster whose only errors are
    ``promotion-gate`` is held, any other error refuses it; then a new driver version starts a
    rollout, ``PreferCloud`` the firmware flow, and anything else that differs is settings."""
    errors = [f for f in inp.findings if f.is_error]
    if errors:
        return "held" if all(f.rule == PROMOTION_RULE for f in errors) else "refused"
    if inp.after is None:
        return "none"
    to_version = payload_version(inp.after)
    if to_version is not None and not same_version(payload_version(inp.before), to_version):
        return "rollout"
    if _asks_firmware(inp):
        return "firmware"
    if inp.before != inp.after or inp.settings_before != inp.settings_after:
        return "settings"
    return "none"


def _asks_firmware(inp: ClusterInput) -> bool:
    return (_driver(inp.after).get("fwUpgradePolicy") == PREFER_CLOUD
            and _driver(inp.before).get("fwUpgradePolicy") != PREFER_CLOUD)


def plan_cluster(inp: ClusterInput, *, now: float) -> ClusterPlan:
    """The change merging brings to one cluster, predicted from ``now``."""
    change = classify(inp)
    firmware = _asks_firmware(inp)
    nodes, nodes_source = _fleet_nodes(inp.snapshot)
    install, assumed = _install(inp.snapshot)
    plan = ClusterPlan(
        inp.cluster, change, payload_version(inp.before), payload_version(inp.after), nodes,
        nodes_source, install, assumed, findings=inp.findings,
        policy_changes=tuple(changed_paths(inp.before or {}, inp.after or {}))[
            :MAX_CHANGED_PATHS],
        settings_changes=tuple(changed_paths(inp.settings_before, inp.settings_after))[
            :MAX_CHANGED_PATHS],
        firmware=firmware)
    notes: list[str] = []
    if inp.after is None:
        notes.append("the policy file is removed: the reconciler applies nothing more here; "
                     "the cluster keeps what it runs")
    if firmware and change in ("rollout", "held"):
        notes.append("the merge also asks for the firmware upgrade (fwUpgradePolicy: "
                     "PreferCloud)")
    if firmware and change == "firmware":
        notes.append("the firmware orchestrator checks every node first, cordons the GPU "
                     "nodes and waits for each node's reboot (docs/firmware.md)")
    if change not in ("rollout", "held"):
        return replace(plan, notes=tuple(notes))
    return _rollout(plan, inp, notes, now=now)


def _rollout(plan: ClusterPlan, inp: ClusterInput, notes: list[str], *, now: float
             ) -> ClusterPlan:
    """A rollout's steps and prediction (held: from the time the gate opens)."""
    start = now
    if plan.change == "held":
        if inp.promotion_earliest is not None:
            plan = replace(plan, held_until=format_seconds(inp.promotion_earliest))
            start = max(now, inp.promotion_earliest)
        else:
            notes.append("held until the upstream completes the version: no time alone "
                         "opens the gate")
    driver = _driver(inp.after)
    policy = _mapping(driver.get("upgradePolicy"))
    if policy.get("enableRollout") is not True:
        notes.append("enableRollout is not true: the DaemonSet template changes and each node "
                     "takes the new driver when its driver pod is deleted (OnDelete); no steps")
        return replace(plan, notes=tuple(notes))
    plan = replace(plan, steps=_steps(policy, plan.nodes))
    if plan.nodes is None:
        notes.append("no node count: the cluster's status snapshot has neither fleet.nodes "
                     "nor totalUpgradeReplicas, so steps are not resolved and nothing is "
                     "predicted")
        return replace(plan, notes=tuple(notes))
    if policy.get("pause") is True:
        notes.append("pause: true: no node starts until pause: false is merged")
        return replace(plan, notes=tuple(notes))
    nodes = plan.nodes
    if nodes > MODEL_MAX_NODES:
        notes.append(f"{nodes:,} nodes: past the {MODEL_MAX_NODES:,} the model runs, so nothing "
                     "is predicted")
        return replace(plan, notes=tuple(notes))
    topology = inp.settings.rollout.topology
    if topology is not None:
        domains, why_not = _domains(inp.snapshot, topology.key, nodes)
        plan = replace(plan, domains=domains)
        notes.append(f"rollout.topology ({topology.key}, {topology.order}): "
                     + (why_not or "the domains' node counts of the last status snapshot"))
    seconds, stop = predict(driver, from_version=plan.from_version, nodes=nodes,
                            install_seconds=plan.install_seconds, inp=inp, start=start,
                            domains=plan.domains)
    if seconds is None:
        notes.append(f"the model did not complete the rollout ({stop}): no prediction")
        return replace(plan, notes=tuple(notes))
    if plan.gates:
        notes.append(f"plus the time {plan.gates} gate(s) wait for a person (the model "
                     "releases each at once)")
    windows = inp.settings.windows
    if windows is not None:
        notes.append(f"maintenance windows in {windows.timezone}: fresh nodes start only "
                     "inside one")
    notes.extend(_rollout_notes(inp.settings))
    plan = replace(plan, predicted_seconds=seconds, notes=tuple(notes))
    if plan.change == "held" and plan.held_until is None:
        return plan  # the duration is known; when it starts is not
    return replace(plan, predicted_start=format_seconds(start),
                   predicted_end=format_seconds(start + seconds))


def predict(driver: Mapping[str, Any], *, from_version: str | None, nodes: int,
            install_seconds: float, inp: ClusterInput, start: float,
            domains: Mapping[str, int] | None = None) -> tuple[float | None, str]:
    """The rollout's duration on the planner's own model (``reconciler simulate``), gates
    released at once, the nodes labelled as ``domains`` counts them (with a topology); (None,
    why) when the model does not complete it."""
    payload = dict(_mapping(driver.get("payload")))
    topology = inp.settings.rollout.topology
    fleet = (labelled_fleet(topology.key, domains)
             if topology is not None and domains is not None else ())
    config = SimConfig(
        nodes=nodes,
        from_version=from_version or f"{payload.get('version')}-previous",
        install_seconds=install_seconds,
        auto_confirm=0.0,
        until=min(PREDICTION_HORIZON, LATEST_TIME - start),
        settings=PlannerSettings().for_pass(inp.settings.rollout),
        health=inp.settings.health.config,
        start=start,
        windows=inp.settings.windows,
        fleet=fleet,
    )
    result = simulate(driver, config)
    if not result.completed:
        return None, result.stop_reason
    return round(result.duration_seconds, 1), result.stop_reason


def _rollout_notes(settings: ClusterSettings) -> list[str]:
    """What the model knows less of than the controller: the nodes' pods."""
    notes = []
    rollout = settings.rollout
    if rollout.drain is not None or rollout.wait_for is not None:
        notes.append("rollout.drain/waitFor: each node is drained first as the controller "
                     "does; the model knows no workload pods, so no eviction waits")
    return notes


# -- rendering -----------------------------------------------------------------------------------

_HEADLINES: dict[str, str] = {
    "rollout": "starts a rollout",
    "settings": "changes settings only",
    "firmware": "starts the firmware upgrade",
    "held": "is held by the promotion gate",
    "refused": "is refused",
    "none": "changes nothing the cluster runs",
}


def _versions(plan: ClusterPlan) -> str:
    return f"{plan.from_version or '(none)'} -> {plan.to_version or '(none)'}"


def _nodes_text(plan: ClusterPlan) -> str:
    if plan.nodes is None:
        return "unknown node count"
    return f"{plan.nodes} nodes ({plan.nodes_source} of the last status snapshot)"


def _install_text(plan: ClusterPlan) -> str:
    return (f"install {plan.install_seconds:g} s per node "
            + ("assumed (no measured install time)" if plan.install_assumed
               else "(measured in its last rollout)"))


def summary(plan: ClusterPlan) -> str:
    """One line for a cluster."""
    text = f"{plan.cluster}: {_HEADLINES[plan.change]}"
    if plan.from_version != plan.to_version:
        text += f", {_versions(plan)} on {_nodes_text(plan)}"
    if plan.held_until:
        text += f", until {plan.held_until} at the earliest"
    if plan.predicted_seconds is not None:
        text += f"; predicted {format_duration(plan.predicted_seconds)}"
        if plan.predicted_end is not None:
            text += f", ending {plan.predicted_end}"
    return text


def _finding_line(f: Finding) -> str:
    return f"{f.file}:{f.line}:{f.column}: {f.severity}: {f.message} [{f.rule}]"


def render_text(plans: Sequence[ClusterPlan], *, against: str,
                other_findings: Sequence[Finding] = ()) -> str:
    if not plans:
        lines = [f"no cluster's policy or settings differ from {against}"]
    else:
        lines = [f"plan against {against}: {len(plans)} cluster(s) change", ""]
    for plan in plans:
        lines.append(summary(plan))
        if plan.change in ("rollout", "held"):
            lines.append(f"  {_install_text(plan)}")
        if plan.steps:
            tolerating = _tolerating(plan)
            lines.append(f"  {'step':>4} {'replicas':>8} {'nodes':>6} {'target':>6}  "
                         + (f"{'tolerate':>8}  " if tolerating else "") + "pause")
            for step in plan.steps:
                lines.append(f"  {step.step:>4} {step.replicas:>8} "
                             f"{_opt(step.nodes):>6} {_opt(step.target):>6}  "
                             + (f"{step.toleration_label():>8}  " if tolerating else "")
                             + step.pause_label())
        if plan.policy_changes:
            lines.append(f"  policy: {', '.join(plan.policy_changes)}")
        if plan.settings_changes:
            lines.append(f"  settings: {', '.join(plan.settings_changes)}")
        lines.extend(f"  note: {note}" for note in plan.notes)
        lines.extend(f"  {_finding_line(f)}" for f in plan.findings)
        lines.append("")
    lines.extend(_finding_line(f) for f in other_findings)
    return "\n".join(printable(line) for line in lines).rstrip("\n") + "\n"


def _tolerating(plan: ClusterPlan) -> bool:
    """A step of the plan has a toleration: the tables show the column (only then, so a plan
    without one reads as it did)."""
    return any(step.toleration_written is not None for step in plan.steps)


def _opt(value: int | None) -> str:
    return "?" if value is None else str(value)


def render_json(plans: Sequence[ClusterPlan], *, against: str,
                other_findings: Sequence[Finding] = ()) -> dict[str, Any]:
    return {"against": against, "clusters": [plan.to_json() for plan in plans],
            "findings": [f.as_dict() for f in other_findings]}


_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|#!~"})


def md(text: object) -> str:
    """Text from files (names, versions, messages) as inert markdown: control characters
    escaped, markup characters backslashed, one line."""
    return printable(str(text)).translate(_MD_SPECIAL)


def _md_section(plan: ClusterPlan) -> str:
    lines = [f"### {md(plan.cluster)}: {_HEADLINES[plan.change]}", ""]
    facts: list[str] = []
    if plan.from_version != plan.to_version:
        facts.append(f"- driver {md(plan.from_version or '(none)')} → "
                     f"{md(plan.to_version or '(none)')} on {md(_nodes_text(plan))}")
    if plan.change in ("rollout", "held"):
        facts.append(f"- {md(_install_text(plan))}")
    if plan.held_until:
        facts.append(f"- held until {plan.held_until} at the earliest")
    if plan.predicted_seconds is not None:
        facts.append(f"- predicted {format_duration(plan.predicted_seconds)}" + (
            f": from {plan.predicted_start} to {plan.predicted_end}"
            if plan.predicted_end is not None else " once the gate opens"))
    if plan.policy_changes:
        facts.append("- policy: " + ", ".join(md(p) for p in plan.policy_changes))
    if plan.settings_changes:
        facts.append("- settings: " + ", ".join(md(p) for p in plan.settings_changes))
    facts.extend(f"- note: {md(note)}" for note in plan.notes)
    lines.extend(facts)
    if plan.steps and _tolerating(plan):
        lines += ["", "| step | replicas | nodes | on the new driver | failures tolerated | "
                  "pause |", "|---:|---:|---:|---:|---:|---|"]
        lines.extend(f"| {s.step} | {md(s.replicas)} | {_opt(s.nodes)} | {_opt(s.target)} | "
                     f"{md(s.toleration_label())} | {md(s.pause_label())} |"
                     for s in plan.steps)
    elif plan.steps:
        lines += ["", "| step | replicas | nodes | on the new driver | pause |",
                  "|---:|---:|---:|---:|---|"]
        lines.extend(f"| {s.step} | {md(s.replicas)} | {_opt(s.nodes)} | {_opt(s.target)} | "
                     f"{md(s.pause_label())} |" for s in plan.steps)
    if plan.findings:
        lines += ["", "| where | severity | finding | rule |", "|---|---|---|---|"]
        lines.extend(f"| {md(f'{f.file}:{f.line}:{f.column}')} | {f.severity} | "
                     f"{md(f.message)} | {md(f.rule)} |" for f in plan.findings)
    return "\n".join(lines) + "\n"


def _md_summary_row(plan: ClusterPlan) -> str:
    versions = (f"{md(plan.from_version or '(none)')} → {md(plan.to_version or '(none)')}"
                if plan.from_version != plan.to_version else "")
    end = plan.predicted_end or (f"held until {plan.held_until}" if plan.held_until else "")
    return (f"| {md(plan.cluster)} | {plan.change} | {versions} | {_opt(plan.nodes)} | "
            f"{end} | {sum(f.is_error for f in plan.findings)} |")


def render_markdown(plans: Sequence[ClusterPlan], *, against: str,
                    other_findings: Sequence[Finding] = (), limit: int = COMMENT_LIMIT) -> str:
    """A pull-request comment: a summary table, then one section per cluster. Deterministic;
    at most ``limit`` characters: sections (then summary rows) that do not fit are left out
    whole and counted, never cut inside a table."""
    head = [f"## `reconciler plan` against {md(against)}", ""]
    if not plans:
        head.append("No cluster's policy or settings differ: merging changes nothing.")
        text = "\n".join(head) + "\n"
        return text + _md_other(other_findings, limit - len(text))
    head.append(f"{len(plans)} cluster(s) change.")
    table = ["", "| cluster | change | driver | nodes | predicted end | errors |",
             "|---|---|---|---:|---|---:|"]
    rows = [_md_summary_row(plan) for plan in plans]
    sections = [_md_section(plan) for plan in plans]
    full = "\n".join([*head, *table, *rows]) + "\n\n" + "\n".join(sections)
    if len(full) + len(other := _md_other(other_findings, limit)) <= limit:
        return full + other
    other = _md_other(other_findings, limit // 4)  # the clusters keep most of the comment
    tail_room = 200  # the closing lines that count what was left out
    budget = limit - len(other) - tail_room
    kept_rows: list[str] = []
    used = len("\n".join([*head, *table])) + 1
    for row in rows:
        if used + len(row) + 1 > budget:
            break
        kept_rows.append(row)
        used += len(row) + 1
    text = "\n".join([*head, *table, *kept_rows]) + "\n"
    if len(kept_rows) < len(rows):
        text += (f"\n_{len(rows) - len(kept_rows)} more cluster(s) not listed: the plan is "
                 f"longer than a comment can hold; run `reconciler plan --format json`._\n")
        return text + other
    text += "\n"
    shown = 0
    for section in sections:
        if len(text) + len(section) + 1 > budget:
            break
        text += section + "\n"
        shown += 1
    if shown < len(sections):
        text += (f"_{len(sections) - shown} cluster section(s) left out to fit a comment "
                 f"(the table above lists every cluster); run `reconciler plan --format "
                 f"json` for all._\n")
    return text + other


def _md_other(findings: Sequence[Finding], budget: int) -> str:
    """The findings outside the clusters' sections, in at most ``budget`` characters: rows that
    do not fit are counted, never cut."""
    if not findings:
        return ""
    lines = ["", "### Other findings", "", "| where | severity | finding | rule |",
             "|---|---|---|---|"]
    rows = [f"| {md(f'{f.file}:{f.line}:{f.column}')} | {f.severity} | {md(f.message)} "
            f"| {md(f.rule)} |" for f in findings]
    note_room = 160  # the line that counts the rows left out
    used = len("\n".join(lines)) + 1
    kept = 0
    for row in rows:
        if used + len(row) + 1 > budget - (note_room if kept + 1 < len(rows) else 0):
            break
        used += len(row) + 1
        kept += 1
    lines.extend(rows[:kept])
    if kept < len(rows):
        lines += ["", f"_{len(rows) - kept} more finding(s) not listed to fit a comment; run "
                      "`reconciler validate` for all._"]
    return "\n".join(lines) + "\n"
