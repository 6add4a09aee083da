"""Which nodes start (docs/rollout.md#upgrading-one-node steps 4-6): the rollout order, retries
after their back-off, fresh starts within the step's slots and ``maxUnavailable``, the nodes
cordoned ahead, and the maintenance windows (docs/configuration.md#maintenance-windows) fresh starts
wait for. With a topology (docs/rollout.md#topology-aware-waves) the order is the topology's,
``sequential`` holds the nodes of a domain until the domains before it are done, and each domain's
budget holds its fresh starts (``fresh_starts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from reconciler.names import ANN_ATTEMPT, ANN_FAILED_AT, ANN_STATE, ANN_TARGET, STATE_CORDONED
from reconciler.rollout import drain, node_states, skipped
from reconciler.rollout import status as st
from reconciler.rollout.model import PlannerSettings, RolloutNode
from reconciler.rollout.pass_state import Decisions, Found, Observed
from reconciler.rollout.scan import CLOCK_SLACK
from reconciler.rollout.topology import Budgets, Topology, domain_name
from reconciler.timefmt import parse_time_or

_NAME = attrgetter("name")


def in_order(nodes: list[RolloutNode], topology: Topology | None = None) -> list[RolloutNode]:
    """The rollout order: canaries first, then by name (names are unique, so this is the order
    of ``(not canary, name)``; sorted by a C key, the lists are a fleet long); with a
    topology, the topology's."""
    if topology is not None:
        return topology.in_order(nodes)
    canaries = [n for n in nodes if n.labels and n.canary]
    if not canaries:
        return sorted(nodes, key=_NAME)
    others = [n for n in nodes if not (n.labels and n.canary)]
    return sorted(canaries, key=_NAME) + sorted(others, key=_NAME)


def waits_for(settings: PlannerSettings, node: RolloutNode) -> Sequence[str]:
    """The pods a node waits for before it starts (docs/rollout.md#upgrading-one-node: a busy node
    waits; docs/live-clusters.md#waiting-for-jobs: and for its ``waitFor`` pods). Nothing when drain
    is on: a draining node waits for its pods itself, in flight."""
    if settings.drain is not None:
        return ()
    if settings.wait_for is None or not node.pods:
        return node.workloads
    return sorted({*node.workloads, *drain.wait_for_pods(node, settings.wait_for)})


def retry_due(seen: Observed, node: RolloutNode, epoch_start: float) -> float:
    ann = node.annotations
    failed_at = parse_time_or(ann.get(ANN_FAILED_AT), seen.now)
    if failed_at < epoch_start:
        return seen.now  # failed before a person resumed: retry at once
    return failed_at + seen.settings.backoff(st.int_or(ann.get(ANN_ATTEMPT), 1))


def retries(seen: Observed, out: Decisions, failed: list[RolloutNode], target: str, slots: int,
            topology: Topology | None) -> int:
    """Retry failed nodes whose back-off passed, in the rollout order; returns how many were
    started."""
    cond = out.status.condition(st.COND_PROGRESSING)
    epoch_start = parse_time_or(cond.last_transition_time if cond else None, seen.now)
    started = 0
    for node in in_order(failed, topology):
        if started >= slots:
            break
        due = retry_due(seen, node, epoch_start)
        if due > seen.now + CLOCK_SLACK:
            out.requeue_at(due)
            continue
        if (waits_for(seen.settings, node) or not node.ready or node.pod is None
                or node.pod.deleting):
            continue
        node_states.start(seen, out, node, target,
                          st.int_or(node.annotations.get(ANN_ATTEMPT), 1) + 1)
        out.event(
            "NodeRetried",
            f"{node.name}: retrying the driver pod",
            node=node.name,
            step=out.step_index(),
        )
        if topology is not None:
            topology.retried(node)
        started += 1
    return started


