"""Carries out the planner's actions against the API server: the one executor, every action type
handled (``assert_never``: a new one is a type error until it is). The node actions go out as
``reconciler.kube.node_requests`` sends them (the firmware orchestrator sends its own the same
way); the cluster-wide ones and the drain's back-off, metric and Event are here.

Each action is idempotent: a node already cordoned, a pod already gone or an annotation already
set is success. The objects the server returns are handed back so the caller can update its cache
before planning again (a plan made on a cache that has not yet seen the controller's own writes
could start a node twice).
"""

from __future__ import annotations

import logging
import random
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, assert_never, get_args

from reconciler.clock import Clock, wall
from reconciler.kube.api import JSON, KubeApi, KubeError, resource_path
from reconciler.kube.events import cluster_operator_event, record_event
from reconciler.kube.node_requests import DrainResult, NodeRequests
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.owned_apply import apply_keeping_owned
from reconciler.names import (
    API_VERSION,
    CONTROLLER_FIELD_MANAGER,
    DRIVER_DAEMONSET,
    KIND,
    OPERATOR_NAMESPACE,
)
from reconciler.rollout.actions import (
    Action,
    AnnotateNode,
    Cordon,
    DeleteDriverPod,
    DeletePod,
    EvictPod,
    NodeAction,
    RecordEvent,
    RestorePayload,
    SetDaemonSetImage,
    SetPolicyPause,
    Uncordon,
)

log = logging.getLogger(__name__)

COMPONENT = "gpu-rollout-controller"

#: docs/live-clusters.md#the-drain: a pod whose eviction a budget refused is asked again at most
#: once per this long, plus up to ``EVICTION_JITTER`` of it at random, so the pods a budget holds do
#: not all ask again in the same instant
EVICTION_BACKOFF_SECONDS = 5.0
EVICTION_JITTER = 0.5
#: the API server's cause of a budget's refusal: "The disruption budget web needs 3 healthy
#: pods and has 3 currently"
_BUDGET_CAUSE = re.compile(r"disruption budget (\S+) needs")
#: an eviction handed out and not asked within this long counts as never sent (the pool
#: shut down, leadership lost before it ran): a later pass may hand it out again
EVICTION_PENDING_SECONDS = 30.0
#: ``gpu_reconciler_drain_evictions_total``'s results (``reconciler.kube.node_requests``'s
#: ``DrainResult``): evicted (201), refused (a budget's 429), gone (the pod was gone already),
#: error (any other answer), deleted (``onTimeout: delete``)
EVICTION_RESULTS: tuple[DrainResult, ...] = get_args(DrainResult)


@dataclass(frozen=True, slots=True)
class Target:
    """Where the controller acts."""

    cluster_operator: str
    namespace: str = OPERATOR_NAMESPACE
    daemonset: str = DRIVER_DAEMONSET


