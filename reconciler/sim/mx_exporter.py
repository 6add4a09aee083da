"""The MX Exporter stand-in: the vendor's per-GPU telemetry
(docs/dev-cluster.md#prometheus-and-the-mx-exporter-metrics) for every simulated node, served from
one HTTP endpoint per fleet.

The real exporter runs as a DaemonSet pod on each GPU node and needs the loaded driver, so a node
whose driver pod is not Ready (installing, crash-looping, being replaced), a rebooting or NotReady
node and a node without GPUs export nothing: Prometheus marks their series stale, and a query
such as ``min(mx_gpu_state{Hostname="node-0003"})`` has no sample until the new driver is Ready.
A node that exports reports every GPU with the labels ``deviceId``, ``uuid``, ``Hostname`` (the
node name), ``driver_version`` (its Ready driver pod's version, without the arch suffix),
``bios_version`` (the node's VBIOS) and ``modelName``; a GPU that a workload pod asked for also
carries ``pod``, ``namespace`` and ``container``, which Prometheus stores as ``exported_pod`` ...
because the scrape target has labels of those names, as a Kubernetes-discovered exporter pod has.

Faults (``reconciler.sim.faults``) for the driver version the node runs: ``gpu-unavailable``
makes ``faulty_gpus`` GPUs (deviceId 0, 1, ...) report ``mx_gpu_state`` 0, ``gpu-throttling``
makes them report a non-zero ``mx_clk_thr``; the driver pod stays Ready either way.

One endpoint per fleet, not one per node: 10,000 targets would each hold a connection and a
thread of the stand-in, while one scrape of the whole fleet is a single streamed body. Each
node's text is rendered once per state change (with ``prometheus_client``) and kept, so a scrape
joins cached text (``bench/exporter_scrape.py`` measures it; docs/dev-cluster.md has the numbers).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import Metric

from reconciler.names import ARCH_SUFFIXES, OPERATOR_NAMESPACE
from reconciler.ops.http_server import BackgroundHTTPServer, QuietHandler, ServerLimits
from reconciler.sim.faults import FaultKind
from reconciler.sim.prometheus import ScrapeTarget

if TYPE_CHECKING:
    from reconciler.sim.fleet import Fleet
    from reconciler.sim.fleet_state import SimNode, SimPod

GPUS_PER_NODE = 8  # what the fleet's nodes report as metax-tech.com/gpu capacity
FAULTY_GPUS = 2  # GPUs a gpu-unavailable or gpu-throttling fault affects on its node
MODEL_LABEL = "metax-tech.com/gpu.product"
DEFAULT_MODEL = "MXC500"
EXPORTER_POD = "mx-exporter"  # the scrape target's pod/container labels (see the docstring)
METRICS_PATH = "/metrics"

# Name and help text, in exposition order
# (docs/dev-cluster.md#prometheus-and-the-mx-exporter-metrics).
METRICS: tuple[tuple[str, str], ...] = (
    ("mx_gpu_state", "GPU state: 0 (not available) 1 (available)"),
    ("mx_gpu_usage", "GPU utilization, percent"),
    ("mx_memory_used", "GPU memory in use, MiB"),
    ("mx_board_power", "Board power, W"),
    ("mx_chip_hotspot_temp", "Chip hotspot temperature, degrees Celsius"),
    ("mx_board_core_temp", "Board core temperature, degrees Celsius"),
    ("mx_clk_thr", "Clock throttling reason (0: not throttled)"),
    ("mx_device_type", "Device type"),
)
THROTTLE_REASON = 4  # a non-zero reason code; the vendor's codes are not modelled
DEVICE_TYPE = 1


@dataclass(frozen=True, slots=True)
class GpuUser:
    """The workload container a GPU is allocated to."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class NodeTelemetry:
    """What one node's exporter reports: everything that changes its text (a cache key)."""

    hostname: str
    driver_version: str
    bios_version: str
    model: str = DEFAULT_MODEL
    gpus: int = GPUS_PER_NODE
    unavailable: frozenset[int] = frozenset()
    throttled: frozenset[int] = frozenset()
    users: tuple[tuple[int, GpuUser], ...] = ()  # (deviceId, user), for GPUs in use

    def gpu_uuid(self, device: int) -> str:
        return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{device}.{self.hostname}')}"


