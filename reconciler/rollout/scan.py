"""One pass over the rollout nodes against a target revision (docs/rollout.md#upgrading-one-node):
what is Ready, in flight, failed, untouched; which moves completed or failed since the last look.

This is the planner's only O(N) step; everything else works on its counts and short lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass, field

from reconciler.names import (
    ANN_DELETED_AT,
    ANN_DELETED_POD,
    ANN_FAILURE_REASON,
    ANN_FAILURES,
    ANN_SKIPPED,
    ANN_STATE,
    ANN_TARGET,
    STATE_CORDONED,
    STATE_DONE,
    STATE_DRAINING,
    STATE_FAILED,
    STATE_UPGRADING,
    ConditionType,
)
from reconciler.rollout import status as st
from reconciler.rollout.drain import ready_timeout_of
from reconciler.rollout.model import RolloutNode
from reconciler.rollout.node_class import (
    left_alone,
    pod_failed,
    skip_requested,
    standing,
    tolerated_step,
)
from reconciler.rollout.skipped import unavailable_at_turn
from reconciler.timefmt import parse_time_or

#: stored timestamps carry milliseconds; instants closer than this count as reached, so a
#: deadline read back from text never lands a hair after the ``now`` that wrote it
CLOCK_SLACK = 0.0005


@dataclass(slots=True)
class NodeScan:
    """One pass over the nodes against a target revision."""

    ready: int = 0  # Ready on the target revision
    unavailable: int = 0
    in_flight: int = 0
    completed: list[RolloutNode] = field(default_factory=list)
    new_failures: list[tuple[RolloutNode, str]] = field(default_factory=list)
    failed: list[RolloutNode] = field(default_factory=list)  # failed moves to the target
    #: failed moves the step tolerated (docs/rollout.md#failures-tolerated-in-a-step), with the
    #: step that tolerated each: left behind, not retried, not unavailable, done for the steps
    tolerated: list[tuple[int, RolloutNode]] = field(default_factory=list)
    #: the nodes of ``new_failures`` counted in ``unavailable`` (a toleration takes them out)
    unavailable_failures: set[str] = field(default_factory=set)
    joiners_pending: int = 0  # untouched, on the target revision, not Ready yet
    #: of those, pods on Ready nodes younger than readyTimeout (still starting: a rollback
    #: waits for them); older ones or on NotReady nodes were broken before and do not block
    settling: int = 0
    untouched: list[RolloutNode] = field(default_factory=list)  # not on the target, not moved
    failed_other: list[RolloutNode] = field(default_factory=list)  # rollback: failed upgrades
    convert: list[RolloutNode] = field(default_factory=list)  # rollback: in-flight upgrades
    redo: list[RolloutNode] = field(default_factory=list)  # recorded move, pod not deleted yet
    #: cordoned ahead for the target, old pod still there: the first candidates to start
    cordoned: list[RolloutNode] = field(default_factory=list)
    #: cordoned ahead for another revision (or during a rollback), old pod still there
    stale_cordoned: list[RolloutNode] = field(default_factory=list)
    #: cordoned ahead and its old pod deleted, and neither the pods nor the controller's
    #: memory say when (it restarted meanwhile): in flight; the planner records it now
    unrecorded: list[RolloutNode] = field(default_factory=list)
    #: draining for the target (docs/live-clusters.md#the-drain): in flight, its pods evicted or
    #: waited for, the old driver pod still there (``node_states.draining``)
    draining: list[RolloutNode] = field(default_factory=list)
    epoch_failures: int = 0
    ready_other: int = 0  # rollback: still Ready on the revision being rolled back
    deadlines: list[float] = field(default_factory=list)
    #: not rollout nodes of this rollout (docs/live-clusters.md#a-node-under-repair, ``skipped``):
    #: counted nowhere else (one cordoned ahead is in ``stale_cordoned`` too, to be released)
    skipped: list[RolloutNode] = field(default_factory=list)
    #: per topology domain (a value of the key's label, None: no label;
    #: docs/rollout.md#topology-aware-waves), counted only when the scan is given ``domain_key``
    domains: dict[str | None, DomainCount] = field(default_factory=dict)

    def tolerate(self, step: int, node: RolloutNode) -> None:
        """A node of ``new_failures`` the step ``step`` tolerates: left behind from now on,
        counted neither unavailable nor, in its domain, toward maxUnavailablePerDomain (the
        caller takes it out of ``new_failures``)."""
        self.tolerated.append((step, node))
        if node.name in self.unavailable_failures:
            self.unavailable_failures.discard(node.name)
            self.unavailable -= 1
        for count in self.domains.values():
            count.unavailable.discard(node.name)


@dataclass(slots=True)
class DomainCount:
    """One topology domain's rollout nodes as the scan found them."""

    nodes: int = 0
    #: upgraded or failed: under ``sequential`` the next domain waits for every node here
    settled: int = 0
    in_flight: int = 0
    #: names of its unavailable nodes (docs/rollout.md#upgrading-one-node step 5): a fresh start of
    #: one of them does not add to the domain's budget, it only moves it to in flight
    unavailable: set[str] = field(default_factory=set)


