"""The sync pass's promotion gate step (docs/configuration.md#promotion ``hold``), pure: a payload
version the cluster does not run yet waits while the upstream has not completed it ``soak`` ago; a
change that keeps the version, or one the gate allows, goes on to the apply."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from reconciler.sync.commit_view import LiveObject, PromotionView
from reconciler.sync.outcome import Accepted, Held, Rejected
from reconciler.sync.steps import plan_commit, promotion_gate
from reconciler.timefmt import parse_time
from tests.sync.test_steps import SOURCE, accepted, through, view

NOW = parse_time("2026-11-30T14:00:00Z")


def lab(result: str = "Completed", version: str = "2.33.0.9") -> dict[str, Any]:
    return {"cluster": "lab-10",
            "upgradeStatus": {"phase": "Idling", "status": {"currentStepState": "Completed"}},
            "lastRollout": {"version": version, "result": result,
                            "finishedAt": "2026-11-30T02:00:00Z"},
            "spec": {"driver": {"payload": {"version": version}}}}


def live(version: str) -> LiveObject:
    return LiveObject({"metadata": {"name": "cluster-operator", "managedFields": []},
                       "spec": {"driver": {"payload": {"version": version}}}})


def gated(soak: float, snapshot: dict[str, Any] | None, running: str = "2.32.0.6"
          ) -> Any:
    commit = replace(view(), live=live(running), now=NOW,
                     promotion=PromotionView("lab-10", soak, "hold", snapshot))
    return promotion_gate(commit, through(4, commit)), commit


def test_a_version_before_its_soak_is_held_with_the_earliest_time() -> None:
    outcome, _ = gated(24 * 3600.0, lab())
    assert isinstance(outcome, Held)
    assert outcome.reason.startswith("held by promotion gate: 2.33.0.9 waits for lab-10: "
                                     "upstream lab-10 completed 2.33.0.9 at ")
    assert outcome.recheck_at == parse_time("2026-12-01T02:00:00Z")
    assert outcome.held == {"version": "2.33.0.9", "upstream": "lab-10", "commit": SOURCE,
                            "reason": outcome.held["reason"],
                            "earliest": "2026-12-01T02:00:00Z"}


def test_a_version_past_its_soak_goes_on_to_the_apply() -> None:
    outcome, commit = gated(3600.0, lab())
    accepted(outcome)
    assert isinstance(plan_commit(commit), Accepted)


def test_a_rolled_back_upstream_holds_without_a_time() -> None:
    outcome, _ = gated(0.0, lab(result="RolledBack"))
    assert isinstance(outcome, Held) and outcome.recheck_at is None
    assert "rolled 2.33.0.9 back" in outcome.reason


def test_a_change_that_keeps_the_running_version_is_not_held() -> None:
    outcome, _ = gated(24 * 3600.0, None, running="2.33.0.9-amd64")
    accepted(outcome)


def test_an_unusable_promotion_section_rejects_naming_the_key() -> None:
    commit = replace(view(), promotion=PromotionView(
        "", 0.0, "hold", None, error="clusters.prod-a.promotion.mode: expected one of hold"))
    outcome = plan_commit(commit)
    assert isinstance(outcome, Rejected)
    assert outcome.findings[0].file == "reconciler.yaml"
    assert "clusters.prod-a.promotion.mode" in outcome.reason
