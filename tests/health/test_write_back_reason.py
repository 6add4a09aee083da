"""The write-back of docs/gitops.md#git-stays-the-truth names the failing health check
(docs/health.md)."""

from __future__ import annotations

from reconciler.sync.drift import pause_reason


def condition(ctype: str, message: str) -> dict[str, str]:
    return {"type": ctype, "status": "True", "reason": ctype, "message": message}


def test_a_fallback_caused_by_a_health_check_names_the_check_in_the_pause_reason() -> None:
    upgrade = {"condition": [
        condition("BatchFailed", "step 1: 1 failures reached maxFailureThreshold 1 "
                                 "(failed: gpu-7)"),
        condition("HealthCheckFailed", "health check gpus-available failed on node gpu-7: "
                                       "value 0 (query min(mx_gpu_state{Hostname='gpu-7'}))"),
    ]}
    reason = pause_reason(upgrade)
    assert reason is not None and reason.startswith("failure fallback: health check "
                                                    "gpus-available failed on node gpu-7")


def test_other_fallbacks_keep_their_reason() -> None:
    upgrade = {"condition": [condition("BatchFailed", "step 1: 3 failures")]}
    assert pause_reason(upgrade) == "failure fallback: step 1: 3 failures"
    stale = {"condition": [condition("BatchFailed", "x"),
                           {**condition("HealthCheckFailed", "old"), "status": "False"}]}
    assert pause_reason(stale) == "failure fallback: x"