def deletion_time(node: RolloutNode, revision: str | None) -> float:
    """When the old pod of a node cordoned ahead for ``revision`` was deleted, as its pods
    say: the old pod's deletion request; once it is gone, the time the controller saw asked
    for (``pod_deleted_at``), else the new pod's creation (a little later: readyTimeout runs
    a little late). 0: nothing says (the controller restarted between the two)."""
    pod = node.pod
    if pod is not None and pod.deleting:
        return pod.deletion_requested_at
    if node.pod_deleted_at:
        return node.pod_deleted_at
    if pod is not None and pod.revision == revision:
        return pod.created_at
    return 0.0


@dataclass(frozen=True, slots=True)
class _Look:
    """What a scan compares every node with."""

    target: str
    now: float
    #: ``<epoch>|``: the prefix of a failure count made in the current epoch
    epoch: str
    timeout: float
    rollback_from: str
    verifying: Set[str]
    health_failed: Set[str]
    #: skipped nodes are told apart (a rollout; a rollback moves every node back)
    skipping: bool = False
    #: the nodes the status lists as skipped (frozen for the rollout)
    skipped: Set[str] = frozenset()
    #: ``unavailableNodes: skip``: a node not started yet that is NotReady or cordoned by
    #: someone else is not counted unavailable (it is skipped at its turn, or recovers first)
    skip_unavailable: bool = False
    domain_key: str | None = None


def scan_nodes(
    nodes: Iterable[RolloutNode],
    target: str,
    *,
    now: float,
    epoch: str,
    ready_timeout: float,
    rollback_from: str = "",
    verifying: Set[str] = frozenset(),
    health_failed: Set[str] = frozenset(),
    skipped: Set[str] | None = None,
    skip_unavailable: bool = False,
    domain_key: str | None = None,
) -> NodeScan:
    """Classify every node against ``target``; detect completions and failures.

    ``rollback_from`` is the revision being rolled back (empty while progressing).
    ``verifying``: moved nodes Ready on the target whose health checks have not passed yet
    (in flight, not upgraded); ``health_failed``: those whose check failed just now
    (docs/health.md). A node that failed a health check stays failed with its pod Ready until it is
    retried. ``skipped``: the nodes the rollout skipped so far (None: none are told apart, as in a
    rollback); nodes labelled ``upgrade.skip`` before their start or recorded as skipped for
    ``target`` join them (``NodeScan.skipped``). ``skip_unavailable``: ``unavailableNodes:
    skip`` (docs/live-clusters.md#a-node-under-repair). ``domain_key``: count per domain of this
    node label too (``NodeScan.domains``).
    """
    scan = NodeScan()
    look = _Look(target, now, epoch + "|", ready_timeout, rollback_from, verifying,
                 health_failed, skipped is not None, skipped or frozenset(), skip_unavailable,
                 domain_key)
    for node in nodes:
        _classify(scan, look, node)
    return scan


