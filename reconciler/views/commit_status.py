"""Forge commit statuses (docs/forges.md), decided purely: which state a status snapshot gives, in
words from the read model, and whether a state is posted now, later or not at all.

- ``commit_status``: the snapshot (plus the commit that started the rollout) -> a
  ``CommitStatus`` (``pending`` while the rollout runs: step i/n, nodes on the new driver, what
  it waits for; ``success`` when Completed; ``failure`` on a fallback, a rollback or a rejected
  commit, the reason in the description), or None when there is nothing to report;
- ``forge_state``: the state in each forge's own words (GitLab says ``running`` and ``failed``);
- ``PostGate``: identical states are not posted again (commit + context + state +
  description) and a cluster gets at most one post per ``MIN_INTERVAL`` seconds, on the clock
  the caller passes in (``now``).

No clock, threads or sockets here (``.importlinter``): the worker in
``reconciler.gitops.forge_status`` posts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from reconciler.names import ROLLBACK_PHASES
from reconciler.names import ConditionType as Condition
from reconciler.stored_status import conditions_by_type
from reconciler.views.nodes import NodeStates
from reconciler.views.waits import waits

CONTEXT_PREFIX: Final = "gpu-reconciler/"
#: the forges' limit for a description (GitHub's; the others take more)
MAX_DESCRIPTION: Final = 140
#: at most one post per cluster (context) per this many seconds
MIN_INTERVAL: Final = 10.0
#: our states -> each forge's words (``running``: the rollout runs, ``pending``: not yet)
_WORDS: Final[Mapping[str, Mapping[str, str]]] = {
    "github": {"pending": "pending", "running": "pending", "success": "success",
               "failure": "failure"},
    "gitea": {"pending": "pending", "running": "pending", "success": "success",
              "failure": "failure"},
    "gitlab": {"pending": "pending", "running": "running", "success": "success",
               "failure": "failed"},
}


@dataclass(frozen=True, slots=True)
class CommitStatus:
    """One status for one commit, in our words (``state``: pending, running, success,
    failure); ``forge_state`` gives the forge's."""

    commit: str
    context: str
    state: str
    description: str
    target_url: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What makes two posts the same post."""
        return (self.commit, self.context, self.state, self.description)


def context_of(cluster: str) -> str:
    return f"{CONTEXT_PREFIX}{cluster}"


def forge_state(forge: str, state: str) -> str:
    """``state`` (pending, running, success, failure) in ``forge``'s words."""
    return _WORDS[forge][state]


def cut(text: str, limit: int = MAX_DESCRIPTION) -> str:
    """``text`` on one line, at most ``limit`` characters (an ellipsis marks a cut)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1].rstrip() + "…"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _true_conditions(upgrade: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return dict(conditions_by_type(upgrade))


def commit_status(snapshot: Mapping[str, Any], *, cluster: str, commit: str | None,
                  now: float, nodes: NodeStates | None = None,
                  target_url: str | None = None) -> CommitStatus | None:
    """The status ``snapshot`` gives: on the rejected commit when the newest one was rejected,
    else on ``commit`` (the commit that started the rollout; None: no status). None when
    there is nothing to report (no rollout ran)."""
    context = context_of(cluster)
    rejection = _mapping(snapshot.get("rejection"))
    if rejection.get("commit"):
        findings = [f for f in rejection.get("findings") or () if isinstance(f, Mapping)]
        first = findings[0] if findings else {}
        where = ":".join(str(first[k]) for k in ("file", "line") if first.get(k))
        reason = f"{where}: {first.get('message', '')}" if where else str(
            first.get("message") or "invalid policy")
        return CommitStatus(str(rejection["commit"]), context, "failure",
                            cut(f"rejected, nothing applied: {reason}"), target_url)
    if commit is None:
        return None
    upgrade = _mapping(snapshot.get("upgradeStatus"))
    inner = _mapping(upgrade.get("status"))
    phase = str(upgrade.get("phase") or "")
    conditions = _true_conditions(upgrade)
    steps = [s for s in _mapping(_mapping(_mapping(snapshot.get("spec")).get("driver")).get(
        "upgradePolicy")).get("upgradeSteps") or () if isinstance(s, Mapping)]
    index = inner.get("currentStepIndex")
    index = index if isinstance(index, int) and not isinstance(index, bool) else 0
    step = f"step {index}/{len(steps)}" if steps else f"step {index}"
    ready, total = inner.get("totalUpgradeReadyReplicas"), inner.get("totalUpgradeReplicas")
    counts = (f"{ready}/{total} nodes on the new driver"
              if isinstance(ready, int) and isinstance(total, int) and total else "")
    version = _mapping(_mapping(upgrade.get("lastAppliedSpec")).get("payload")).get("version")

    def status(state: str, text: str) -> CommitStatus:
        return CommitStatus(commit, context, state, cut(text), target_url)

    if phase in ROLLBACK_PHASES:
        why = "after failures" if phase == "Terminating" else "grey release turned off"
        return status("failure", f"rolling back at {step} ({why})")
    if Condition.ROLLED_BACK in conditions:
        message = conditions[Condition.ROLLED_BACK].get("message") or "rolled back"
        return status("failure", f"rolled back: {message}")
    if Condition.BATCH_FAILED in conditions and phase == "Progressing":
        message = conditions[Condition.BATCH_FAILED].get("message") or "failures"
        return status("failure", f"failure fallback at {step}: {message}")
    if inner.get("currentStepState") == "Completed" and index > 0:
        done = f"; {counts}" if counts else ""
        return status("success", f"completed{f' {version}' if version else ''}{done}")
    if phase != "Progressing":
        return None
    parts = [step + (f" to {version}" if version else "")]
    if counts:
        parts.append(counts)
    entries = [w for w in waits(snapshot, now=now, nodes=nodes) if w.kind != "rejection"]
    if entries:
        # a timer's title counts down; its end does not (no new post every second)
        head = entries[0]
        what = (f"the pause after {step} (until {head.until})"
                if head.kind == "pause" and head.until else head.title)
        parts.append(f"waits for {what}")
    return status("running", ", ".join(parts))


@dataclass(slots=True)
class PostGate:
    """Whether a status goes out now: not when the forge already has it, and at most one post
    per context per ``interval`` seconds (``now`` from the caller's clock)."""

    interval: float = MIN_INTERVAL
    posted: dict[str, tuple[str, str, str, str]] = field(default_factory=dict)
    posted_at: dict[str, float] = field(default_factory=dict)

    def due(self, status: CommitStatus, now: float) -> float | None:
        """None: already posted (drop it); else when it may be posted (``<= now``: now)."""
        if self.posted.get(status.context) == status.key:
            return None
        last = self.posted_at.get(status.context)
        return now if last is None else max(now, last + self.interval)

    def attempted(self, status: CommitStatus, now: float) -> None:
        """A post was made (answered or not): the rate limit counts it."""
        self.posted_at[status.context] = now

    def done(self, status: CommitStatus) -> None:
        """The forge took it: the same state is not posted again."""
        self.posted[status.context] = status.key
