"""The promotion gate (docs/configuration.md#promotion), pure: upstream snapshot + version + soak +
now -> allowed or held, with the upstream's state and the earliest time it can pass."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.fleet.promotion import GateVerdict, promotion_gate
from reconciler.timefmt import parse_time

FINISHED = "2026-11-30T02:00:00Z"
DAY = 24 * 3600.0


def upstream(*, version: str = "2.33.0.9", result: str = "Completed", runs: str = "2.33.0.9",
             phase: str = "Idling", record: bool = True) -> dict[str, Any]:
    snap: dict[str, Any] = {
        "cluster": "lab-10",
        "upgradeStatus": {"phase": phase, "lastAppliedSpec": {"payload": {"version": runs}},
                          "status": {"currentStepState": "Completed"}},
        "spec": {"driver": {"payload": {"registry": "lab.registry/metax", "version": runs}}},
    }
    if record:
        snap["lastRollout"] = {"version": version, "result": result, "finishedAt": FINISHED}
    return snap


def gate(snapshot: dict[str, Any] | None, *, now: str = "2026-12-01T03:00:00Z",
         version: str = "2.33.0.9") -> GateVerdict:
    return promotion_gate("lab-10", snapshot, version, soak=DAY, now=parse_time(now))


def test_a_completed_version_past_its_soak_passes() -> None:
    verdict = gate(upstream())
    assert verdict.allowed and "soak 24h passed" in verdict.reason


def test_the_arch_suffix_names_the_same_version() -> None:
    assert gate(upstream(version="2.33.0.9-amd64", runs="2.33.0.9-amd64")).allowed
    assert not gate(upstream(version="2.33.0.9-arm64", runs="2.33.0.9-arm64")).allowed


def test_the_soak_holds_until_finished_at_plus_soak() -> None:
    verdict = gate(upstream(), now="2026-11-30T14:00:00Z")
    assert not verdict.allowed
    assert verdict.earliest == parse_time("2026-12-01T02:00:00Z")
    assert verdict.describe() == (
        "upstream lab-10 completed 2.33.0.9 at 2026-11-30T02:00:00Z, 12h ago; the soak is 24h; "
        "it can pass at 2026-12-01T02:00:00Z at the earliest")
    assert gate(upstream(), now="2026-12-01T02:00:00Z").allowed


@pytest.mark.parametrize(("snapshot", "said"), [
    (None, "upstream lab-10 has no status snapshot"),
    (upstream(record=False), "has completed no rollout yet"),
    (upstream(version="2.32.0.6", runs="2.32.0.6"), "last rollout was 2.32.0.6 (Completed)"),
    (upstream(result="RolledBack", runs="2.32.0.6"), "rolled 2.33.0.9 back"),
    (upstream(phase="Progressing", runs="2.34.0.1"), "is rolling out 2.34.0.1 (Progressing)"),
    (upstream(phase="Terminating"), "is rolling back 2.33.0.9 (Terminating)"),
    (upstream(runs="2.32.0.6"), "completed 2.33.0.9 but runs 2.32.0.6 now"),
])
def test_the_gate_holds_and_names_the_upstream_state(snapshot: dict[str, Any] | None,
                                                     said: str) -> None:
    verdict = gate(snapshot)
    assert not verdict.allowed and verdict.earliest is None
    assert said in verdict.reason, verdict.reason


def test_an_upstream_rollback_after_the_promotion_is_reported_not_acted_on() -> None:
    from reconciler.fleet.promotion import upstream_rolled_back
    from reconciler.gitops.status_policy import snapshot_key
    from reconciler.sync.status_view import report

    rolled = upstream(result="RolledBack", runs="2.32.0.6")
    note = upstream_rolled_back("lab-10", rolled, "2.33.0.9-amd64")
    assert note is not None and note["version"] == "2.33.0.9-amd64"
    assert note["message"].startswith(f"upstream lab-10 rolled 2.33.0.9-amd64 back at {FINISHED}")
    assert upstream_rolled_back("lab-10", rolled, "2.32.0.6") is None  # not what runs here
    assert upstream_rolled_back("lab-10", upstream(), "2.33.0.9") is None  # completed there
    snap = {"cluster": "prod-100", "upgradeStatus": {"phase": "Idling"},
            "promotion": {"upstreamRolledBack": note}}
    assert snapshot_key(snap).upstream_rolled_back == "2.33.0.9-amd64"  # a new state: committed
    lines = report(snap, now=0.0).waiting_for
    assert any(line.startswith("a person: upstream lab-10 rolled 2.33.0.9-amd64 back")
               for line in lines), lines


def test_branch_mode_names_the_version_to_promote_and_when_to_look_again() -> None:
    from reconciler.fleet.promotion import promotion_candidate

    early, late = parse_time("2026-11-30T14:00:00Z"), parse_time("2026-12-01T03:00:00Z")
    assert promotion_candidate("lab-10", upstream(), "2.32.0.6", soak=DAY, now=late) == (
        "2.33.0.9", None)
    assert promotion_candidate("lab-10", upstream(), "2.32.0.6", soak=DAY, now=early) == (
        None, parse_time("2026-12-01T02:00:00Z"))
    assert promotion_candidate("lab-10", upstream(), "2.33.0.9-amd64", soak=DAY, now=late) == (
        None, None)  # already named
    assert promotion_candidate("lab-10", upstream(result="RolledBack"), "2.32.0.6", soak=DAY,
                               now=late) == (None, None)