def _classify(scan: NodeScan, look: _Look, node: RolloutNode) -> None:
    """One node: its recorded state as it stands (``node_class.standing``: a node cordoned
    ahead or draining whose old pod went counts as upgrading; a draining node is in flight),
    then the function of its state (``_upgrading``, ``_failed``, ``_not_moved``), then
    availability (docs/rollout.md#upgrading-one-node step 5: in flight, or else unavailable when not
    Ready, held by its checks, or cordoned by someone other than us). Counted inline: this runs once
    per node and pass. A node skipped in this rollout (``skipped``) counts nowhere.

    The two commonest nodes of a large rollout are decided first, by the same rules: one the
    rollout never touched (no annotations), schedulable and Ready on another revision, and one
    done, Ready on the target."""
    ann = node.annotations
    pod = node.pod
    target = look.target
    # a node without labels, a skip record or a name on the skipped list has nothing to be
    # skipped by (``skip_requested``'s three reasons); at 100,000 nodes most have none
    skip = look.skipping and bool(look.skipped or node.labels or ANN_SKIPPED in ann) and (
        skip_requested(node, target, look.skipped))
    if not ann:
        if (pod is not None and pod.ready and not pod.deleting and pod.revision != target
                and node.ready and not node.unschedulable and look.domain_key is None
                and not skip):
            scan.untouched.append(node)  # ``_not_moved``, available
            if look.rollback_from and pod.revision == look.rollback_from:
                scan.ready_other += 1
            return
        recorded = None
    else:
        recorded = ann.get(ANN_STATE)
        if (recorded == STATE_DONE and pod is not None and pod.ready and not pod.deleting
                and pod.revision == target and ann.get(ANN_TARGET) == target and node.ready
                and not node.unschedulable and look.domain_key is None
                and node.name not in look.verifying and node.name not in look.health_failed
                and not skip):
            failures = ann.get(ANN_FAILURES)
            if failures and failures.startswith(look.epoch):
                scan.epoch_failures += st.int_or(failures[len(look.epoch) :], 1)
            scan.ready += 1  # done, Ready on the target, available
            return
    if skip:
        _skipped(scan, node)
        return
    started = 0.0  # a move's start its pods tell (no ``deleted-at`` written)
    unrecorded = waiting = draining = False
    if recorded in (STATE_CORDONED, STATE_DRAINING):
        moving_to = ann.get(ANN_TARGET)
        if standing(node, recorded, moving_to) != STATE_UPGRADING:
            if recorded == STATE_DRAINING and moving_to == target:
                scan.draining.append(node)  # in flight (``node_states.draining``)
                draining = True
            elif recorded == STATE_CORDONED and moving_to == target and not look.rollback_from:
                scan.cordoned.append(node)  # waits for a slot (``selection``)
                waiting = True
            else:
                scan.stale_cordoned.append(node)  # another target, or a rollback began
        else:
            # cordoned ahead: its start is the deletion alone (no record: one write less per
            # node in a wave's burst); draining: someone else deleted the old pod before the
            # drain finished. It upgrades from that deletion on.
            recorded = STATE_UPGRADING
            started = deletion_time(node, moving_to)
            unrecorded = not started
    failures = ann.get(ANN_FAILURES) if ann else None
    if failures and failures.startswith(look.epoch):
        scan.epoch_failures += st.int_or(failures[len(look.epoch) :], 1)
    state = recorded if recorded is not None and ann.get(ANN_TARGET) == target else None
    ready_target = (pod is not None and pod.revision == target and not pod.deleting
                    and pod.ready)
    #: Ready on the target but not upgraded: its health checks have not passed
    held = ready_target and (
        node.name in look.verifying or node.name in look.health_failed
        or (state == STATE_FAILED
            and ann.get(ANN_FAILURE_REASON) == ConditionType.HEALTH_CHECK_FAILED)
    )
    left = False  # left behind by a toleration: counted neither unavailable nor failed
    if waiting:
        in_flight = False
    elif draining:
        in_flight = True
    elif state == STATE_UPGRADING:
        in_flight = _upgrading(scan, look, node, started, unrecorded)
    elif state == STATE_FAILED:
        step = tolerated_step(ann, target) if not look.rollback_from else None
        if step is not None and not (ready_target and not held):
            scan.tolerated.append((step, node))
            left = True
            in_flight = False
        else:
            in_flight = _failed(scan, node, ready_target and not held)
    elif state is None:
        in_flight = _not_moved(scan, look, node, recorded)
    else:
        in_flight = False  # done, or a state this version does not know: nothing moves it
    if ready_target and not held:
        scan.ready += 1
    elif (look.rollback_from and pod is not None and pod.ready
          and pod.revision == look.rollback_from):
        scan.ready_other += 1
    unavailable = False
    if in_flight:
        scan.in_flight += 1
    elif left:
        pass  # the step accepted it as it is (docs/rollout.md#failures-tolerated-in-a-step)
    elif (
        held
        or not node.ready
        or pod is None
        or not pod.ready
        or pod.deleting
        or (node.unschedulable and left_alone(node))
    ) and not (look.skip_unavailable and _skip_pending(scan, node, waiting, state)):
        scan.unavailable += 1
        unavailable = True
        if scan.new_failures and scan.new_failures[-1][0] is node:
            scan.unavailable_failures.add(node.name)
    if look.domain_key is not None:
        _count_domain(scan, node, look.domain_key, in_flight, unavailable,
                      ready_target and not held)


