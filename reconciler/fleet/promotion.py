"""The promotion gate (docs/configuration.md#promotion) as a pure function: may a payload version
reach a cluster now?

It reads only the upstream cluster's status snapshot (plain data, the shape of
``schemas/status-snapshot.schema.json``) at one commit, never the history: the gate passes when
the upstream's ``lastRollout`` is ``Completed`` for the same driver version (``2.33.0.9`` and
``2.33.0.9-amd64`` are one version; registries may differ between clusters), ``finishedAt`` at
least ``soak`` ago, and the upstream still runs that version (no rollout or rollback since).

``Promotion.from_obj`` reads a cluster's ``clusters.<name>.promotion`` section for
``reconciler.config`` (which resolves ``reconciler.yaml`` for the cluster).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from reconciler.durations import parse_duration_setting
from reconciler.errors import RepoConfigError
from reconciler.names import ACTIVE_PHASES, ROLLBACK_PHASES
from reconciler.policy.findings import Finding
from reconciler.policy.payload import normalize_version
from reconciler.policy.rules import RuleContext
from reconciler.policy.validation import PolicyRule
from reconciler.timefmt import format_duration, format_time, parse_time_or_none

PromotionMode = Literal["hold", "branch", "auto"]
PROMOTION_MODES: tuple[PromotionMode, ...] = ("hold", "branch", "auto")


@dataclass(frozen=True, slots=True)
class Promotion:
    """``clusters.<name>.promotion``: a payload reaches the cluster only after ``after``
    completed it at least ``soak`` seconds ago and still runs it."""

    after: str
    soak: float = 0.0
    mode: PromotionMode = "hold"

    @classmethod
    def from_obj(cls, value: object, *, label: str) -> Promotion | None:
        """The section as written (None: not set), named ``label`` in messages; raises
        ``RepoConfigError`` naming the key."""
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise RepoConfigError(f"{label}: expected a mapping")
        after = value.get("after")
        if not isinstance(after, str) or not after:
            raise RepoConfigError(f"{label}.after: expected the upstream cluster's name")
        soak = parse_duration_setting(value.get("soak", 0), key=f"{label}.soak")
        mode = value.get("mode", "hold")
        for known in PROMOTION_MODES:
            if mode == known:
                return cls(after=after, soak=soak, mode=known)
        raise RepoConfigError(f"{label}.mode: expected one of hold, branch, auto, got {mode!r}")


@dataclass(frozen=True, slots=True)
class GateVerdict:
    allowed: bool
    #: the upstream's state in a person's words (why it holds, or why it passed)
    reason: str
    #: when held by the soak alone: the earliest instant the gate can pass (None: time alone
    #: does not open it, the upstream must complete the version first)
    earliest: float | None = None

    def describe(self) -> str:
        if self.allowed or self.earliest is None:
            return self.reason
        return f"{self.reason}; it can pass at {format_time(self.earliest)} at the earliest"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def same_version(a: object, b: object) -> bool:
    return isinstance(a, str) and isinstance(b, str) and bool(a) and (
        normalize_version(a) == normalize_version(b))


def promotion_gate(upstream: str, snapshot: Mapping[str, Any] | None, version: str, *,
                   soak: float, now: float) -> GateVerdict:
    """The gate for ``version`` reaching a cluster whose promotion is ``after: upstream``."""
    if snapshot is None:
        return GateVerdict(False, f"upstream {upstream} has no status snapshot: it has not "
                                  f"completed {version}")
    record = _mapping(snapshot.get("lastRollout"))
    upgrade = _mapping(snapshot.get("upgradeStatus"))
    phase = upgrade.get("phase")
    runs = _mapping(_mapping(_mapping(snapshot.get("spec")).get("driver")).get("payload"))
    if phase in ACTIVE_PHASES:
        applied = _mapping(_mapping(upgrade.get("lastAppliedSpec")).get("payload")).get(
            "version") or runs.get("version")
        what = "rolling back" if phase in ROLLBACK_PHASES else "rolling out"
        return GateVerdict(False, f"upstream {upstream} is {what} {applied or 'a driver'} "
                                  f"({phase}); {version} passes only after it completed there")
    if not record:
        return GateVerdict(False, f"upstream {upstream} has completed no rollout yet "
                                  f"(no lastRollout in its status snapshot)")
    recorded = record.get("version")
    result = record.get("result")
    if not same_version(recorded, version):
        return GateVerdict(False, f"upstream {upstream}'s last rollout was {recorded} "
                                  f"({result}), not {version}")
    if result != "Completed":
        return GateVerdict(False, f"upstream {upstream} rolled {version} back "
                                  f"(lastRollout {result} at {record.get('finishedAt')})")
    if runs.get("version") is not None and not same_version(runs.get("version"), version):
        return GateVerdict(False, f"upstream {upstream} completed {version} but runs "
                                  f"{runs.get('version')} now")
    finished = parse_time_or_none(record.get("finishedAt"))
    if finished is None:
        return GateVerdict(False, f"upstream {upstream}'s lastRollout has no usable "
                                  f"finishedAt ({record.get('finishedAt')!r})")
    passes = finished + soak
    if now < passes:
        return GateVerdict(
            False, f"upstream {upstream} completed {version} at {format_time(finished)}, "
                   f"{format_duration(max(now - finished, 0.0))} ago; the soak is "
                   f"{format_duration(soak)}", earliest=passes)
    return GateVerdict(True, f"upstream {upstream} completed {version} at "
                             f"{format_time(finished)} and still runs it; soak "
                             f"{format_duration(soak)} passed")


VERSION_POINTER = "/spec/driver/payload/version"


def payload_version(spec_or_object: Mapping[str, Any] | None) -> str | None:
    """``spec.driver.payload.version`` of an object, or ``driver.payload.version`` of a spec."""
    spec = _mapping(spec_or_object)
    spec = _mapping(spec.get("spec")) or spec
    version = _mapping(_mapping(spec.get("driver")).get("payload")).get("version")
    return str(version) if isinstance(version, str | int | float) and version != "" else None


def promotion_rule(upstream: str, snapshot: Mapping[str, Any] | None, *, soak: float,
                   now: float) -> PolicyRule:
    """A validation rule (``validate_document(extra_rules=...)``): a payload version the
    cluster does not run yet (``ctx.previous_spec``: what it runs) that the gate does not
    allow is an error (rule ``promotion-gate``) at the version."""

    def rule(ctx: RuleContext) -> Iterator[Finding]:
        wanted = payload_version(ctx.doc.obj if isinstance(ctx.doc.obj, Mapping) else None)
        if wanted is None:
            return
        running = payload_version(ctx.previous_spec)
        if running is not None and same_version(running, wanted):
            return  # no payload change
        verdict = promotion_gate(upstream, snapshot, wanted, soak=soak, now=now)
        if not verdict.allowed:
            yield ctx.doc.finding(VERSION_POINTER, "promotion-gate",
                                  f"promotion gate: {wanted} cannot reach this cluster yet: "
                                  f"{verdict.describe()}")

    return rule


def upstream_rolled_back(upstream: str, snapshot: Mapping[str, Any] | None,
                         running: str | None) -> dict[str, Any] | None:
    """The upstream rolled back the version this cluster runs (after it was promoted here):
    reported in this cluster's status, never acted on (docs/configuration.md#promotion). None when
    not the case."""
    record = _mapping(_mapping(snapshot).get("lastRollout"))
    if running is None or record.get("result") != "RolledBack":
        return None
    if not same_version(record.get("version"), running):
        return None
    return {"upstream": upstream, "version": running,
            "finishedAt": str(record.get("finishedAt") or ""),
            "message": f"upstream {upstream} rolled {running} back at "
                       f"{record.get('finishedAt')}; this cluster still runs it (a rollback "
                       "upstream never rolls this cluster back by itself)"}


def promotion_candidate(upstream: str, snapshot: Mapping[str, Any] | None, file_version: str | None,
                        *, soak: float, now: float) -> tuple[str | None, float | None]:
    """``branch`` mode (docs/configuration.md#promotion): the version the upstream completed that
    this cluster's policy does not name yet, when the gate allows it now (else None), and when to
    look again (the earliest time the gate can pass, None: not by time alone)."""
    record = _mapping(_mapping(snapshot).get("lastRollout"))
    version = record.get("version")
    if record.get("result") != "Completed" or not isinstance(version, str) or not version:
        return None, None
    if file_version is not None and same_version(file_version, version):
        return None, None
    verdict = promotion_gate(upstream, snapshot, version, soak=soak, now=now)
    return (version, None) if verdict.allowed else (None, verdict.earliest)
