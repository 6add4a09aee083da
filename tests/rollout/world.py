"""A hand-driven fleet for table tests of the pure planner: the test decides when pods turn
Ready or fail; actions are carried out the way the DaemonSet controller and kubelet would."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.fleet.windows import WindowCalendar
from reconciler.names import CANARY_LABEL
from reconciler.policy.payload import Payload
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.actions import (
    NODE_ACTIONS,
    Action,
    DeleteDriverPod,
    RestorePayload,
    SetDaemonSetImage,
    SetPolicyPause,
)
from reconciler.rollout.model import (
    DaemonSetView,
    DriverPod,
    PlannerSettings,
    RolloutNode,
    RolloutSnapshot,
)
from reconciler.rollout.node_view import NodeWorld, apply_node_action, with_pod
from reconciler.rollout.planner import Plan, plan
from reconciler.rollout.simulator import EPOCH, revision_of

OLD_VERSION = "2.32.0.6"
NEW_VERSION = "2.33.0.9"
OLD_PAYLOAD = {"registry": "reg.local/metax", "name": "driver-image", "version": OLD_VERSION}
NEW_PAYLOAD = {**OLD_PAYLOAD, "version": NEW_VERSION}
OLD_IMAGE = Payload.from_spec(OLD_PAYLOAD).image
NEW_IMAGE = Payload.from_spec(NEW_PAYLOAD).image
OLD_REV = revision_of(OLD_IMAGE)
NEW_REV = revision_of(NEW_IMAGE)


def policy(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "enableRollout": True,
        "upgradeSteps": [{"replicas": "100%", "pauseDuration": 0}],
        "maxParallel": 1,
        "maxUnavailable": 0,
        "maxFailureThreshold": 1,
        "fallback": "pause",
    }
    base.update(overrides)
    return base


def steps(*pairs: tuple[int | str, int | None]) -> list[dict[str, Any]]:
    """Steps of (replicas, pauseDuration in ms); None: a gate (``pauseDuration`` left out)."""
    return [{"replicas": r} if p is None else {"replicas": r, "pauseDuration": p}
            for r, p in pairs]


class World(NodeWorld):
    """The fleet, its DaemonSet and the policy; the node actions land by ``apply_node_action``
    with this world's part (``NodeWorld``): the DaemonSet's new pod."""

    def __init__(
        self,
        n: int,
        policy_raw: Mapping[str, Any],
        *,
        canary: Iterable[str] = (),
        settings: PlannerSettings | None = None,
    ) -> None:
        self.policy_raw = dict(policy_raw)
        self.payload: dict[str, Any] = dict(NEW_PAYLOAD)
        self.ds = DaemonSetView(OLD_REV, OLD_IMAGE, {OLD_REV: OLD_IMAGE})
        canaries = set(canary)
        self.nodes: dict[str, RolloutNode] = {}
        for i in range(1, n + 1):
            name = f"node-{i:04d}"
            labels = {CANARY_LABEL: "true"} if name in canaries else {}
            self.nodes[name] = RolloutNode(
                name, labels=labels, pod=DriverPod(f"drv-{name}-0", OLD_REV, ready=True)
            )
        self.serial = 0
        self.status: dict[str, Any] = {
            "lastAppliedSpec": {"payload": dict(OLD_PAYLOAD)},
            "phase": "Idling",
            "status": {"lastPodSpecRevision": OLD_REV},
        }
        self.settings = settings or PlannerSettings()
        self.last: Plan | None = None
        self.deleted: list[tuple[str, str]] = []  # (node, target revision) per deletion
        self.windows: WindowCalendar | None = None

    # -- observation
    def snapshot(self) -> RolloutSnapshot:
        return RolloutSnapshot(
            nodes=dict(self.nodes),
            daemonset=self.ds,
            payload=dict(self.payload),
            policy=UpgradePolicy.from_spec(self.policy_raw),
            status=self.status,
            windows=self.windows,
        )

    @property
    def inner(self) -> dict[str, Any]:
        return dict(self.status.get("status") or {})

    def conditions(self) -> dict[str, dict[str, Any]]:
        """The conditions in force by type (the CRD's entries have no status: listed = in
        force; ``status`` "True" added for the tests that read it)."""
        return {c["type"]: {**c, "status": "True"} for c in self.status.get("conditions") or ()}

    def on(self, revision: str) -> list[str]:
        return [n.name for n in self.nodes.values() if n.pod and n.pod.revision == revision]

    def ready_on(self, revision: str) -> list[str]:
        return [
            n.name for n in self.nodes.values()
            if n.pod and n.pod.revision == revision and n.pod.ready
        ]

    def annotation(self, node: str, key: str) -> str | None:
        return self.nodes[node].annotations.get(key)

    # -- time passes
    def plan(self, t: float, *, apply: bool = True, write_status: bool = True) -> Plan:
        result = plan(self.snapshot(), EPOCH + t, self.settings)
        self.last = result
        if apply:
            self.apply(result.actions)
        if write_status:
            self.status = result.status
        return result

    def settle(self, t: float) -> Plan:
        """Plan until no structural action is left (the template change takes a second call)."""
        result = self.plan(t)
        for _ in range(5):
            structural = any(isinstance(a, SetDaemonSetImage | RestorePayload)
                             for a in result.actions)
            if not structural and not result.again:
                break
            result = self.plan(t)
        return result

    def apply(self, actions: Iterable[Action]) -> None:
        actions = list(actions)
        deleted = len(self.deleted)
        for action in actions:
            if isinstance(action, NODE_ACTIONS):
                self.nodes[action.node] = apply_node_action(self.nodes[action.node], action, self)
            elif isinstance(action, SetDaemonSetImage):
                rev = revision_of(action.image)
                self.ds = DaemonSetView(rev, action.image, {**self.ds.revision_images,
                                                           rev: action.image})
            elif isinstance(action, SetPolicyPause):
                self.policy_raw["pause"] = action.pause
            elif isinstance(action, RestorePayload):
                self.payload = dict(action.payload)
        # the planner deletes only the pod a node runs: each deletion landed
        assert len(self.deleted) - deleted == len(deletions_of(actions)), actions

    # -- the world's part of the node actions (``NodeWorld``)
    def driver_pod_deleted(self, node: RolloutNode, at: float) -> RolloutNode:
        """The DaemonSet (OnDelete) recreates the pod on its current template; the controller's
        index keeps when the old pod's deletion was asked for."""
        self.serial += 1
        self.deleted.append((node.name, self.ds.current_revision))
        pod = DriverPod(f"drv-{node.name}-{self.serial}", self.ds.current_revision)
        return with_pod(node, pod, at)

    # -- the world changes
    def set(self, name: str, **changes: Any) -> None:
        self.nodes[name] = dataclasses.replace(self.nodes[name], **changes)

    def pod(self, name: str, **changes: Any) -> None:
        node = self.nodes[name]
        assert node.pod is not None
        self.nodes[name] = dataclasses.replace(node, pod=dataclasses.replace(node.pod, **changes))

    def ready(self, *names: str) -> None:
        for name in names:
            self.pod(name, ready=True)

    def ready_all_in_flight(self) -> list[str]:
        names = [n.name for n in self.nodes.values() if n.pod and not n.pod.ready]
        self.ready(*names)
        return names


def deletions(result: Plan) -> list[str]:
    return [a.node for a in deletions_of(result.actions)]


def deletions_of(actions: Iterable[Action]) -> list[DeleteDriverPod]:
    return [a for a in actions if isinstance(a, DeleteDriverPod)]


def of_type(result: Plan, kind: type) -> list[Any]:
    return [a for a in result.actions if isinstance(a, kind)]
