"""The batched canary rollout of docs/rollout.md#the-state-machine as a pure function.

``plan(snapshot, now)`` looks at what a controller can observe and returns the actions to take
and the new ``status.upgradeStatus``. It keeps no memory between calls: everything a restart
needs is in the status it returns and in the node annotations its actions write. Calling it again
on the same snapshot returns the same plan, and calling it on the snapshot after its actions were
carried out asks for nothing new.

The status is read once into an ``UpgradeStatus`` value; each step of a pass replaces it with
the next value, and the JSON written back differs from what was read only where a value changed.

The parts, NVIDIA ``pkg/upgrade``'s shape: ``pass_state`` (what a pass read, frozen:
``Observed`` and a scan's ``Found``, NVIDIA's ``BuildState``; and what it decided so far,
``Decisions``, the only thing a pass writes), ``phases`` (idle, progressing), ``scan`` (every
node into one state), ``node_states`` (one function per node state: what moves a node out of
it), ``steps`` (counters, gates, pauses, the fallback), ``selection`` (order, retries, fresh
starts, windows), ``rollback`` and ``health_judgement``.

One pass over the nodes per call (O(N)); a caller batches simultaneous events into one call.
"""

from __future__ import annotations

from reconciler import planning
from reconciler.names import ACTIVE_PHASES
from reconciler.rollout import phases, rollback
from reconciler.rollout import status as st
from reconciler.rollout.actions import Action
from reconciler.rollout.drain import STATUS_LIMIT
from reconciler.rollout.model import PlannerSettings, RolloutSnapshot
from reconciler.rollout.pass_state import Decisions, Observed, observe
from reconciler.rollout.scan import CLOCK_SLACK

DEFAULT_SETTINGS = PlannerSettings()

#: what ``plan`` returns: the actions, the new ``status.upgradeStatus`` (equal to the old one,
#: same lastUpdateTime, when nothing changed), when to plan again (pause end, back-off,
#: readyTimeout), and the nodes in flight and unavailable
Plan = planning.Plan[Action]


def plan(
    snapshot: RolloutSnapshot, now: float, settings: PlannerSettings = DEFAULT_SETTINGS
) -> Plan:
    seen = observe(snapshot, now, settings)
    out = Decisions.begin(seen)
    phase = out.status.phase or st.PHASE_IDLING
    if phase == st.PHASE_PROGRESSING:
        phases.progressing(seen, out)
    elif phase in (st.PHASE_TERMINATING, st.PHASE_DISABLING):
        rollback.rolling_back(seen, out)
    else:
        phases.idle(seen, out)
    return _finish(seen, out)


def _finish(seen: Observed, out: Decisions) -> Plan:
    """The new status (its update time moved only when something changed) and the plan."""
    out.set(upgrading=out.status.phase in ACTIVE_PHASES)
    holds = tuple(h for i, h in enumerate(out.holds) if h not in out.holds[:i])
    if holds != out.status.holds:
        out.set(holds=holds)
    drain = out.drain
    draining = tuple(sorted(drain.entries, key=lambda d: str(d["node"]))[:STATUS_LIMIT])
    if draining != out.status.draining:
        out.set(draining=draining)
    if drain.notes and not out.status.step_message:  # what the step waits for, unless said
        notes = [drain.notes[n] for n in sorted(drain.notes)]
        out.set(step_message="draining " + seen.named(notes, separator="; ", more="; and "))
    status = out.status.to_json()
    # ``source`` is the status as read, every field of docs/rollout.md#status-fields present
    changed = st.without_update_time(status) != st.without_update_time(out.status.source)
    if changed:
        status["status"]["lastUpdateTime"] = seen.now_text
    else:
        status["status"]["lastUpdateTime"] = (seen.snap.status.get("status") or {}).get(
            "lastUpdateTime", ""
        )
    future = [t for t in out.requeue if t > seen.now + CLOCK_SLACK]
    return planning.Plan(
        actions=tuple(out.actions),
        status=status,
        changed=changed,
        requeue_at=min(future) if future else None,
        in_flight=out.in_flight,
        unavailable=out.unavailable,
        again=out.again,
    )