def driver_version(image_tag: str) -> str:
    """``2.31.0.6-amd64`` -> ``2.31.0.6``: the exporter reports the driver's own version."""
    for suffix in ARCH_SUFFIXES:
        if image_tag.endswith(suffix):
            return image_tag[: -len(suffix)]
    return image_tag


def fleet_telemetry(nodes: Iterable[SimNode], pods: Iterable[SimPod], *,
                    gpus: int = GPUS_PER_NODE, faulty_gpus: int = FAULTY_GPUS
                    ) -> list[NodeTelemetry]:
    """The exporters' view of a fleet's state (``Fleet.read_state`` passes it in)."""
    drivers: dict[str, SimPod] = {}
    workloads: dict[str, list[SimPod]] = {}
    for pod in pods:
        if pod.driver:
            if pod.ready and not pod.deleting and pod.version:
                drivers[pod.node] = pod
        elif pod.ready and pod.gpu_requests:
            workloads.setdefault(pod.node, []).append(pod)
    faulty = frozenset(range(min(max(faulty_gpus, 0), gpus)))
    found = []
    for node in nodes:
        driver = drivers.get(node.name)
        if (driver is None or node.removed or not node.gpu or node.rebooting
                or not node.reported_ready):
            continue
        kinds = {f.kind for f in node.faults if f.applies_to(driver.version)}
        found.append(NodeTelemetry(
            hostname=node.name,
            driver_version=driver_version(driver.version or ""),
            bios_version=node.vbios,
            model=node.labels.get(MODEL_LABEL, DEFAULT_MODEL),
            gpus=gpus,
            unavailable=faulty if FaultKind.GPU_UNAVAILABLE in kinds else frozenset(),
            throttled=faulty if FaultKind.GPU_THROTTLING in kinds else frozenset(),
            users=_allocate(workloads.get(node.name, []), gpus),
        ))
    return found


def _allocate(pods: list[SimPod], gpus: int) -> tuple[tuple[int, GpuUser], ...]:
    """GPUs handed out in pod creation order, as a device plugin would; requests beyond the
    node's GPUs get none (such a pod would not have been admitted)."""
    users: list[tuple[int, GpuUser]] = []
    for pod in sorted(pods, key=lambda p: (p.created, p.name)):
        for container, count in pod.gpu_requests.items():
            for _ in range(count):
                if len(users) == gpus:
                    return tuple(users)
                users.append((len(users), GpuUser(pod.namespace, pod.name, container)))
    return tuple(users)


def gpu_values(node: NodeTelemetry, device: int) -> dict[str, float]:
    """Per-GPU readings. Only ``mx_gpu_state`` and ``mx_clk_thr`` carry fault semantics; the
    others are plausible steady values for an idle or busy GPU."""
    available = device not in node.unavailable
    busy = available and any(d == device for d, _ in node.users)
    throttled = device in node.throttled
    return {
        "mx_gpu_state": 1.0 if available else 0.0,
        "mx_gpu_usage": 92.0 if busy else 0.0,
        "mx_memory_used": 51200.0 if busy else (0.0 if not available else 512.0),
        "mx_board_power": 340.0 if busy else 58.0,
        "mx_chip_hotspot_temp": 97.0 if throttled else (74.0 if busy else 41.0),
        "mx_board_core_temp": 89.0 if throttled else (66.0 if busy else 37.0),
        "mx_clk_thr": float(THROTTLE_REASON) if throttled else 0.0,
        "mx_device_type": float(DEVICE_TYPE),
    }


class _NodeCollector:
    """One node's metric families, for ``generate_latest`` (a ``Collector`` by its method)."""

    def __init__(self, node: NodeTelemetry | None) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        node = self.node
        families = {name: Metric(name, doc, "gauge") for name, doc in METRICS}
        if node is not None:
            users = dict(node.users)
            for device in range(node.gpus):
                labels = {
                    "deviceId": str(device), "uuid": node.gpu_uuid(device),
                    "Hostname": node.hostname, "driver_version": node.driver_version,
                    "bios_version": node.bios_version, "modelName": node.model,
                }
                user = users.get(device)
                if user is not None:
                    labels.update(pod=user.pod, namespace=user.namespace, container=user.container)
                for name, value in gpu_values(node, device).items():
                    families[name].add_sample(name, labels, value)
        yield from families.values()