class ActionExecutor:
    def __init__(
        self,
        api: KubeApi,
        target: Target,
        *,
        on_object: Callable[[str, JSON], None] | None = None,
        clock: Clock = wall,
        on_eviction: Callable[[str], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """``on_eviction``: called with each eviction's or drain deletion's result (one of
        ``EVICTION_RESULTS``: the metric)."""
        self.api = api
        self.target = target
        self.on_object = on_object or (lambda kind, obj: None)
        self.clock = clock
        self.on_eviction = on_eviction or (lambda result: None)
        self.rng = rng or random.Random()
        self.counts: dict[str, int] = {}
        #: eviction results so far (as the metric counts them)
        self.evictions: dict[str, int] = {}
        #: "ns/pod" -> when it may be asked for again (in memory: a restart asks at once,
        #: which a budget answers the same)
        self._evict_after: dict[str, float] = {}
        #: pod -> when its eviction was handed out and not yet asked (``held_back``): a pass
        #: planned meanwhile does not hand it out again (a queue of repeats would grow with
        #: every pass); forgotten after ``EVICTION_PENDING_SECONDS`` (a request never run)
        self._evict_pending: dict[str, float] = {}
        self._evict_lock = threading.Lock()

    def execute(self, action: Action, cluster_operator: Mapping[str, Any]) -> None:
        match action:
            case (Cordon() | Uncordon() | AnnotateNode() | DeleteDriverPod() | EvictPod()
                  | DeletePod()):
                self.execute_node_actions([action], cluster_operator)
            case SetDaemonSetImage(image=image):
                self._count(action)
                self._set_image(image)
            case SetPolicyPause(pause=pause):
                self._count(action)
                self._apply_spec({"upgradePolicy": {"pause": pause}})
            case RestorePayload(payload=payload):
                self._count(action)
                self._apply_spec({"payload": dict(payload)})
            case RecordEvent():
                self._count(action)
                self._record_event(action, cluster_operator)
            case _:
                assert_never(action)

    def execute_node_actions(
        self, actions: Sequence[NodeAction], cluster_operator: Mapping[str, Any]
    ) -> None:
        """One node's actions in order, as ``reconciler.kube.node_requests`` sends them:
        consecutive annotation and (un)cordon changes go out as one merge patch, so recording a
        node's state and cordoning it is one atomic write that still comes before the pod
        deletion."""
        NodeRequests(self.api, namespace=self.target.namespace, on_object=self.on_object,
                     on_action=self._count,
                     drain=_Drain(self, cluster_operator)).send(actions)

    def _count(self, action: Action) -> None:
        name = type(action).__name__
        self.counts[name] = self.counts.get(name, 0) + 1

    def may_evict(self, action: EvictPod) -> bool:
        """An eviction is asked no sooner than its pod's back-off (``EVICTION_BACKOFF_SECONDS``
        with jitter) after the last time, whatever the answer was: a budget's refusal leaves the
        pod running, and an accepted eviction's watch event (terminating) may come after the
        next pass."""
        key = f"{action.namespace}/{action.pod}"
        now = self.clock()
        with self._evict_lock:
            self._evict_pending.pop(key, None)
            if now < self._evict_after.get(key, 0.0):
                return False
            self._evict_after[key] = now + EVICTION_BACKOFF_SECONDS * (
                1.0 + EVICTION_JITTER * self.rng.random())
            for done in [k for k, after in self._evict_after.items() if after <= now]:
                del self._evict_after[done]  # kept small: only pods in their back-off
        return True

    def drain_answered(self, action: EvictPod | DeletePod, result: DrainResult,
                       error: KubeError | None, cluster_operator: Mapping[str, Any]) -> None:
        """Counts the result (the metric); a budget's refusal is asked again, when a later pass
        still wants it, after the back-off, and a Warning Event ``NodeDrainBlocked`` names the
        budget, once per refusal."""
        self._count_eviction(result)
        if result != "refused" or error is None:
            return
        key = f"{action.namespace}/{action.pod}"
        budget = refusing_budget(error)
        where = f"budget {action.namespace}/{budget}" if budget else "a disruption budget"
        log.info("eviction of %s on %s refused by %s: %s", key, action.node, where, error)
        self._record_event(RecordEvent(
            "Warning", "NodeDrainBlocked",
            f"node={action.node}: eviction of {key} refused by {where}"
            + (f" ({'; '.join(error.causes)})" if error.causes else "")), cluster_operator)

    def held_back(self, actions: Sequence[Action]) -> tuple[list[Action], float | None]:
        """``actions`` without the evictions of pods still in their back-off (a pass that
        only repeats those changes nothing: it must not count as acting, or the controller
        would plan again at once until the back-off ends), and when the first of those
        back-offs ends (None: none held back)."""
        now = self.clock()
        kept: list[Action] = []
        until: float | None = None
        with self._evict_lock:
            for action in actions:
                if isinstance(action, EvictPod):
                    key = f"{action.namespace}/{action.pod}"
                    after = self._evict_after.get(key, 0.0)
                    pending = self._evict_pending.get(key)
                    if pending is not None and now < pending + EVICTION_PENDING_SECONDS:
                        after = max(after, now + EVICTION_BACKOFF_SECONDS)
                    if now < after:
                        until = after if until is None else min(until, after)
                        continue
                    self._evict_pending[key] = now
                kept.append(action)
        return kept, until

    def _count_eviction(self, result: str) -> None:
        with self._evict_lock:
            self.evictions[result] = self.evictions.get(result, 0) + 1
        self.on_eviction(result)

    def _set_image(self, image: str) -> None:
        path = resource_path(
            "apps/v1", "daemonsets", self.target.daemonset, namespace=self.target.namespace
        )
        daemonset = self.api.get(path)
        containers = daemonset["spec"]["template"]["spec"]["containers"]
        if containers[0].get("image") == image:
            return
        obj = self.api.patch(
            path,
            [
                {"op": "test", "path": "/spec/template/spec/containers/0/name",
                 "value": containers[0]["name"]},
                {"op": "replace", "path": "/spec/template/spec/containers/0/image",
                 "value": image},
            ],
            patch_type="json",
        )
        self.on_object("daemonset", obj)

    def _apply_spec(self, driver_fields: JSON) -> None:
        """Server-side apply under the controller's own field manager
        (docs/gitops.md#git-stays-the-truth): the sync role sees these fields owned by
        ``gpu-rollout-controller`` and writes them back to Git. The manager's other fields (a
        restored version, the firmware's result) are kept."""
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.target.cluster_operator},
            "spec": {"driver": driver_fields},
        }
        obj = apply_keeping_owned(self.api, cluster_operator_path(self.target.cluster_operator),
                                  body, manager=CONTROLLER_FIELD_MANAGER)
        self.on_object("clusteroperator", obj)

    def _record_event(self, action: RecordEvent, cluster_operator: Mapping[str, Any]) -> None:
        co = dict(cluster_operator)
        co.setdefault("metadata", {}).setdefault("name", self.target.cluster_operator)
        record_event(self.api, cluster_operator_event(
            co, reason=action.reason, message=action.message, type=action.type,
            component=COMPONENT, now=self.clock(),
        ))


class _Drain:
    """The executor's drain (``reconciler.kube.node_requests.Drain``) for one node's requests
    of one pass (its Events go on that pass's ClusterOperator)."""

    def __init__(self, executor: ActionExecutor, cluster_operator: Mapping[str, Any]) -> None:
        self.executor = executor
        self.cluster_operator = cluster_operator

    def may_evict(self, action: EvictPod) -> bool:
        return self.executor.may_evict(action)

    def answered(self, action: EvictPod | DeletePod, result: DrainResult,
                 error: KubeError | None) -> None:
        self.executor.drain_answered(action, result, error, self.cluster_operator)


def refusing_budget(error: KubeError) -> str | None:
    """The name of the budget a 429 to an eviction names in its causes (None: none named)."""
    for text in (*error.causes, error.message):
        found = _BUDGET_CAUSE.search(text)
        if found:
            return found.group(1)
    return None
