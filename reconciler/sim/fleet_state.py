"""What the simulated fleet's roles share (reconciler/sim/fleet.py): the machines and the pods
bound to them, the API client with a kubelet's retries, the seeded RNG of the simulated
durations, and the keyed workers and timers their work runs on."""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from reconciler.kube.api import JSON, Conflict, KubeApi, KubeError, NotFound, resource_path
from reconciler.policy.payload import Payload
from reconciler.sim.dispatch import KeyedWorkers, Task, Timers
from reconciler.sim.faults import Fault

FLEET_LABEL = "sim.metax-tech.com/fleet"
WORKLOAD_NAMESPACE = "gpu-workloads"

# A duration: fixed seconds, a uniform (low, high) range, or a function of a seeded RNG.
Duration = float | tuple[float, float] | Callable[[random.Random], float]


def draw(duration: Duration, rng: random.Random) -> float:
    if callable(duration):
        return max(0.0, float(duration(rng)))
    if isinstance(duration, tuple):
        low, high = duration
        return rng.uniform(low, high)
    return float(duration)


def node_name(index: int, width: int = 4) -> str:
    """``node-0001``: at least four digits, like ``reconciler simulate``."""
    return f"node-{index:0{width}d}"


def timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class SimNode:
    name: str
    index: int
    labels: dict[str, str]
    gpu: bool
    uid: str = ""
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    vbios: str = ""
    pending_firmware: str | None = None
    rebooting: bool = False
    reboot_token: str | None = None
    reported_ready: bool | None = None  # what the API server was last told
    faults: list[Fault] = field(default_factory=list)
    removed: bool = False


def node_ip(node: SimNode) -> str:
    i = node.index
    return f"10.{128 + (i >> 16) % 64}.{(i >> 8) & 255}.{i & 255}"


@dataclass
class SimPod:
    uid: str
    namespace: str
    name: str
    node: str
    driver: bool
    version: str | None
    revision: str | None
    containers: list[str]
    images: dict[str, str]
    created: str
    generation: int = 0  # bumped to cancel pending timers
    started: bool = False
    ready: bool = False
    restarts: int = 0
    deleting: bool = False
    waiting_reason: str | None = None
    gpu_requests: dict[str, int] = field(default_factory=dict)  # container -> GPUs it asked for
    run_seconds: float | None = None  # a workload that exits 0 this long after it starts
    finished: bool = False  # its containers exited (phase Succeeded)
    stops_at: float | None = None  # a terminating workload's end of grace (monotonic)


class FleetState:
    """The machines and bound pods every role reads and writes (under ``lock``), and what their
    work needs: the API, the RNG, and the workers and timers (from ``Fleet.start()`` on)."""

    def __init__(self, api: KubeApi, *, fleet_id: str, payload: Payload, seed: int) -> None:
        self.api = api
        self.fleet_id = fleet_id
        #: the driver the fleet starts on (and the firmware payload's version by default)
        self.payload = payload
        self.rng = random.Random(seed)
        self.requests = 0
        self.lock = threading.RLock()
        self.nodes: dict[str, SimNode] = {}
        self.pods: dict[str, SimPod] = {}
        #: node -> its pods by uid (a pod event must not scan the whole fleet's pods)
        self.on_node: dict[str, dict[str, SimPod]] = {}
        self.workers: KeyedWorkers | None = None
        self.timers: Timers | None = None

    def later(self, delay: float, node: str, task: Task) -> None:
        """``task`` after ``delay`` seconds, in order with the node's other work."""
        assert self.timers is not None
        self.timers.call_later(delay, node, task)

    def call(self, method: str, path: str, body: Any = None, *, content_type: str | None = None,
             ok_missing: bool = False, retry_conflict: bool = False) -> JSON:
        # about 9 s of retries: a kubelet outlives an API server restart (a boot takes ~4 s,
        # longer on a loaded machine)
        attempts = 10
        for attempt in range(attempts):
            try:
                self.requests += 1
                result = self.api.request(method, path, body=body, content_type=content_type)
                return result if isinstance(result, dict) else {}
            except NotFound:
                if ok_missing:
                    return {}
                raise
            except Conflict:
                if not retry_conflict or attempt == attempts - 1:
                    raise
            except KubeError as exc:
                if exc.status not in (0, 429, 500, 502, 503, 504) or attempt == attempts - 1:
                    raise
                time.sleep(min(0.2 * (attempt + 1), 2.0))
        raise AssertionError("unreachable")

    def ensure_namespace(self, name: str) -> None:
        with contextlib.suppress(Conflict):
            self.api.create(resource_path("v1", "namespaces"),
                            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