def _by_family(text: str) -> dict[str, str]:
    """Exposition text split into its families' sample lines (headers dropped)."""
    lines: dict[str, list[str]] = {name: [] for name, _ in METRICS}
    for line in text.splitlines(keepends=True):
        if line.startswith("#"):
            continue
        lines[line.split("{", 1)[0].split(" ", 1)[0]].append(line)
    return {name: "".join(found) for name, found in lines.items()}


def _headers() -> dict[str, str]:
    headers: dict[str, list[str]] = {name: [] for name, _ in METRICS}
    for line in generate_latest(_NodeCollector(None)).decode().splitlines(keepends=True):
        headers[line.split(" ", 3)[2]].append(line)
    return {name: "".join(found) for name, found in headers.items()}


class MxExporter:
    """``MxExporter.for_fleet(fleet).start()`` ... ``stop()``; ``render()`` without a server.

    ``source`` returns the nodes that export now (``fleet_telemetry``); a node's text is
    rendered again only when its ``NodeTelemetry`` changed."""

    def __init__(self, source: Callable[[], Iterable[NodeTelemetry]], *,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.source = source
        self._host, self._port = host, port
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[NodeTelemetry, dict[str, str]]] = {}
        self._headers = _headers()
        self._server: BackgroundHTTPServer | None = None
        self.rendered_nodes = 0  # node texts rendered so far (cache misses)

    @classmethod
    def for_fleet(cls, fleet: Fleet, *, gpus: int = GPUS_PER_NODE,
                  faulty_gpus: int = FAULTY_GPUS, host: str = "127.0.0.1", port: int = 0
                  ) -> MxExporter:
        def source() -> list[NodeTelemetry]:
            return fleet.read_state(
                lambda nodes, pods: fleet_telemetry(nodes, pods, gpus=gpus,
                                                    faulty_gpus=faulty_gpus))
        return cls(source, host=host, port=port)

    def render(self) -> bytes:
        """The whole exposition (text format 0.0.4), one family after the other."""
        nodes = sorted(self.source(), key=lambda n: n.hostname)
        with self._lock:
            cache: dict[str, tuple[NodeTelemetry, dict[str, str]]] = {}
            for node in nodes:
                kept = self._cache.get(node.hostname)
                if kept is None or kept[0] != node:
                    kept = (node, _by_family(generate_latest(_NodeCollector(node)).decode()))
                    self.rendered_nodes += 1
                cache[node.hostname] = kept
            self._cache = cache
            texts = [text for _, text in cache.values()]
        parts = []
        for name, _ in METRICS:
            parts.append(self._headers[name])
            parts.extend(text[name] for text in texts)
        return "".join(parts).encode()

    # -- serving ----------------------------------------------------------------------------

    def start(self) -> MxExporter:
        self.render()  # fills the cache, so the first scrape is as quick as the next ones
        self._server = BackgroundHTTPServer(self._host, self._port, _Handler, self,
                                            name="mx-exporter",
                                            # a scrape at 10,000 nodes is ~110 MiB that
                                            # Prometheus reads as it parses: give it time
                                            limits=ServerLimits(max_connections=16,
                                                                write_grace=120.0))
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    @property
    def address(self) -> str:
        """``host:port`` of the endpoint (after ``start()``)."""
        if self._server is None:
            raise RuntimeError("start() the exporter first")
        host, port = self._server.address
        return f"{host}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}{METRICS_PATH}"

    def scrape_target(self, labels: Mapping[str, str] | None = None) -> ScrapeTarget:
        """The Prometheus job for this endpoint, with the target labels a Kubernetes-discovered
        exporter pod has (so workload labels arrive as ``exported_*``)."""
        return ScrapeTarget(
            job="mx-exporter", address=self.address, metrics_path=METRICS_PATH,
            labels={"namespace": OPERATOR_NAMESPACE, "pod": EXPORTER_POD,
                    "container": EXPORTER_POD, **(labels or {})},
        )


class _Handler(QuietHandler):
    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != METRICS_PATH:
            self.send_text(404, f"not found; the metrics are at {METRICS_PATH}\n")
            return
        exporter: MxExporter = self.server.app  # type: ignore[attr-defined]
        self.send_body(200, exporter.render(), {"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})
