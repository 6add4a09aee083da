"""The predicted timeline: the planner's own model (``reconciler.rollout.simulator``) run on a
virtual fleet of the rollout's size, with the install time measured so far in this rollout.

The model plans with the settings the controller plans with (``PlannerSettings.for_pass``
over the cluster's ``rollout`` section: readyTimeout, drain, waitFor, unavailableNodes, and the
topology the rollout froze when it started, on the nodes' own topology labels).

The simulator starts a rollout from the beginning; it cannot be seeded with a rollout half
done. So the whole rollout is simulated once per (policy, fleet size, install time) and the
dashboard takes per-step durations from it: the rest of the running step is the model's time
for it less what has passed, later steps take the model's time. Gates are released at once in
the model (a person's time is unknown); the page says how many are left. Pure.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.dashboard.model import Prediction, step_times
from reconciler.rollout.model import PlannerSettings
from reconciler.rollout.simulator import SimConfig, SimResult, simulate

#: the install time assumed before any node of this rollout is upgraded (simulate's default)
DEFAULT_INSTALL_SECONDS = 60.0


def install_estimate(samples: Sequence[float]) -> tuple[float, bool]:
    """The median of the measured install times, or the default when none is measured yet."""
    if not samples:
        return DEFAULT_INSTALL_SECONDS, False
    return max(float(statistics.median(samples)), 0.001), True


#: the model's fleet: node names with the labels the planner reads (None: node-0001 ..)
ModelFleet = tuple[tuple[str, Mapping[str, str]], ...]
DEFAULT_SETTINGS = PlannerSettings()


def prediction_key(driver: Mapping[str, Any], nodes: int, install_seconds: float,
                   settings: PlannerSettings = DEFAULT_SETTINGS, fleet: ModelFleet = ()) -> str:
    """Equal keys give equal predictions: the install time is rounded to 5 %, so a new
    measurement does not re-run the model every time."""
    policy = dict(driver.get("upgradePolicy") or {})
    policy.pop("pause", None)
    bucket = round(math.log(max(install_seconds, 0.001), 1.05))
    labels = hashlib.sha256(repr([(name, sorted(labels.items())) for name, labels in fleet])
                            .encode()).hexdigest() if fleet else ""
    return repr((sorted(policy.items(), key=lambda kv: kv[0]), nodes, bucket, settings, labels))


def run_model(driver: Mapping[str, Any], *, nodes: int, install_seconds: float,
              settings: PlannerSettings = DEFAULT_SETTINGS, fleet: ModelFleet = (),
              until: float = 30 * 24 * 3600.0) -> SimResult:
    """The rollout of ``driver``'s policy on ``nodes`` virtual nodes (``fleet``: these nodes
    instead), gates released at once."""
    policy = dict(driver.get("upgradePolicy") or {})
    policy["pause"] = False
    policy["enableRollout"] = True
    payload = dict(driver.get("payload") or {})
    payload.setdefault("version", "new")
    model_driver = {"payload": payload, "upgradePolicy": policy}
    config = SimConfig(
        nodes=len(fleet) if fleet else max(nodes, 1),
        from_version=str(payload.get("version")) + "-previous",
        install_seconds=install_seconds,
        auto_confirm=0.0,
        until=until,
        settings=settings,
        fleet=fleet,
    )
    return simulate(model_driver, config)


def predict(driver: Mapping[str, Any], *, nodes: int, install_samples: Sequence[float],
            settings: PlannerSettings = DEFAULT_SETTINGS, fleet: ModelFleet = ()) -> Prediction:
    install, measured = install_estimate(install_samples)
    result = run_model(driver, nodes=nodes, install_seconds=install, settings=settings,
                       fleet=fleet)
    return prediction_from(result, install_seconds=install, measured=measured,
                           nodes=len(fleet) if fleet else nodes)


def prediction_from(result: SimResult, *, install_seconds: float, measured: bool,
                    nodes: int) -> Prediction:
    times = step_times([(e.t, e.type, e.step) for e in result.events])
    count = max(times) if times else 0
    step_seconds: list[float] = []
    upgrade_seconds: list[float] = []
    for number in range(1, count + 1):
        at = times.get(number, {})
        start = at.get("started", 0.0)
        step_seconds.append(max(at.get("ended", result.duration_seconds) - start, 0.0))
        upgrade_seconds.append(max(at.get("upgraded", at.get("ended", start)) - start, 0.0))
    return Prediction(tuple(step_seconds), tuple(upgrade_seconds), install_seconds, measured,
                      nodes)
