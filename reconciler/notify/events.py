"""What happened, as events a person is told about (docs/notifications.md): the previous status
snapshot and the current one in, events with stable keys out. Pure: no clock, network or Kubernetes.

The words come from the read model (``reconciler.views.waits``). State events (a gate or a
fallback waits, a check failed, a commit was rejected, promotion holds, a window closed with
work left) fire whenever the current snapshot shows them; their key makes them fire once.
Transition events (a rollback finished, a rollout completed, a promotion passed) need the
previous snapshot: a notifier that starts sees no transition it did not watch.

The key: cluster / rollout / kind / step (/ check), so a health failure is one event per check
per step, not per node. The rollout is the commit that started it (given by the caller, who finds
it in Git: ``reconciler.sync.rollout_start``), never the head or the applied commit: our own
``pause: true`` write-back at a gate, a gate release or a settings change during the rollout
moves those, and the same gate would be told again. A rejected commit and a promotion are keyed
by their own commit (that is the event)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.names import ACTIVE_PHASES, ROLLBACK_PHASES, TERMINAL_PHASES
from reconciler.views.waits import GitContext, Wait, health_rows, waits

_FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class Event:
    """One thing a person is told, once per sink."""

    key: str
    kind: str  # one of reconciler.policy.notify_config.EVENT_KINDS
    cluster: str
    rollout: str  # the commit that started the rollout ("" when unknown)
    step: str
    title: str
    #: the whole message: the title, what it means and what a person does
    text: str
    #: the exact Git change to merge ({path, line, before, after, field}), when there is one
    change: Mapping[str, Any] | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "kind": self.kind, "cluster": self.cluster,
                "rollout": self.rollout, "step": self.step, "title": self.title,
                "text": self.text, "change": dict(self.change) if self.change else None}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _upgrade(snapshot: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return _mapping(_mapping(snapshot).get("upgradeStatus"))


def _phase(snapshot: Mapping[str, Any] | None) -> str:
    return str(_upgrade(snapshot).get("phase") or "")


def _step(snapshot: Mapping[str, Any]) -> str:
    inner = _mapping(_upgrade(snapshot).get("status"))
    index = inner.get("currentStepIndex")
    policy = _mapping(_mapping(_mapping(snapshot.get("spec")).get("driver")).get(
        "upgradePolicy"))
    steps = [s for s in policy.get("upgradeSteps") or () if isinstance(s, Mapping)]
    index = index if isinstance(index, int) and not isinstance(index, bool) else 0
    return f"{index}/{len(steps)}" if steps else str(index)


def _version(snapshot: Mapping[str, Any] | None) -> str:
    payload = _mapping(_mapping(_mapping(_mapping(snapshot).get("spec")).get("driver")).get(
        "payload"))
    return str(payload.get("version") or "")


def event_key(cluster: str, rollout: str, kind: str, step: str, check: str = "") -> str:
    parts = [cluster, rollout[:12] or "-", kind, step or "-"]
    return "/".join([*parts, check] if check else parts)


def derive_events(cluster: str, previous: Mapping[str, Any] | None,
                  current: Mapping[str, Any], *, now: float, rollout: str = "",
                  git: GitContext | None = None,
                  object_name: str = "cluster-operator") -> list[Event]:
    """The events ``current`` shows (after ``previous``; None: none seen yet). ``rollout``:
    the commit that started the rollout ("" unknown: ``-`` in the key)."""
    step = _step(current)
    out: list[Event] = []

    def add(kind: str, title: str, text: str, *, at: str = step, check: str = "",
            commit: str = rollout, change: Mapping[str, Any] | None = None) -> None:
        out.append(Event(key=event_key(cluster, commit, kind, at, check), kind=kind,
                         cluster=cluster, rollout=commit, step=at, title=f"{cluster}: {title}",
                         text=f"{cluster}: {text}", change=change))

    for wait in waits(current, now=now, git=git, object_name=object_name):
        if wait.kind == "gate":
            add("gate", wait.title, _sentence(wait), change=wait.change)
        elif wait.kind == "fallback":
            add("fallback", wait.title, _sentence(wait), change=wait.change)
        elif wait.kind == "rejection":
            commit = str(_mapping(current.get("rejection")).get("commit") or "")
            add("rejected", wait.title, _sentence(wait), at="-", commit=commit)
        elif wait.kind == "window":
            # each closing once: the time it opens again tells the closings apart
            add("window", f"{wait.title} with work left at step {step}", _sentence(wait),
                check=wait.until or "")
    for row in health_rows(_mapping(_upgrade(current).get("health"))):
        if row["state"] == _FAILED:
            where = f" on {row['node']}" if row["node"] else ""
            add("health", f"health check {row['check']} failed{where} at step {step}",
                f"health check {row['check']} failed{where} at step {step}: value "
                f"{row['value'] or 'none'} since {row['since'] or '?'}; the failure counts "
                "toward maxFailureThreshold", check=row["check"])
    _promotion(previous, current, add)
    before, after = _phase(previous), _phase(current)
    if previous is not None and before in ROLLBACK_PHASES and after in TERMINAL_PHASES:
        add("rollback", f"the rollback finished ({after})",
            f"the rollback finished: the fleet runs {_version(current) or 'the old driver'} "
            f"again ({after})", at="-")
    elif (previous is not None and before in ACTIVE_PHASES and after in TERMINAL_PHASES
          and _mapping(_upgrade(current).get("status")).get("currentStepState") == "Completed"):
        add("completed", f"the rollout of {_version(current)} completed",
            f"the rollout of {_version(current)} completed on every node", at="-")
    return out


def _sentence(wait: Wait) -> str:
    parts = [wait.title]
    if wait.detail:
        parts.append(wait.detail)
    if wait.action:
        parts.append(f"action: {wait.action}")
    return "; ".join(parts)


def _promotion(previous: Mapping[str, Any] | None, current: Mapping[str, Any],
               add: Callable[..., None]) -> None:
    """Held while the gate holds the version; passed once it no longer does."""
    held = _mapping(_mapping(current.get("promotion")).get("held"))
    was = _mapping(_mapping(_mapping(previous).get("promotion")).get("held"))
    if held:
        version = str(held.get("version") or "")
        reason = held.get("reason") or ""
        until = f" (at {held['earliest']} at the earliest)" if held.get("earliest") else ""
        add("promotion", f"the promotion gate holds {version}",
            f"the promotion gate holds {version}: it waits for {held.get('upstream')} "
            f"({reason}){until}", at=f"held:{version}",
            commit=str(held.get("commit") or ""))
    elif was and not _mapping(current.get("rejection")):
        version = str(was.get("version") or "")
        add("promotion", f"the promotion gate passed {version}",
            f"the promotion gate passed {version} after {was.get('upstream')}: it is applied",
            at=f"passed:{version}", commit=str(was.get("commit") or ""))
