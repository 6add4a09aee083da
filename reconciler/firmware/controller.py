"""The firmware orchestrator against Kubernetes: list+watch caches (GPU nodes, NodeNeedReboot
Events, the ClusterOperator), one pure planning pass per burst of events, the actions, and the
flow's record (``firmwareUpgrade``) written with optimistic concurrency to an annotation of the
ClusterOperator (``stored_status.FIRMWARE_STATUS_ANNOTATION``: the vendor's CRD has no status
field for it and prunes unknown ones).

Thin on purpose: every decision is in ``planner``; state lives in that annotation and in node
annotations, so a controller killed at any moment resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, assert_never

from reconciler import clock
from reconciler.firmware.actions import (
    AnnotateNode,
    ApplyFirmwareSpec,
    Cordon,
    FirmwareAction,
    RecordEvent,
    RunRebootHook,
    Uncordon,
)
from reconciler.firmware.model import (
    FirmwareNode,
    FirmwareRequest,
    FirmwareSettings,
    FirmwareSnapshot,
)
from reconciler.firmware.planner import Plan, plan
from reconciler.firmware.request import RequestError, parse_request
from reconciler.kube.api import JSON, KubeApi
from reconciler.kube.events import cluster_operator_event, record_event
from reconciler.kube.node_requests import NodeRequests
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.observe import requests_gpu
from reconciler.kube.owned_apply import apply_keeping_owned
from reconciler.kube.watch import ListWatch, object_key
from reconciler.names import (
    API_VERSION,
    CLUSTER_OPERATOR_NAME,
    CONTROLLER_FIELD_MANAGER,
    DONE_ANNOTATION,
    GPU_NODE_LABEL,
    KIND,
    NODE_NEED_REBOOT_REASON,
    REQUEST_ANNOTATION,
    VFIO_GPU_RESOURCE,
)
from reconciler.planning import NodeAction
from reconciler.runtime.watched import (
    PLANNING_FAILED,
    PLANNING_RECOVERED,
    PassFailure,
    WatchDrivenWorker,
    newer,
    shown_failure,
    with_failure_condition,
)
from reconciler.stored_status import (
    FIRMWARE_STATUS_ANNOTATION,
    firmware_status_of,
    upgrade_status_of,
)
from reconciler.timefmt import parse_seconds

log = logging.getLogger(__name__)

COMPONENT = "gpu-firmware-orchestrator"


def _quantity(value: Any) -> int:
    try:
        return int(str(value or "0"))
    except ValueError:
        return 0


def node_view(node: Mapping[str, Any], need_reboot_at: float | None,
              workloads: Iterable[str] = ()) -> FirmwareNode:
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or ())
    return FirmwareNode(
        name=str(meta.get("name")),
        ready=ready,
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        boot_id=str((status.get("nodeInfo") or {}).get("bootID") or ""),
        vfio_gpus=_quantity((status.get("allocatable") or {}).get(VFIO_GPU_RESOURCE)),
        need_reboot_at=need_reboot_at,
        workloads=tuple(sorted(workloads)),
    )


def event_time(event: Mapping[str, Any]) -> float | None:
    """When a NodeNeedReboot Event last happened."""
    meta = event.get("metadata") or {}
    for text in (event.get("lastTimestamp"), event.get("eventTime"),
                 event.get("firstTimestamp"), meta.get("creationTimestamp")):
        when = parse_seconds(text)
        if when is not None:
            return when
    return None


@dataclass(slots=True)
class FirmwareStats:
    passes: int = 0
    actions: int = 0
    status_writes: int = 0
    conflicts: int = 0
    errors: int = 0
    hooks_run: int = 0
    max_hooks_at_once: int = 0
    action_counts: dict[str, int] = field(default_factory=dict)


class FirmwareController(WatchDrivenWorker):
    """Drives the firmware upgrade of one ClusterOperator. Informers feed an index; a single
    worker plans and acts, so actions never race each other."""

    role = "firmware-controller"
    stats: FirmwareStats

    def __init__(
        self,
        api: KubeApi,
        *,
        cluster_operator: str = CLUSTER_OPERATOR_NAME,
        settings: FirmwareSettings | Callable[[], FirmwareSettings] | None = None,
        clock: Callable[[], float] = clock.wall,
        settle_seconds: float = 0.02,
        is_leader: Callable[[], bool] = lambda: True,
        hook_env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(clock=clock, settle_seconds=settle_seconds, is_leader=is_leader)
        self.api = api
        self.cluster_operator = cluster_operator
        fixed = settings if isinstance(settings, FirmwareSettings) else FirmwareSettings()
        #: where the settings in force are read at each pass (the daemon's follow the commits)
        self._settings = settings if callable(settings) else (lambda: fixed)
        self.settings = self._settings()
        self.hook_env = dict(hook_env or {})
        self.stats = FirmwareStats()
        self.last_plan: Plan | None = None
        self._nodes: dict[str, JSON] = {}
        self._reboot_events: dict[str, tuple[str, float]] = {}  # event key -> (node, when)
        self._co: JSON | None = None
        self._hook_failures: dict[str, str] = {}
        self._workloads: dict[str, str] = {}  # GPU pod "ns/name" -> node
        self.watches = [
            ListWatch(api, "/api/v1/nodes", on_event=self._on_node,
                      query={"labelSelector": f"{GPU_NODE_LABEL}=true"}, name="fw-nodes"),
            ListWatch(api, "/api/v1/events", on_event=self._on_event,
                      query={"fieldSelector": f"reason={NODE_NEED_REBOOT_REASON},"
                                              "involvedObject.kind=Node"},
                      name="fw-events"),
            ListWatch(api, "/api/v1/pods", on_event=self._on_pod,
                      query={"fieldSelector": "spec.nodeName!="}, name="fw-pods"),
            ListWatch(api, cluster_operator_path(), on_event=self._on_cluster_operator,
                      query={"fieldSelector": f"metadata.name={cluster_operator}"},
                      name="fw-clusteroperator"),
        ]

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> FirmwareController:
        self._start_worker()
        return self

    def stop(self) -> None:
        self._stop_worker(30)

    # -- index ------------------------------------------------------------------------------

    def _on_node(self, event: str, obj: JSON) -> None:
        name = str(obj["metadata"]["name"])
        with self._wake:
            if event == "DELETED":
                self._nodes.pop(name, None)
            elif newer(self._nodes.get(name), obj):
                self._nodes[name] = obj
            self._touch()

    def _on_event(self, event: str, obj: JSON) -> None:
        key = object_key(obj)
        with self._wake:
            if event == "DELETED":
                self._reboot_events.pop(key, None)
            else:
                node = str((obj.get("involvedObject") or {}).get("name") or "")
                when = event_time(obj)
                if node and when is not None:
                    self._reboot_events[key] = (node, when)
            self._touch()

    def _on_pod(self, event: str, obj: JSON) -> None:
        """GPU workloads per node: the seed requires an idle cluster for the upgrade."""
        key = object_key(obj)
        node = str((obj.get("spec") or {}).get("nodeName") or "")
        busy = event != "DELETED" and bool(node) and requests_gpu(obj)
        with self._wake:
            if busy:
                if self._workloads.get(key) != node:
                    self._workloads[key] = node
                    self._touch()
            elif self._workloads.pop(key, None) is not None:
                self._touch()

    def _on_cluster_operator(self, event: str, obj: JSON) -> None:
        with self._wake:
            if event == "DELETED":
                self._co = None
            elif newer(self._co, obj):
                self._co = obj
            self._touch()

    # -- snapshot ---------------------------------------------------------------------------

    def snapshot(self) -> FirmwareSnapshot | None:
        with self._lock:
            co = self._co
            if co is None:
                return None
            latest: dict[str, float] = {}
            for node, when in self._reboot_events.values():
                latest[node] = max(when, latest.get(node, when))
            workloads: dict[str, list[str]] = {}
            for pod, node in self._workloads.items():
                workloads.setdefault(node, []).append(pod)
            nodes = {name: node_view(obj, latest.get(name), workloads.get(name, ()))
                     for name, obj in self._nodes.items()}
            hook_failures = dict(self._hook_failures)
        annotations = (co.get("metadata") or {}).get("annotations") or {}
        raw = annotations.get(REQUEST_ANNOTATION)
        request: FirmwareRequest | None = None
        request_error: str | None = None
        if raw is not None:
            try:
                request = parse_request(str(raw))
            except RequestError as exc:
                request_error = str(exc)
        return FirmwareSnapshot(
            nodes=nodes,
            driver_spec=dict((co.get("spec") or {}).get("driver") or {}),
            request=request,
            request_error=request_error,
            status=firmware_status_of(co),
            rollout_phase=upgrade_status_of(co).get("phase"),
            hook_failures=hook_failures,
            done=annotations.get(DONE_ANNOTATION),
        )

    # -- worker -----------------------------------------------------------------------------

    def reconcile_once(self) -> float | None:
        """One observe-plan-act pass; returns when to plan again if nothing happens."""
        snap = self.snapshot()
        if snap is None:
            return None
        with self._lock:
            co = self._co
        assert co is not None
        self.settings = self._settings()  # this pass and its reboot hooks use one value
        result = plan(snap, self.clock(), self.settings)
        self.stats.passes += 1
        self.last_plan = result
        hooks = [a for a in result.actions if isinstance(a, RunRebootHook)]
        # one node's consecutive node actions go out as one patch
        nodes = NodeRequests(self.api, on_object=self._written, on_action=self._count)
        for action in result.actions:
            if not self.is_leader():
                return self.clock() + 0.5
            match action:
                case AnnotateNode() | Cordon() | Uncordon():
                    nodes.take(action)
                case ApplyFirmwareSpec(fw_upgrade_policy=policy, fw_enable_virt=virt, done=done):
                    nodes.flush()
                    self._count(action)
                    self._apply_spec(policy, virt, done)
                case RecordEvent():
                    nodes.flush()
                    self._count(action)
                    self._record_event(action, co)
                case RunRebootHook():
                    nodes.flush()  # run together after the pass's other actions (_run_hooks)
                case _:
                    assert_never(action)
        nodes.flush()
        if hooks:
            self._run_hooks(hooks)
        if result.changed:
            self._write_status(result.status)
        if any(not isinstance(a, RecordEvent) for a in result.actions):
            return self.clock()  # our own writes changed the world: look again at once
        return result.requeue_at

    # -- actions ----------------------------------------------------------------------------

    def _count(self, action: FirmwareAction | NodeAction) -> None:
        name = type(action).__name__
        self.stats.action_counts[name] = self.stats.action_counts.get(name, 0) + 1
        self.stats.actions += 1

    def _written(self, kind: str, obj: JSON) -> None:
        """The server's answer to a node's patch: the index sees our own write."""
        if kind == "node":
            self._on_node("MODIFIED", obj)

    def _apply_spec(self, policy: str, enable_virt: bool | None, done: str | None) -> None:
        """Server-side apply under the controller's field manager
        (docs/gitops.md#git-stays-the-truth): the sync role sees these fields owned by
        ``gpu-rollout-controller`` and writes them back to Git."""
        body: JSON = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.cluster_operator},
            "spec": {"driver": {"fwUpgradePolicy": policy}},
        }
        if enable_virt is not None:
            body["spec"]["driver"]["fwEnableVirt"] = enable_virt
        if done is not None:
            body["metadata"]["annotations"] = {DONE_ANNOTATION: done}
        obj = apply_keeping_owned(self.api, cluster_operator_path(self.cluster_operator), body,
                                  manager=CONTROLLER_FIELD_MANAGER)
        self._on_cluster_operator("MODIFIED", obj)

    def _run_hooks(self, hooks: list[RunRebootHook]) -> None:
        """Run the reboot hook for each node at once (the planner already bounded how many),
        and wait: a hook that ran is recorded in the status written right after."""
        for hook in hooks:
            self._count(hook)
        self.stats.hooks_run += len(hooks)
        self.stats.max_hooks_at_once = max(self.stats.max_hooks_at_once, len(hooks))
        with ThreadPoolExecutor(max_workers=len(hooks)) as pool:
            outcomes = list(pool.map(self._run_hook, hooks))
        with self._lock:
            for hook, failure in zip(hooks, outcomes, strict=True):
                if failure is not None:
                    self._hook_failures[hook.token] = failure

    def _run_hook(self, hook: RunRebootHook) -> str | None:
        command = [*self.settings.reboot_command, hook.node]
        env = {**os.environ, **self.hook_env, "FIRMWARE_NODE": hook.node,
               "FIRMWARE_REBOOT_TOKEN": hook.token}
        timeout = self.settings.timeouts.hook or None
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return f"{command[0]} did not finish within {timeout:.0f} s"
        except OSError as exc:
            return f"cannot run {command[0]}: {exc.strerror or exc}"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout or "").strip().splitlines()[-1:] or [""]
            return f"{command[0]} exited with {done.returncode}: {tail[0][:300]}"
        log.info("reboot hook ran for %s (token %s)", hook.node, hook.token)
        return None

    def _record_event(self, action: RecordEvent, co: Mapping[str, Any]) -> None:
        meta = dict(co.get("metadata") or {})
        meta["name"] = self.cluster_operator
        record_event(self.api, cluster_operator_event(
            {"metadata": meta}, reason=action.reason, message=action.message, type=action.type,
            component=COMPONENT, now=self.clock(),
        ))

    # -- status -----------------------------------------------------------------------------

    def _write_status(self, firmware: JSON) -> None:
        self._write_own_record(FIRMWARE_STATUS_ANNOTATION,
                               json.dumps(firmware, sort_keys=True, separators=(",", ":")))

    # -- a planning pass that raised ----------------------------------------------------------

    def _report_failure(self, failure: PassFailure, *, event: bool) -> None:
        if event:  # first: the status may be what the planner could not read
            self._failure_event(RecordEvent(
                "Warning", PLANNING_FAILED, f"planning pass failed ({failure.reason}): "
                f"{failure.message}; retrying with back-off"))
        self._write_failure_condition(failure, failed=True)

    def _shown_failure(self) -> PassFailure | None:
        with self._lock:
            co = self._co
        return shown_failure(firmware_status_of(co))

    def _clear_failure(self, failure: PassFailure) -> None:
        # the condition leaves the list; the pass that planned may have dropped it already
        if (self._write_failure_condition(failure, failed=False)
                or self._shown_failure() is None):
            self._failure_event(RecordEvent(
                "Normal", PLANNING_RECOVERED,
                f"planning passes succeed again (the last failure: {failure.reason})"))

    def _write_failure_condition(self, failure: PassFailure, *, failed: bool) -> bool:
        with self._lock:
            co = self._co
        if co is None:
            return False
        status = with_failure_condition(firmware_status_of(co),
                                        failure, self.clock(), failed=failed)
        if status is None:
            return False
        try:
            self._write_status(status)
        except Exception as exc:  # the next failed pass (or the next success) tries again
            log.warning("%s: could not write the %s condition: %s", self.role, PLANNING_FAILED,
                        exc)
            return False
        return True

    def _failure_event(self, action: RecordEvent) -> None:
        with self._lock:
            co = self._co
        if co is not None:
            self._record_event(action, co)

    def _cluster_operator_name(self) -> str:
        return self.cluster_operator

    def _cached_cluster_operator(self) -> JSON | None:
        return self._co