def fresh_starts(
    seen: Observed, out: Decisions, candidates: list[RolloutNode], target: str, count: int,
    ahead: int, topology: Topology | None, turns: skipped.Turns | None = None,
) -> tuple[int, frozenset[str]]:
    """Start up to ``count`` nodes not started yet, in rollout order, and cordon the next
    ``ahead`` ones; busy nodes wait. Returns how many started and the nodes cordoned ahead
    (kept or new). ``turns``: ``unavailableNodes: skip``, a node unavailable at its turn is
    skipped (and ``count`` follows the smaller N). With a topology, ``sequential`` neither
    starts nor cordons a node of a domain after the first one not done, and a node whose
    domain's budget is used up is cordoned ahead at most."""
    started = 0
    kept: set[str] = set()
    blocked: list[str] = []
    settings = seen.settings
    limit = settings.message_node_limit
    gate: int | None = None
    budgets: Budgets | None = None
    gated: str | None = None  # the message of a domain the gate holds back
    if topology is not None:
        gate = topology.open_rank()
        budgets = Budgets(topology) if topology.settings.max_unavailable_per_domain else None
    for node in in_order(candidates, topology):
        if started >= count and len(kept) >= ahead:
            break
        if budgets is not None and len(kept) >= ahead and budgets.exhausted():
            break  # every domain's budget is used up
        if gate is not None and topology is not None:
            domain = topology.domain(node)
            if topology.rank.get(domain, gate + 1) > gate:
                if started < count:
                    gated = _gate_message(topology, gate, domain)
                break  # the order is domain by domain: every later node is held too
        if turns is not None and started < count and turns.skips(node):
            count = turns.count
            continue
        if not node.ready:
            continue
        cordoned = (node.annotations.get(ANN_STATE) == STATE_CORDONED
                    and node.annotations.get(ANN_TARGET) == target)
        busy = waits_for(settings, node)
        if busy:
            if started < count and len(blocked) < limit:
                blocked.append(f"{node.name} ({', '.join(busy)})")
            if (started < count and settings.wait_for is not None
                    and drain.wait_for_pods(node, settings.wait_for)):
                # its turn: cordoned so no new job lands while its jobs finish
                # (docs/live-clusters.md#waiting-for-jobs)
                kept.add(node.name)
                if not cordoned:
                    node_states.cordon_ahead(out, node, target)
            continue
        if started < count and (budgets is None or budgets.allows(node)):
            if cordoned:
                node_states.start_cordoned(seen, out, node, target)
            else:
                node_states.start(seen, out, node, target, 1)
            started += 1
            continue
        if len(kept) >= ahead:
            continue  # held by its domain's budget, and no room ahead
        kept.add(node.name)
        if not cordoned:
            node_states.cordon_ahead(out, node, target)
    waits: list[str] = []
    if blocked:
        waits.append("waiting for GPU workloads to finish: " + "; ".join(blocked))
    if budgets is not None and budgets.held and started < count:
        waits.append(budgets.message())
    if gated:
        waits.append(gated)
    if waits:
        out.set(step_message="; ".join(waits))
    return started, frozenset(kept)


def _gate_message(topology: Topology, gate: int, waiting: str | None) -> str:
    open_domain = topology.domain_at(gate)
    count = topology.counts.get(open_domain)
    done = f" ({count.settled}/{count.nodes} upgraded or failed)" if count is not None else ""
    return (f"sequential by {topology.settings.key}: domain {domain_name(waiting)} waits "
            f"until domain {domain_name(open_domain)} is done{done}")


def window_open(seen: Observed, out: Decisions) -> bool:
    """Fresh starts only inside a maintenance window (docs/configuration.md#maintenance-windows);
    when closed, the step message says when the next one opens and the planner wakes then."""
    calendar = seen.snap.windows
    if calendar is None or calendar.is_open(seen.now):
        return True  # (is_open is cheap; only a closed calendar looks ahead)
    verdict = calendar.verdict(seen.now)
    out.set(step_message=verdict.describe())
    out.hold(verdict.hold())
    if verdict.until is not None:
        out.requeue_at(verdict.until)
    return False


def start_nodes(
    seen: Observed, out: Decisions, found: Found, target: int, batch: int, next_wave: int
) -> None:
    """Start what the slots and maxUnavailable allow; cordon ahead the nodes next in line: up
    to maxParallel of this step's, or once all of this step's nodes are started, the next
    step's first wave (``next_wave``: 0 when a pause or a gate comes first)."""
    policy, scan, revision = seen.policy, found.scan, found.revision
    parallel = policy.batch_max_parallel(batch)
    slots = parallel - scan.in_flight
    retried = (retries(seen, out, scan.failed, revision, slots, found.topology)
               if slots > 0 else 0)
    slots -= retried
    occupied = (
        scan.ready + scan.in_flight + len(scan.failed) + len(scan.new_failures)
        + scan.joiners_pending + len(scan.tolerated)
    )
    need = target - occupied
    count = min(max(need, 0), max(slots, 0))
    ahead = 0
    if seen.settings.cordon_ahead:
        ahead = min(need - count, parallel) if need > count else next_wave
    fresh = 0
    if (count or ahead) and not window_open(seen, out):
        count = ahead = 0  # nodes cordoned ahead go back to work until the window opens
    if count or ahead:
        max_unavailable = policy.resolved_max_unavailable(out.total)
        # a retried node is in flight now, and in-flight nodes are not unavailable
        unavailable = scan.unavailable - retried
        if unavailable <= max_unavailable:
            turns = (skipped.Turns(seen, out, revision, out.status.current_step_index, occupied,
                                   count)
                     if count and seen.settings.unavailable_nodes == skipped.SKIP else None)
            fresh, kept = fresh_starts(
                seen, out, scan.cordoned + scan.untouched, revision, count, ahead,
                found.topology, turns,
            )
            out.keep_cordoned_ahead(kept)
        else:
            # the nodes next in line stay cordoned (no churn while availability flickers)
            out.keep_cordoned_ahead(frozenset(n.name for n in scan.cordoned))
            if need > 0:
                out.set(
                    step_message=f"{unavailable} rollout nodes unavailable (maxUnavailable "
                    f"{max_unavailable}): no new node starts"
                )
    out.count(in_flight=scan.in_flight + retried + fresh)
