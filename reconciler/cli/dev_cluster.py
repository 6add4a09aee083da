"""``reconciler dev-cluster up|down``: a local control plane with a simulated GPU fleet, for demos
and manual testing."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from reconciler import clock
from reconciler.cli.numbers import MAX_SECONDS, BoundedInt, FiniteFloat
from reconciler.files import printable

#: The largest rollout docs/rollout.md#scale asks for; every simulated node is a Node, a Pod and a
#: kubelet loop.
MAX_NODES = 10_000
#: ``metax-tech.com/gpu`` each simulated GPU node advertises (a serving pod takes one)
GPUS_PER_NODE = 8

if TYPE_CHECKING:
    from reconciler.sim.fleet import Fleet

DIR_HELP = ("State directory (kubeconfig, logs, pid file). Default: $RECONCILER_DEV_CLUSTER_DIR, "
            "else $XDG_STATE_HOME/gpu-reconciler/dev-cluster (~/.local/state/...).")


def default_dir() -> Path:
    explicit = os.environ.get("RECONCILER_DEV_CLUSTER_DIR")
    if explicit:
        return Path(explicit)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "gpu-reconciler" / "dev-cluster"


def _running_pid(directory: Path) -> int | None:
    """The pid of the ``up`` process serving ``directory``, if it is alive."""
    try:
        pid = int((directory / "up.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if b"dev-cluster" in cmdline else None


def _parse_seconds(value: str) -> float | tuple[float, float]:
    """``5`` (fixed) or ``3-8`` (uniform range), finite, at most MAX_SECONDS."""
    try:
        if len(value) > 80:
            raise ValueError
        if "-" in value.strip("-"):
            low, high = (float(v) for v in value.split("-", 1))
            if not 0 <= low <= high <= MAX_SECONDS:  # False for nan
                raise ValueError
            return (low, high)
        fixed = float(value)
        if not 0 <= fixed <= MAX_SECONDS:
            raise ValueError
        return fixed
    except ValueError:
        raise click.BadParameter(
            f"expected seconds such as 5 or a range such as 3-8 (from 0 to "
            f"{int(MAX_SECONDS)}), got {printable(value[:80])!r}", param_hint="--install-seconds"
        ) from None


def _say(message: str) -> None:
    click.echo(f"[dev-cluster] {message}", err=True)


@click.group("dev-cluster")
def dev_cluster() -> None:
    """A local Kubernetes control plane with a simulated GPU fleet."""


@dev_cluster.command("up")
@click.option("--nodes", type=BoundedInt(0, MAX_NODES), default=10, show_default=True,
              help=f"GPU nodes to simulate (node-0001 ...), at most {MAX_NODES:,}.")
@click.option("--faults", "faults_file", type=click.Path(path_type=Path),
              help="YAML fault file: faults: [{node: node-0003, fault: imagepull, version: V}]")
@click.option("--install-seconds", default="5", show_default=True,
              help=f"Driver install time per pod: seconds, or a uniform range LOW-HIGH, from 0 "
                   f"to {int(MAX_SECONDS)} (a year).")
@click.option("--payload-version", default=None,
              help="Driver version the fleet starts on (default: the simulator's 2.31.0.6).")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=None, help=DIR_HELP)
@click.option("--seed", type=BoundedInt(0, 2**63 - 1), default=0, show_default=True,
              help="Seed for drawn install times.")
@click.option("--timeout", type=FiniteFloat(0, min_open=True), default=600, show_default=True,
              help="Seconds to wait for the fleet to be Ready.")
@click.option("--prometheus", "with_prometheus", is_flag=True,
              help="Also run a Prometheus server on loopback that scrapes the fleet's MX Exporter "
                   "metrics; its URL is printed on stderr.")
# --admission (docs/admission.md): our webhook server beside the control plane, registered
# fail-closed
@click.option("--admission", is_flag=True, default=False,
              help="Start the reconciler's validating admission webhook on a loopback port and "
                   "register it (failurePolicy Fail), so bad ClusterOperator changes are refused "
                   "by the API server. Without it nothing is registered.")
@click.option("--lease-seconds", type=FiniteFloat(0, 3600), default=0, show_default=True,
              help="Renew each node's Lease in kube-node-lease every this many seconds, as a "
                   "kubelet does (10); 0: no Leases and no heartbeats (the node lifecycle "
                   "controller, which reads them, is off here).")
@click.option("--workloads", type=BoundedInt(0, MAX_NODES * GPUS_PER_NODE), default=None,
              help="Also run the controllers real workloads need (deployment, replicaset, job, "
                   "disruption), play workload pods as a kubelet does (grace periods, Jobs that "
                   "complete) and put this many serving pods (Deployment gpu-serving, one GPU "
                   "each) behind a PodDisruptionBudget (maxUnavailable 1) in namespace "
                   "gpu-workloads; 0: the controllers, no pods. Without it: no workload "
                   "controllers.")
@click.option("--domains", type=BoundedInt(1, MAX_NODES), default=None,
              help="Label the nodes with a zone (topology.kubernetes.io/zone=zone-<i>) and a "
                   "rack (gpu.metax-tech.com/rack=rack-<i>), spread in order over this many "
                   "domains. Without it: no zone or rack labels.")
def up(nodes: int, faults_file: Path | None, install_seconds: str, payload_version: str | None,
       directory: Path | None, seed: int, timeout: float, with_prometheus: bool,
       admission: bool, lease_seconds: float, workloads: int | None,
       domains: int | None) -> None:
    """Start the control plane and the fleet; print the kubeconfig path once the fleet is Ready;
    run until Ctrl-C or `reconciler dev-cluster down`."""
    from reconciler.kube.api import KubeError
    from reconciler.policy.payload import Payload
    from reconciler.sim.admission import DevAdmission
    from reconciler.sim.control_plane import ControlPlane, ControlPlaneError, memory_report
    from reconciler.sim.faults import POD_FAULTS, FaultFileError, FaultKind, load_faults
    from reconciler.sim.fleet import WORKLOAD_NAMESPACE, Fleet, default_workers, node_name
    from reconciler.sim.operator_install import DEFAULT_PAYLOAD, release_minor
    from reconciler.sim.prometheus import PrometheusError, locate_binary
    from reconciler.sim.waiting import WaitTimeout, wait_for
    from reconciler.sim.workloads import (
        deploy_serving,
        domain_labels,
        policy_version,
        serving_status,
    )

    directory = directory or default_dir()
    install = _parse_seconds(install_seconds)
    faults = []
    if faults_file is not None:
        try:
            faults = load_faults(faults_file)
        except FaultFileError as exc:
            raise click.UsageError(printable(str(exc))) from None
    width = max(4, len(str(nodes)))
    known = {node_name(i, width) for i in range(1, nodes + 1)}
    unknown = sorted({f.node for f in faults} - known)
    if unknown:
        raise click.UsageError(printable(
            f"{faults_file}: fault(s) for node(s) not in the fleet: {', '.join(unknown)} "
            f"(nodes are {node_name(1, width)}..{node_name(nodes, width)})"
        ))
    if workloads is not None and workloads > nodes * GPUS_PER_NODE:
        raise click.UsageError(f"--workloads {workloads}: {nodes} nodes have "
                               f"{nodes * GPUS_PER_NODE} GPUs, one per serving pod")
    if domains is not None and domains > nodes:
        raise click.UsageError(f"--domains {domains}: more domains than the {nodes} nodes")
    if with_prometheus:
        try:
            locate_binary()
        except PrometheusError as exc:
            raise click.ClickException(str(exc)) from None
    running = _running_pid(directory)
    if running is not None:
        raise click.ClickException(
            f"a dev cluster is already running in {directory} (pid {running}); "
            "stop it with `reconciler dev-cluster down`"
        )
    payload = DEFAULT_PAYLOAD
    if payload_version:
        payload = Payload(DEFAULT_PAYLOAD.registry, DEFAULT_PAYLOAD.name, payload_version)

    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "up.pid").write_text(f"{os.getpid()}\n")
    plane = ControlPlane(workdir=directory, workload_controllers=workloads is not None)
    fleet: Fleet | None = None
    telemetry = _Telemetry()
    webhook: DevAdmission | None = None
    code = 0
    try:
        started = clock.monotonic()
        plane.start()
        _say(f"control plane up in {plane.boot_seconds:.1f} s ({plane.server})")
        # a connection per simulator thread, and some for the watches
        fleet = Fleet(plane.api(pool_size=default_workers(nodes) + 8), nodes=nodes, faults=faults,
                      install_seconds=install, payload=payload, seed=seed,
                      lease_seconds=lease_seconds or None, workloads=workloads is not None,
                      node_labels=domain_labels(sorted(known), domains) if domains else None)
        fleet.start(timeout=timeout)
        _say(f"{nodes} nodes registered" + (f" in {domains} zones" if domains else ""))
        if admission:
            webhook = DevAdmission(plane.api(pool_size=4), directory).start()
            _say(f"admission webhook registered at {webhook.url} (failurePolicy Fail)")
        broken = {f.node for f in faults
                  if (f.kind in POD_FAULTS or f.kind == FaultKind.NODE_NOT_READY)
                  and f.applies_to(payload.version)}
        expected = len(known - broken)
        ready_fleet = fleet
        wait_for(lambda: stop.is_set() or len(ready_fleet.ready_driver_nodes()) >= expected,
                 timeout=timeout, what=f"{expected} Ready driver pods",
                 observe=lambda: f"{len(ready_fleet.ready_driver_nodes())} Ready", interval=0.2)
        if workloads and not stop.is_set():
            policy = policy_version(release_minor(fleet.kubelet_version))
            api = fleet.api
            deploy_serving(api, workloads, namespace=WORKLOAD_NAMESPACE, policy_version=policy)

            def serving() -> Mapping[str, int]:
                return serving_status(api, namespace=WORKLOAD_NAMESPACE, policy=policy)

            # the budget's count too: the disruption controller has seen them
            wait_for(lambda: stop.is_set() or serving()["currentHealthy"] >= workloads,
                     timeout=timeout, what=f"{workloads} serving pods Ready behind their budget",
                     observe=serving, interval=0.2)
            _say(f"{workloads} serving pods Ready (Deployment {WORKLOAD_NAMESPACE}/gpu-serving "
                 "behind a PodDisruptionBudget)")
        if with_prometheus and not stop.is_set():
            telemetry.start(fleet, nodes, directory, timeout)
        if not stop.is_set():
            _say(f"{expected}/{nodes} driver pods Ready in {clock.monotonic() - started:.1f} s"
                 + (f" ({len(broken)} faulty)" if broken else "")
                 + "; Ctrl-C or `reconciler dev-cluster down` stops it")
            _say("memory: " + memory_report({"simulator": os.getpid(), **plane.pids}))
            click.echo(str(plane.kubeconfig))
            sys.stdout.flush()
        stop.wait()
        _say("stopping")
    except (ControlPlaneError, WaitTimeout, TimeoutError, PrometheusError, KubeError) as exc:
        plane.mark_failed()
        telemetry.mark_failed()
        _say(f"error: {exc}")
        _say(f"logs kept in {plane.logs}")
        code = 1
    finally:
        if webhook is not None:
            webhook.stop()
        telemetry.stop()
        if fleet is not None:
            fleet.stop(cleanup=False)
        plane.stop()
        (directory / "up.pid").unlink(missing_ok=True)
        if code == 0:
            plane.kubeconfig.unlink(missing_ok=True)
    if plane.leaked_processes():
        _say(f"error: processes left running: {plane.leaked_processes()}")
        code = 1
    if code:
        sys.exit(code)
    _say("stopped")


class _Telemetry:
    """``up --prometheus``: the fleet's MX Exporter stand-in and a Prometheus scraping it."""

    def __init__(self) -> None:
        from reconciler.sim.mx_exporter import MxExporter
        from reconciler.sim.prometheus import PrometheusServer

        self.exporter: MxExporter | None = None
        self.prometheus: PrometheusServer | None = None

    def start(self, fleet: Fleet, nodes: int, directory: Path, timeout: float) -> None:
        from reconciler.sim.mx_exporter import MxExporter
        from reconciler.sim.prometheus import PrometheusServer
        from reconciler.sim.waiting import wait_for

        self.exporter = MxExporter.for_fleet(fleet).start()
        interval = prometheus_interval(nodes)
        self.prometheus = PrometheusServer([self.exporter.scrape_target()],
                                           scrape_interval=interval,
                                           workdir=directory / "prometheus").start()
        prometheus = self.prometheus
        # Ready for queries once the first scrape is in, not merely once the server answers.
        wait_for(lambda: any(r["value"][1] == "1"
                             for r in prometheus.query('up{job="mx-exporter"}')),
                 timeout=max(timeout, 10 * interval), what="Prometheus's first scrape",
                 interval=0.2)
        _say(f"prometheus {prometheus.url} scrapes the MX Exporter metrics at "
             f"{self.exporter.url} every {interval:g} s (logs {prometheus.log_path})")

    def mark_failed(self) -> None:
        if self.prometheus is not None:
            self.prometheus.mark_failed()

    def stop(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()
        if self.exporter is not None:
            self.exporter.stop()


def prometheus_interval(nodes: int) -> float:
    """1 s for a small fleet; longer for a big one, whose scrape takes longer
    (docs/dev-cluster.md has the measured figures)."""
    return float(max(1, -(-nodes // 1000)))


@dev_cluster.command("down")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=None, help=DIR_HELP)
@click.option("--timeout", type=FiniteFloat(0, min_open=True), default=60, show_default=True,
              help="Seconds to wait for it to stop.")
def down(directory: Path | None, timeout: float) -> None:
    """Stop the dev cluster started by `reconciler dev-cluster up` (every process it started)."""
    directory = directory or default_dir()
    pid = _running_pid(directory)
    if pid is None:
        (directory / "up.pid").unlink(missing_ok=True)
        click.echo(f"no dev cluster is running in {directory}")
        return
    os.kill(pid, signal.SIGTERM)
    deadline = clock.monotonic() + timeout
    while _running_pid(directory) == pid and Path(f"/proc/{pid}").exists():
        if clock.monotonic() > deadline:
            raise click.ClickException(f"dev cluster (pid {pid}) still running after {timeout:g} s")
        time.sleep(0.1)
    click.echo(f"dev cluster in {directory} stopped")
