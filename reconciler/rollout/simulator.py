"""A virtual fleet on a virtual clock, driven by the real planner: the what-if engine behind
``reconciler simulate`` and the rollout benchmark.

The fleet plays the parts of kubelet, the DaemonSet controller (OnDelete: a deleted driver pod
comes back at once on the template's current revision) and a person confirming gates. Events
that happen at the same virtual instant are handled together, so a wave of 50,000 pods turning
Ready is one planning call, and the fleet is kept as an index the planner reads without copying.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, assert_never, cast

from reconciler.fleet.windows import WindowCalendar
from reconciler.health.checks import Expectation, HealthConfig, NoSample, Reading
from reconciler.names import ACTIVE_PHASES, ANN_DRAIN_BLOCKED_BY
from reconciler.policy.payload import Payload
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout import status as st
from reconciler.rollout.actions import (
    NODE_ACTIONS,
    Action,
    ClusterAction,
    DeleteDriverPod,
    NodeAction,
    RecordEvent,
    RestorePayload,
    SetDaemonSetImage,
    SetPolicyPause,
)
from reconciler.rollout.health_gate import pending_queries
from reconciler.rollout.model import (
    DaemonSetView,
    DriverPod,
    HealthInput,
    HealthReading,
    PlannerSettings,
    RolloutNode,
    RolloutSnapshot,
    WorkloadPod,
    build_node,
    build_pod,
)
from reconciler.rollout.node_class import tolerated_step
from reconciler.rollout.node_view import NodeWorld, apply_node_actions, with_pod
from reconciler.rollout.planner import Plan, plan
from reconciler.rollout.sim_workloads import ServingFleet, ServingModel
from reconciler.rollout.status import UpgradeStatus

Fault = Literal["imagepull", "crashloop", "never-ready", "node-notready"]
FAULTS: tuple[str, ...] = ("imagepull", "crashloop", "never-ready", "node-notready")
#: virtual time 0 is this instant (2026-01-01T00:00:00Z), so status timestamps read naturally
EPOCH = 1767225600.0
DEFAULT_UNTIL = 7 * 24 * 3600.0
#: the largest fleet the model runs: about 20 s and 0.5 GB on this project's 2-core machine
MODEL_MAX_NODES = 100_000

#: the labels and the first annotations of every virtual node: none, shared (the views are
#: read, never changed in place; an action's view gets a dict of its own)
_NOTHING: Mapping[str, str] = MappingProxyType({})
#: actions after which the planner need not plan again at once
_NODE_ACTIONS = (*NODE_ACTIONS, RecordEvent)


def node_name(index: int, width: int) -> str:
    return f"node-{index:0{width}d}"


def revision_of(image: str) -> str:
    """Stand-in for the DaemonSet controller's ControllerRevision hash: same template, same hash."""
    return hashlib.sha256(image.encode()).hexdigest()[:10]


@dataclass(frozen=True, slots=True)
class SimConfig:
    nodes: int
    from_version: str
    install_seconds: float = 60.0
    auto_confirm: float | None = None
    until: float = DEFAULT_UNTIL
    faults: Mapping[str, Fault] = field(default_factory=dict)
    #: the health gates (docs/health.md); None: no ``health`` section
    health: HealthConfig | None = None
    #: node -> ``gpu-unavailable`` (its node checks fail on the new version) or
    #: ``gpu-throttling`` (the step checks of its step fail)
    gpu_faults: Mapping[str, str] = field(default_factory=dict)
    #: seconds from a new pod turning Ready until its telemetry is in Prometheus (scrape
    #: delay): a check reads no sample until then
    scrape_delay: float = 15.0
    settings: PlannerSettings = field(default_factory=PlannerSettings)
    #: plan again after every change and check that the repeat asks for no node action
    #: (idempotency); costs a second pass per event, meant for tests
    verify_idempotent: bool = False
    #: planning calls (1-based) at which the controller dies: it carries out a prefix of the
    #: plan's actions (length chosen by ``crash_seed``) and never writes the status
    crash_calls: frozenset[int] = frozenset()
    crash_seed: int = 0
    #: what people and the cluster do meanwhile: (t, kind, node) with kind one of
    #: ``disable`` (enableRollout: false), ``pause``, ``resume`` (pause: false), ``busy`` /
    #: ``free`` (a GPU workload lands on / leaves the node), ``join``, ``leave``
    interventions: tuple[tuple[float, str, str], ...] = ()
    #: called after every planning call with (snapshot before, plan, actions carried out)
    observer: Callable[[RolloutSnapshot, Plan, int], None] | None = None
    #: the wall-clock instant virtual time 0 stands for (``--start``): windows are read there
    start: float = EPOCH
    #: the cluster's maintenance windows (docs/configuration.md#maintenance-windows; None: always
    #: open)
    windows: WindowCalendar | None = None
    #: serving pods behind budgets on the fleet (docs/live-clusters.md#the-drain; None: no
    #: workloads, as before)
    serving: ServingModel | None = None
    #: the fleet's nodes by name with their labels (``--nodes-file``), ``nodes`` of them;
    #: empty: ``node-0001`` .. without labels
    fleet: tuple[tuple[str, Mapping[str, str]], ...] = ()


