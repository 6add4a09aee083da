"""What the demo shows while the rollout runs: a snapshot of the cluster and the remote, rendered
live with rich on a terminal, or as one line per change when the output is not a terminal."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from reconciler.policy.payload import normalize_version
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.stored_status import upgrade_status_of
from reconciler.views.waits import GitContext, Wait, waits


@dataclass(frozen=True)
class NodeView:
    name: str
    version: str | None
    ready: bool
    upgrading: bool  # old pod deleted, new one not Ready yet
    cordoned: bool
    problem: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """One look at the cluster and the remote."""

    phase: str | None
    step: int
    state: str | None
    message: str
    recheck_time: str | None
    gate: bool
    spec_version: str | None
    spec_pause: bool | None
    policy: UpgradePolicy
    nodes: tuple[NodeView, ...]
    git_log: tuple[str, ...]
    now: float = field(default_factory=time.time)
    #: what the rollout waits for (the read model's entries, as ``reconciler status`` and the
    #: dashboard show them)
    waits: tuple[Wait, ...] = ()

    @property
    def steps(self) -> int:
        return len(self.policy.steps)

    def on(self, version: str) -> int:
        wanted = normalize_version(version)
        return sum(1 for n in self.nodes
                   if n.ready and n.version and normalize_version(n.version) == wanted)

    def seconds_left(self) -> float | None:
        if not self.recheck_time:
            return None
        try:
            until = datetime.fromisoformat(self.recheck_time.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
        return max(0.0, until - self.now)

    def headline(self) -> str:
        if not self.phase:
            return "waiting for the reconciler's first status"
        text = f"{self.phase}, step {self.step}/{self.steps} {self.state or ''}".rstrip()
        if self.gate:
            text += " (manual gate: a person merges pause: false)"
        left = self.seconds_left()
        if left is not None and self.state == "StepPaused" and not self.gate:
            text += f" ({left:.0f} s of pause left)"
        return text


def snapshot_from(cluster_operator: Mapping[str, Any] | None, nodes: Sequence[NodeView],
                  git_log: Sequence[str], *, now: float | None = None) -> Snapshot:
    co = cluster_operator or {}
    driver = (co.get("spec") or {}).get("driver") or {}
    raw_policy = driver.get("upgradePolicy") or {}
    try:
        policy = UpgradePolicy.from_spec(raw_policy)
    except (KeyError, TypeError, ValueError):
        policy = UpgradePolicy()
    upgrade = upgrade_status_of(co)
    inner = upgrade.get("status") or {}
    pause = raw_policy.get("pause")
    now = time.time() if now is None else now
    # the demo's policy lives in its remote's main branch: a person merges
    waiting = tuple(waits({"upgradeStatus": upgrade, "spec": {"driver": driver}}, now=now,
                          git=GitContext()))
    return Snapshot(
        phase=upgrade.get("phase"),
        step=int(inner.get("currentStepIndex") or 0),
        state=inner.get("currentStepState"),
        message=str(upgrade.get("message") or inner.get("message") or ""),
        recheck_time=inner.get("recheckTime"),
        gate=any(w.kind == "gate" for w in waiting),
        spec_version=(driver.get("payload") or {}).get("version"),
        spec_pause=pause if isinstance(pause, bool) else None,
        policy=policy,
        nodes=tuple(nodes),
        git_log=tuple(git_log),
        now=now,
        waits=waiting,
    )


def _node_cell(node: NodeView, new: str) -> Text:
    version = node.version or "-"
    on_new = node.version is not None and normalize_version(version) == normalize_version(new)
    if node.problem:
        style, mark = "bold red", "x"
    elif node.upgrading:
        style, mark = "yellow", "~"
    elif on_new and node.ready:
        style, mark = "green", "+"
    else:
        style, mark = "white", " "
    cordon = " (cordoned)" if node.cordoned else ""
    return Text(f"{mark} {node.name} {version}{cordon}", style=style)


def render(snapshot: Snapshot, *, new: str, old: str, narration: Sequence[str],
           note: str, height: int = 60) -> RenderableType:
    """The live screen; the git log panel, last, gets the lines a small terminal has left."""
    total = len(snapshot.nodes)
    head = Text()
    head.append("lab-10 ", style="bold")
    head.append(snapshot.headline(), style="bold cyan")
    head.append(f"\n{snapshot.on(new)}/{total} nodes on {new}, {snapshot.on(old)} on {old}")
    if snapshot.message:
        head.append(f"\n{snapshot.message}", style="dim")
    for wait in snapshot.waits:
        head.append(f"\nwaiting for {wait.title}: {wait.action}", style="yellow")

    batches = Table(title="batches (spec.driver.upgradePolicy.upgradeSteps)", expand=False)
    for column in ("step", "nodes (cumulative)", "after it", "state"):
        batches.add_column(column)
    targets = snapshot.policy.step_targets(total) if total else []
    for index, (step, target) in enumerate(zip(snapshot.policy.steps, targets,
                                               strict=False), start=1):
        after = "a person (gate)" if step.is_gate else f"{(step.pause_ms or 0) / 1000:g} s pause"
        if snapshot.step > index or (snapshot.step == index and snapshot.state == "Completed"):
            state = Text("done", style="green")
        elif snapshot.step == index:
            state = Text(snapshot.state or "", style="bold yellow")
        else:
            state = Text("-", style="dim")
        batches.add_row(str(index), str(target), after, state)

    grid = Table.grid(padding=(0, 2))
    columns = 2
    for _ in range(columns):
        grid.add_column()
    cells = [_node_cell(n, new) for n in snapshot.nodes]
    for row in range(0, len(cells), columns):
        grid.add_row(*cells[row:row + columns])

    story = Text("\n".join(narration[-4:]))
    used = (7 + len(snapshot.waits) + 6 + len(targets) + 4 + 2
            + (len(cells) + columns - 1) // columns + 2 + 2)
    log = Text("\n".join(snapshot.git_log[:max(2, min(8, height - used))]) or "(empty)")
    return Group(
        Panel(head, title="reconciler demo", subtitle=note),
        Panel(story, title="what is happening"),
        batches,
        Panel(grid, title="GPU nodes (+ new driver, ~ upgrading, x failed)"),
        Panel(log, title="git log (remote main, newest first)"),
    )


def changes(previous: Snapshot | None, current: Snapshot, *, new: str) -> list[str]:
    """Plain-text lines for what changed (the non-terminal progress output)."""
    lines = []
    if previous is None or (previous.phase, previous.step, previous.state, previous.gate) != (
            current.phase, current.step, current.state, current.gate):
        lines.append(f"status: {current.headline()}; {current.on(new)}/{len(current.nodes)} "
                     f"nodes on {new}")
    before = {n.name: n for n in previous.nodes} if previous else {}
    for node in current.nodes:
        old = before.get(node.name)
        if old is None and previous is not None:
            continue
        if old is not None and node.upgrading and not old.upgrading:
            lines.append(f"node {node.name}: upgrading (driver pod deleted, cordoned)")
        if old is not None and (node.version, node.ready) != (old.version, old.ready) \
                and node.ready:
            lines.append(f"node {node.name}: driver {node.version} Ready")
        if node.problem and (old is None or old.problem != node.problem):
            lines.append(f"node {node.name}: {node.problem}")
    seen = set(previous.git_log) if previous else set()
    lines.extend(f"git: {line}" for line in reversed(current.git_log) if line not in seen
                 and previous is not None)
    return lines