def _count_domain(scan: NodeScan, node: RolloutNode, key: str, in_flight: bool,
                  unavailable: bool, upgraded: bool) -> None:
    """The node in its domain's counts (a node ``_classify`` just sorted)."""
    domain = node.labels.get(key)
    count = scan.domains.get(domain)
    if count is None:
        count = scan.domains[domain] = DomainCount()
    count.nodes += 1
    failed = bool((scan.failed and scan.failed[-1] is node)
                  or (scan.new_failures and scan.new_failures[-1][0] is node)
                  or (scan.tolerated and scan.tolerated[-1][1] is node))
    if upgraded or failed:
        count.settled += 1
    if in_flight:
        count.in_flight += 1
    if unavailable:
        count.unavailable.add(node.name)


def _skipped(scan: NodeScan, node: RolloutNode) -> None:
    scan.skipped.append(node)
    pod = node.pod
    if node.annotations.get(ANN_STATE) == STATE_CORDONED and (pod is None or not pod.deleting):
        scan.stale_cordoned.append(node)  # our cordon ahead goes back


def _skip_pending(scan: NodeScan, node: RolloutNode, waiting: bool, state: str | None) -> bool:
    """Not started yet (cordoned ahead, or just found untouched), and NotReady or cordoned by
    someone else: ``unavailableNodes: skip`` skips it at its turn unless it recovers first."""
    if not (waiting or (state is None and scan.untouched and scan.untouched[-1] is node)):
        return False
    return unavailable_at_turn(node)


def _upgrading(scan: NodeScan, look: _Look, node: RolloutNode, started: float,
               unrecorded: bool) -> bool:
    """Moving to the target: Ready (completed, or verifying), failed now, or in flight until
    readyTimeout. True when in flight."""
    pod = node.pod
    target = look.target
    # the pod whose deletion was recorded, still there: the deletion never happened (killed in
    # between), so it is not judged (a retry's old pod is on the target too) but deleted again
    undeleted = (pod is not None and not pod.deleting
                 and pod.name == node.annotations.get(ANN_DELETED_POD))
    on_target = pod is not None and pod.revision == target and not pod.deleting and not undeleted
    if on_target and pod is not None and pod.ready:
        if node.name in look.health_failed:
            scan.new_failures.append((node, ConditionType.HEALTH_CHECK_FAILED.value))
            return False
        if node.name in look.verifying:
            return True
        scan.completed.append(node)
        return False
    if on_target and pod is not None and pod_failed(pod):
        scan.new_failures.append((node, str(pod.waiting_reason)))
        return False
    deleted_at = started or parse_time_or(node.annotations.get(ANN_DELETED_AT), look.now)
    # the readyTimeout the node started with (docs/live-clusters.md: settings apply from the next
    # start)
    timeout = ready_timeout_of(node, look.timeout)
    if look.now + CLOCK_SLACK >= deleted_at + timeout:
        scan.new_failures.append((node, "ReadyTimeout"))
        return False
    scan.deadlines.append(deleted_at + timeout)
    if unrecorded:
        scan.unrecorded.append(node)
    if undeleted or (pod is not None and pod.revision != target and not pod.deleting
                     and pod.created_at < deleted_at):
        scan.redo.append(node)  # the recorded delete never happened
    return True


def _failed(scan: NodeScan, node: RolloutNode, upgraded: bool) -> bool:
    """A failed move to the target: completed once Ready there (and its checks passed), else
    failed until it is retried."""
    if upgraded:
        scan.completed.append(node)
    else:
        scan.failed.append(node)
    return False


def _not_moved(scan: NodeScan, look: _Look, node: RolloutNode, recorded: str | None) -> bool:
    """No move to the target recorded: a joiner on the target, a node still to move, or in a
    rollback a move to the revision rolled back (``other``). True when in flight."""
    pod = node.pod
    target = look.target
    ann = node.annotations
    other = (recorded if look.rollback_from and ann.get(ANN_TARGET) == look.rollback_from
             else None)
    on_target = pod is not None and pod.revision == target and not pod.deleting
    if on_target and pod is not None and pod.ready:
        if other in (STATE_UPGRADING, STATE_FAILED):
            scan.completed.append(node)
        return False
    if on_target and pod is not None:
        if other == STATE_UPGRADING:
            return True  # the DaemonSet recreated it on the target already
        scan.joiners_pending += 1
        if node.ready and look.now + CLOCK_SLACK < pod.created_at + look.timeout:
            scan.settling += 1
            scan.deadlines.append(pod.created_at + look.timeout)
        return False
    if pod is not None and not pod.deleting:
        if other == STATE_UPGRADING:
            scan.convert.append(node)
            return True
        if other == STATE_FAILED:
            scan.failed_other.append(node)
        else:
            scan.untouched.append(node)
        return False
    return other == STATE_UPGRADING  # waiting for the DaemonSet to recreate the pod