@dataclass(frozen=True, slots=True)
class SimEvent:
    t: float
    type: str
    message: str
    node: str | None = None
    step: int | None = None

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = {"t": self.t, "type": self.type}
        if self.node is not None:
            result["node"] = self.node
        if self.step is not None:
            result["step"] = self.step
        result["message"] = self.message
        return result


_event_t, _event_type, _event_message, _event_node, _event_step = (
    SimEvent.__dict__[f].__set__ for f in ("t", "type", "message", "node", "step"))


def sim_event(t: float, type_: str, message: str, node: str | None,
              step: int | None) -> SimEvent:
    """``SimEvent(...)`` with every field given, without the frozen ``__init__``'s per-field
    ``object.__setattr__`` (a 100,000-node run records three events per node; see
    ``model.build_node``)."""
    event: SimEvent = object.__new__(SimEvent)
    _event_t(event, t)
    _event_type(event, type_)
    _event_message(event, message)
    _event_node(event, node)
    _event_step(event, step)
    return event


@dataclass(slots=True)
class SimResult:
    final: dict[str, Any]
    duration_seconds: float
    completed: bool
    rolled_back: bool
    stop_reason: str
    max_in_flight: int
    max_unavailable_seen: int
    nodes: list[dict[str, Any]]
    events: list[SimEvent]
    planning_calls: int
    #: (t, in_flight, unavailable, upgraded, step index, step target) after every planning call
    ticks: list[tuple[float, int, int, int, int, int]]
    #: the health checks' outcomes (None without a ``health`` section)
    health_checks: list[dict[str, Any]] | None = None
    #: drain time per node, the budgets that held, the evictions (None without serving pods)
    drain: dict[str, Any] | None = None
    #: the nodes a step's toleration left behind, ``{node, step}`` by name
    #: (docs/rollout.md#failures-tolerated-in-a-step; None when no step has a toleration)
    tolerated: list[dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        result = {
            "final": self.final,
            "duration_seconds": self.duration_seconds,
            "completed": self.completed,
            "rolled_back": self.rolled_back,
            "stop_reason": self.stop_reason,
            "max_in_flight": self.max_in_flight,
            "max_unavailable_seen": self.max_unavailable_seen,
            "planning_calls": self.planning_calls,
            "nodes": self.nodes,
            "events": [event.to_json() for event in self.events],
        }
        if self.health_checks is not None:
            result["health_checks"] = self.health_checks
        if self.drain is not None:
            result["drain"] = self.drain
        if self.tolerated is not None:
            result["tolerated"] = self.tolerated
        return result


class Simulation(NodeWorld):
    """One what-if run. ``driver`` is ``spec.driver`` (payload + upgradePolicy) as written. The
    node actions land by ``apply_node_actions``; this world's part of them (a ``NodeWorld``:
    the DaemonSet's new pod, the serving pods' budgets) is below."""

    def __init__(self, driver: Mapping[str, Any], config: SimConfig) -> None:
        self.config = config
        self.payload: dict[str, Any] = dict(driver.get("payload") or {})
        self.policy_raw: dict[str, Any] = dict(driver.get("upgradePolicy") or {})
        self.policy = UpgradePolicy.from_spec(self.policy_raw)
        old_payload = dict(self.payload, version=config.from_version)
        old_image = Payload.from_spec(old_payload).image
        new_image = Payload.from_spec(self.payload).image
        # versions exactly as written, by revision
        self.versions: dict[str, str] = {
            revision_of(new_image): str(self.payload.get("version", "")),
            revision_of(old_image): config.from_version,
        }
        self.new_revision = revision_of(new_image)
        self.old_revision = revision_of(old_image)
        self.ds = DaemonSetView(revision_of(old_image), old_image, {})
        width = max(4, len(str(config.nodes)))
        self.nodes: dict[str, RolloutNode] = {}
        self.pod_serial: dict[str, int] = {}
        labels = dict(config.fleet)
        names = ([name for name, _ in config.fleet] if config.fleet
                 else [node_name(index, width) for index in range(1, config.nodes + 1)])
        revision = self.ds.current_revision
        for name in names:
            ready = config.faults.get(name) != "node-notready"
            pod = build_pod(f"metax-driver-{name}-0", revision, ready, None, 0, 0.0, False, 0.0)
            self.nodes[name] = build_node(name, ready, False, labels.get(name, _NOTHING),
                                          _NOTHING, pod, (), 0.0, ())
            self.pod_serial[name] = 0
        self.serving = ServingFleet(config.serving) if config.serving is not None else None
        if self.serving is not None:
            for name, pods in self.serving.place(list(self.nodes)).items():
                self.nodes[name] = dataclasses.replace(
                    self.nodes[name], pods=pods, workloads=tuple(p.key for p in pods))
        # what a controller recorded while the fleet sat idle on the old version
        self.status: dict[str, Any] = {
            "lastAppliedSpec": {"payload": old_payload},
            "phase": st.PHASE_IDLING.value,
            "status": {"lastPodSpecRevision": self.ds.current_revision},
        }
        #: the status as the planner last wrote it, typed
        self.view = UpgradeStatus.from_json(self.status)
        self.t = 0.0
        self.queue: list[tuple[float, int, str, str, str]] = []
        self.seq = 0
        self.wakes: set[float] = set()
        self.events: list[SimEvent] = []
        self.ticks: list[tuple[float, int, int, int, int, int]] = []
        self.max_in_flight = 0
        self.max_unavailable = 0
        self.calls = 0
        self.confirm_scheduled = False
        self.last_change = 0.0
        self.pending_interventions = len(config.interventions)
        #: node -> when its current pod turned Ready (the scrape delay runs from it)
        self.ready_at: dict[str, float] = {}
        self.health_outcomes: list[dict[str, Any]] = []
        for at, kind, node in config.interventions:
            self._push(at, "person:" + kind, node)

    # ----------------------------------------------------------------------------- world

    def _push(self, at: float, kind: str, node: str = "", pod: str = "") -> None:
        self.seq += 1
        heapq.heappush(self.queue, (at, self.seq, kind, node, pod))

    def _snapshot(self) -> RolloutSnapshot:
        snapshot = RolloutSnapshot(
            nodes=self.nodes,
            daemonset=self.ds,
            payload=self.payload,
            policy=self.policy,
            status=self.status,
            windows=self.config.windows,
        )
        if self.serving is not None:
            snapshot = dataclasses.replace(snapshot, budgets=self.serving.budgets())
        if self.config.health is None:
            return snapshot
        return self._with_readings(snapshot, self.config.health)

    def _with_readings(self, snapshot: RolloutSnapshot, config: HealthConfig) -> RolloutSnapshot:
        """Prometheus as the simulator models it: every pending check read now; no sample
        until the scrape delay after the pod turned Ready; a GPU fault makes the checks it
        touches read a value outside their expectation."""
        bare = dataclasses.replace(snapshot, health=HealthInput(config))
        expects = {c.name: c.expect for c in config.node_checks}
        expects.update((c.name, c.expect) for c in config.step_checks)
        nodes: dict[str, dict[str, HealthReading]] = {}
        step: dict[str, HealthReading] = {}
        now = EPOCH + self.t
        faults = self.config.gpu_faults
        for pending in pending_queries(bare):
            expect = expects[pending.check]
            if pending.node is not None:
                value = self._reading(expect, [pending.node],
                                      faults.get(pending.node) == "gpu-unavailable")
                nodes.setdefault(pending.node, {})[pending.check] = HealthReading(now, value)
            else:
                members = list(pending.nodes)
                value = self._reading(expect, members, any(
                    faults.get(n) == "gpu-throttling" for n in members))
                step[pending.check] = HealthReading(now, value)
        return dataclasses.replace(snapshot, health=HealthInput(config, nodes, step))

    def _reading(self, expect: Expectation, nodes: list[str], faulty: bool) -> Reading:
        delay = self.config.scrape_delay
        if any(self.t < self.ready_at.get(n, self.t) + delay for n in nodes):
            return NoSample()
        return _failing(expect) if faulty else _passing(expect)

    def _apply_all(self, actions: Sequence[Action]) -> None:
        """The plan's actions in order; one node's consecutive actions land as one view
        (``apply_node_actions``, with this world's part of each: the node's annotations and
        cordons built once)."""
        run: list[NodeAction] = []
        nodes = self.nodes
        for action in actions:
            if isinstance(action, NODE_ACTIONS):  # a hot path: faster than a match
                if run and run[0].node != action.node:
                    nodes[run[0].node] = apply_node_actions(nodes[run[0].node], run, self)
                    run = []
                run.append(action)
                continue
            if run:
                nodes[run[0].node] = apply_node_actions(nodes[run[0].node], run, self)
                run = []
            self._apply(cast(ClusterAction, action))  # the rest of the union
        if run:
            nodes[run[0].node] = apply_node_actions(nodes[run[0].node], run, self)

    def _apply(self, action: ClusterAction) -> None:
        """A cluster-wide action or an event."""
        match action:
            case SetDaemonSetImage(image=image):
                revision = revision_of(image)
                images = dict(self.ds.revision_images)
                images[revision] = image
                self.ds = DaemonSetView(revision, image, images)
            case SetPolicyPause(pause=pause):
                self.policy_raw["pause"] = pause
                self.policy = UpgradePolicy.from_spec(self.policy_raw)
            case RestorePayload(payload=payload):
                self.payload = dict(payload)
            case RecordEvent():
                self._record(action)
            case _:
                assert_never(action)

    def _record(self, action: RecordEvent) -> None:
        self.events.append(
            sim_event(self.t, action.reason, action.message, action.node, action.step)
        )
        if (action.reason == "NodeDrainStarted" and self.serving is not None
                and action.node is not None):
            self.serving.drain_started[action.node] = self.t
        if action.reason in ("HealthCheckPassed", "HealthCheckFailed"):
            for check, result in dict(action.extra.get("checks") or {}).items():
                outcome: dict[str, Any] = {"t": self.t, "check": check, "result": result}
                if action.node is not None:
                    outcome["node"] = action.node
                if action.step is not None:
                    outcome["step"] = action.step
                if "value" in action.extra:
                    outcome["value"] = action.extra["value"]
                self.health_outcomes.append(outcome)

    # -- the world's part of the node actions (``NodeWorld``) -----------------------------------

    def annotated(self, node: RolloutNode, changes: Mapping[str, str | None]) -> None:
        """The serving pods' model reads the budgets the planner recorded as holding a node."""
        if self.serving is not None and ANN_DRAIN_BLOCKED_BY in changes:
            blocked = changes[ANN_DRAIN_BLOCKED_BY] or ""
            self.serving.blocked(self.t, node.name, filter(None, blocked.split(",")))

    def driver_pod_deleted(self, node: RolloutNode, at: float) -> RolloutNode:
        """The DaemonSet controller (OnDelete): a new pod at once, on the current template,
        Ready after the install time (or failing as the node's fault says)."""
        cfg = self.config
        if self.serving is not None and node.name in self.serving.drain_started:
            started = self.serving.drain_started.pop(node.name)
            self.serving.drain_seconds[node.name] = self.t - started
        serial = self.pod_serial[node.name] + 1
        self.pod_serial[node.name] = serial
        revision = self.ds.current_revision
        pod_name = f"metax-driver-{node.name}-{serial}"
        pod = build_pod(pod_name, revision, False, None, 0, cfg.start + self.t, False, 0.0)
        landed = with_pod(node, pod, cfg.start + self.t)
        self.events.append(
            sim_event(self.t, "NodeUpgradeStarted" if revision == self.new_revision
                      else "NodeRollbackStarted",
                      f"{node.name}: driver pod deleted, new pod on "
                      f"{self.versions.get(revision, revision)}", node.name, None)
        )
        fault = cfg.faults.get(node.name)
        if not node.ready:
            return landed  # kubelet is gone: the pod never starts
        if fault and revision == self.new_revision:
            if fault == "imagepull":
                self._push(self.t, "waiting:ErrImagePull", node.name, pod_name)
            elif fault == "crashloop":
                self._push(self.t + cfg.install_seconds, "waiting:CrashLoopBackOff",
                           node.name, pod_name)
            return landed  # never-ready: runs, never Ready
        self._push(self.t + cfg.install_seconds, "ready", node.name, pod_name)
        return landed

    def evicts(self, node: RolloutNode, pod: WorkloadPod) -> bool:
        """The API server's answer to an eviction: the serving pods' budgets may refuse it
        (429: the planner asks again later)."""
        if self.serving is None:
            return True
        if not self.serving.evict(pod):
            return False
        self._pod_goes(node, pod)
        return True

    def deletes(self, node: RolloutNode, pod: WorkloadPod) -> bool:
        if self.serving is not None:
            self.serving.delete(pod)
            self._pod_goes(node, pod)
        return True

    def _pod_goes(self, node: RolloutNode, pod: WorkloadPod) -> None:
        """A serving pod terminates for its grace period, then leaves its node."""
        assert self.serving is not None
        self._push(self.t + self.serving.model.grace_seconds, "pod-gone", node.name,
                   f"{pod.key}|{self.serving.budget_of(pod)}")

    def _workload(self, kind: str, node_name_: str, what: str) -> None:
        """A workload pod's end on its node (``what``: its key and budget), then its
        replacement Ready elsewhere (``what``: the budget)."""
        assert self.serving is not None
        if kind == "pod-replaced":
            self.serving.replaced(what)
            return
        key, _, budget = what.partition("|")
        node = self.nodes.get(node_name_)
        if node is not None:
            pods = tuple(p for p in node.pods if p.key != key)
            self.nodes[node_name_] = dataclasses.replace(
                node, pods=pods, workloads=tuple(p.key for p in pods if p.gpu))
        self._push(self.t + self.serving.model.reschedule_seconds, "pod-replaced", "", budget)

    def _handle(self, kind: str, node_name_: str, pod_name: str) -> None:
        if kind in ("pod-gone", "pod-replaced"):
            self._workload(kind, node_name_, pod_name)
            return
        if kind == "wake":
            self.wakes.discard(self.t)
            return
        if kind == "confirm":
            self.confirm_scheduled = False
            self.policy_raw["pause"] = False
            self.policy = UpgradePolicy.from_spec(self.policy_raw)
            self.events.append(
                SimEvent(self.t, "AutoConfirm", "gate confirmed: pause set to false")
            )
            return
        if kind.startswith("person:"):
            self.pending_interventions -= 1
            self._intervene(kind.partition(":")[2], node_name_)
            return
        node = self.nodes.get(node_name_)
        if node is None or node.pod is None or node.pod.name != pod_name:
            return  # that pod was replaced meanwhile, or the node left
        old = node.pod
        if kind == "ready":
            pod = build_pod(old.name, old.revision, True, old.waiting_reason, old.restart_count,
                            old.created_at, old.deleting, old.deletion_requested_at)
            self.ready_at[node.name] = self.t
            self.events.append(
                sim_event(self.t, "NodeReady",
                          f"{node.name}: driver Ready on "
                          f"{self.versions.get(pod.revision, pod.revision)}", node.name, None)
            )
        else:
            pod = dataclasses.replace(old, waiting_reason=kind.partition(":")[2])
        self.nodes[node_name_] = with_pod(node, pod)

    def _intervene(self, kind: str, name: str) -> None:
        message = f"{kind} {name}".strip()
        if kind in ("disable", "pause", "resume"):
            if kind == "disable":
                self.policy_raw["enableRollout"] = False
            else:
                self.policy_raw["pause"] = kind == "pause"
            self.policy = UpgradePolicy.from_spec(self.policy_raw)
        elif kind in ("busy", "free") and name in self.nodes:
            workloads = ("default/gpu-job",) if kind == "busy" else ()
            self.nodes[name] = dataclasses.replace(self.nodes[name], workloads=workloads)
        elif kind == "leave":
            self.nodes.pop(name, None)
        elif kind == "join" and name not in self.nodes:
            # the DaemonSet gives a new node whatever its template says
            serial = self.pod_serial.get(name, 0) + 1
            self.pod_serial[name] = serial
            pod_name = f"metax-driver-{name}-{serial}"
            pod = DriverPod(pod_name, self.ds.current_revision,
                            created_at=self.config.start + self.t)
            self.nodes[name] = RolloutNode(name=name, pod=pod)
            self._push(self.t + self.config.install_seconds, "ready", name, pod_name)
        else:
            return
        self.events.append(SimEvent(self.t, "Intervention", message, node=name or None))

    # ----------------------------------------------------------------------------- loop

    def _plan_once(self) -> tuple[Plan, bool]:
        cfg = self.config
        before = self._snapshot()
        if cfg.observer is not None:
            before = dataclasses.replace(before, nodes=dict(self.nodes))
        result = plan(before, self.config.start + self.t, cfg.settings)
        self.calls += 1
        crashed = self.calls in cfg.crash_calls
        count = len(result.actions)
        if crashed:
            count = (self.calls * 7919 + cfg.crash_seed) % (count + 1)
        self._apply_all(result.actions[:count])
        if cfg.observer is not None:
            cfg.observer(before, result, count)
        if crashed:
            self.events.append(SimEvent(self.t, "ControllerCrashed",
                                        f"controller died after {count} of "
                                        f"{len(result.actions)} actions, status not written"))
            self.last_change = self.t
            return result, True
        if result.changed or result.actions:
            self.last_change = self.t
        self.status = result.status
        self.view = UpgradeStatus.from_json(result.status)
        self.max_in_flight = max(self.max_in_flight, result.in_flight)
        self.max_unavailable = max(self.max_unavailable, result.unavailable)
        index = self.view.current_step_index
        targets = self.policy.step_targets(len(self.nodes))
        target = targets[index - 1] if 0 < index <= len(targets) else 0
        self.ticks.append(
            (self.t, result.in_flight, result.unavailable,
             self.view.total_upgrade_ready_replicas, index, target)
        )
        if result.requeue_at is not None:
            # timestamps carry milliseconds; never wake at the current instant again
            at = max(round(result.requeue_at - self.config.start, 3), round(self.t + 0.001, 3))
            if at not in self.wakes:
                self.wakes.add(at)
                self._push(at, "wake")
        return result, False

    def _plan(self) -> None:
        """Plan until the planner asks for nothing more at this instant, as the controller
        does (it plans again at once after a structural action or ``again``)."""
        # a few passes per step at most (record the step, open its gate, start its nodes)
        for _ in range(8 + 3 * len(self.policy.steps) + len(self.config.crash_calls)):
            phase = self.view.phase
            result, crashed = self._plan_once()
            if crashed:
                continue  # restarted at once: relist and plan again
            structural = any(not isinstance(a, _NODE_ACTIONS) for a in result.actions)
            if self.config.verify_idempotent and result.actions:
                again = plan(self._snapshot(), self.config.start + self.t, self.config.settings)
                moves = [a for a in again.actions if isinstance(a, DeleteDriverPod)]
                if moves and not structural and not result.again:
                    raise AssertionError(f"planner not idempotent at t={self.t}: {moves[:3]}")
            if not structural and not result.again and result.status.get("phase") == phase:
                return
        # still not settled: go on a millisecond later rather than wait for an unrelated event
        at = round(self.t + 0.001, 3)
        if at not in self.wakes:
            self.wakes.add(at)
            self._push(at, "wake")

    def _stop_reason(self, started: bool) -> str | None:
        view = self.view
        if started and view.phase not in ACTIVE_PHASES:
            if view.condition_true(st.COND_ROLLED_BACK):
                return "rolled-back"
            return "completed" if view.current_step_state == st.STEP_COMPLETED else "idle"
        people = self.pending_interventions > 0  # someone may still act
        if view.condition_true(st.COND_BATCH_FAILED) and self.policy.pause:
            return None if people else "fallback-pause"
        if view.condition_true(st.COND_MANUAL_GATE):
            if self.config.auto_confirm is None:
                return None if people else "manual-gate"
            if not self.confirm_scheduled and self.policy.pause:
                self.confirm_scheduled = True
                self._push(self.t + self.config.auto_confirm, "confirm")
        return None

    def run(self) -> SimResult:
        cfg = self.config
        self._plan()
        started = self.view.phase in ACTIVE_PHASES
        reason = self._stop_reason(started)
        while reason is None:
            if not self.queue:
                reason = "stalled" if started else "idle"
                break
            at = self.queue[0][0]
            if at > cfg.until:
                reason = "until"
                break
            self.t = at
            while self.queue and self.queue[0][0] == at:
                _, _, kind, name, pod = heapq.heappop(self.queue)
                self._handle(kind, name, pod)
            self._plan()
            started = started or self.view.phase in ACTIVE_PHASES
            reason = self._stop_reason(started)
        end = cfg.until if reason == "until" else self.last_change
        return self._result(end, reason)

    def _result(self, end: float, reason: str) -> SimResult:
        new = self.new_revision
        completed = True
        nodes: list[dict[str, Any]] = []
        left: list[dict[str, Any]] = []
        for node in self.nodes.values():
            pod = node.pod
            ready = node.ready and pod is not None and pod.ready and not pod.deleting
            revision = pod.revision if pod is not None else ""
            step = tolerated_step(node.annotations, new) if node.annotations else None
            if step is not None:
                left.append({"node": node.name, "step": step})
            elif not (ready and revision == new):
                completed = False
            nodes.append({
                "name": node.name,
                "version": self.versions.get(revision, revision),
                "ready": ready,
            })
        return SimResult(
            final=self.status,
            duration_seconds=end,
            completed=completed and reason in ("completed", "idle"),
            rolled_back=reason == "rolled-back",
            stop_reason=reason,
            max_in_flight=self.max_in_flight,
            max_unavailable_seen=self.max_unavailable,
            nodes=nodes,
            events=self.events,
            planning_calls=self.calls,
            ticks=self.ticks,
            health_checks=self.health_outcomes if self.config.health is not None else None,
            drain=self.serving.report(end) if self.serving is not None else None,
            tolerated=sorted(left, key=lambda e: str(e["node"]))
            if any(s.toleration is not None for s in self.policy.steps) else None,
        )


def _passing(expect: Expectation) -> float:
    """A value ``expect`` holds for."""
    n = expect.number
    return {"==": n, "!=": n + 1, "<": n - 1, "<=": n, ">": n + 1, ">=": n}[expect.op]


def _failing(expect: Expectation) -> float:
    """A value ``expect`` does not hold for."""
    n = expect.number
    return {"==": n + 1, "!=": n, "<": n, "<=": n + 1, ">": n, ">=": n - 1}[expect.op]


def simulate(driver: Mapping[str, Any], config: SimConfig) -> SimResult:
    return Simulation(driver, config).run()
