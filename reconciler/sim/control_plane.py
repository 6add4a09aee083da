"""A local Kubernetes control plane: etcd, kube-apiserver (RBAC on), kube-controller-manager
(node lifecycle controller off, so simulated nodes are never evicted) and kube-scheduler, on free
loopback ports, in a temporary directory of their own.

``KUBE_VERSION`` selects the release (default 1.37.2; 1.30.0 and newer are built from the Go
module proxy by ``scripts/install-kubernetes``, and 1.20.2, kept for a compatibility subset of the
tests, from Debian's source). Each release gets the
flags and configuration it understands; the differences are listed in docs/dev-cluster.md.

Each process runs in its own process group; ``stop()`` terminates the groups and checks that
nothing is left. Logs stay on disk when something failed (``mark_failed()``, or a start that did
not come up) and are removed otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Self

from reconciler.kube.api import Conflict, KubeApi, KubeError, resource_path
from reconciler.kube.kubeconfig import write_kubeconfig
from reconciler.sim.children import die_with_parent
from reconciler.sim.pki import Pki, make_pki

KUBE_VERSION = "1.37.2"  # the default release; kube_version() says which one runs
# The one release before the current generation still configured: Debian's source package.
LEGACY_KUBE_VERSION = "1.20.2"
# The oldest release of the current generation this module configures (1.21-1.29 are neither).
FIRST_CURRENT_MINOR = 30
DEFAULT_CACHE = Path("/var/cache/gpu-reconciler")
MINTED_NAMESPACE = "gpu-reconciler-identities"
# The Go garbage collector took 20-30 % of the scheduler's and controller manager's CPU while
# 400 of 2,000 driver pods were replaced, CPU that the simulated fleet and the controller share
# on a small machine; the price is memory (docs/dev-cluster.md). A GOGC in the environment wins.
GO_GC_PERCENT = "400"
# The scheduler places only driver DaemonSet pods here (workload pods are bound directly), and
# each such pod fits one node, found by scanning all of them: node affinity first, so every
# other node fails at the first check; no volume, topology or inter-pod plugins, as no pod uses
# them. Same scheduling result as the default profile for these pods.
SCHEDULER_FILTERS = ("NodeAffinity", "NodeName", "NodeUnschedulable", "TaintToleration",
                     "NodePorts", "NodeResourcesFit")
# With the workload controllers (``workload_controllers=True``) it places the pods of Deployments
# and Jobs too, whose manifests spread them (topology spread constraints, pod anti-affinity).
WORKLOAD_SCHEDULER_PLUGINS = ("PodTopologySpread", "InterPodAffinity")
# The state their filters read; VolumeBinding's also feeds its reserve and pre-bind steps.
SCHEDULER_PRE_FILTERS = ("NodePorts", "NodeResourcesFit", "VolumeBinding")
# Current releases also narrow the nodes before filtering: NodeAffinity's pre-filter turns a
# DaemonSet pod's node-name affinity, and NodeName's a set nodeName, into that one node, so the
# filters run on one node instead of all of them.
CURRENT_SCHEDULER_PRE_FILTERS = ("NodeAffinity", "NodeName", *SCHEDULER_PRE_FILTERS)
# Enabled at every extension point by default in current releases, and its Reserve step fails
# ("not found") without the state its pre-filter writes; no pod here claims a device.
CURRENT_SCHEDULER_DISABLED = ("DynamicResources",)
# The controllers run (the same in both generations), by their 1.20 names and by their current
# ones (current releases keep the old names only as aliases).
CONTROLLERS = ("daemonset", "garbagecollector", "namespace", "podgc", "serviceaccount",
               "clusterrole-aggregation", "root-ca-cert-publisher")
CURRENT_CONTROLLERS = ("daemonset-controller", "garbage-collector-controller",
                       "namespace-controller", "pod-garbage-collector-controller",
                       "serviceaccount-controller", "clusterrole-aggregation-controller",
                       "root-ca-certificate-publisher-controller")
# What Deployments, Jobs and PodDisruptionBudgets need (``workload_controllers=True``); off by
# default, so the scale benchmarks measure the same control plane as before.
WORKLOAD_CONTROLLERS = ("deployment", "replicaset", "job", "disruption")
CURRENT_WORKLOAD_CONTROLLERS = ("deployment-controller", "replicaset-controller",
                                "job-controller", "disruption-controller")


class ControlPlaneError(RuntimeError):
    pass


def kube_version() -> str:
    """The Kubernetes release to run: ``KUBE_VERSION`` if set, else the default."""
    return os.environ.get("KUBE_VERSION") or KUBE_VERSION


def kube_minor(version: str) -> int:
    """The minor release of a supported version: 1.20.2, or 1.30.0 and newer."""
    match = re.fullmatch(r"1\.(\d+)\.\d+", version)
    minor = int(match.group(1)) if match else -1
    if version != LEGACY_KUBE_VERSION and minor < FIRST_CURRENT_MINOR:
        raise ControlPlaneError(
            f"KUBE_VERSION={version}: the control plane runs 1.20.2 or 1.30.0 and newer")
    return minor


@dataclass(frozen=True, slots=True)
class Binaries:
    etcd: Path
    apiserver: Path
    controller_manager: Path
    scheduler: Path
    #: the release they are (``kube_version()``), which decides their flags
    version: str = KUBE_VERSION

    @property
    def current(self) -> bool:
        """A release of 1.30 or newer (secure serving only, scheduler config v1, ...)."""
        return kube_minor(self.version) >= FIRST_CURRENT_MINOR

    @property
    def kubectl(self) -> str | None:
        """The kubectl of the same release when one was built beside the servers (the module
        build makes one), else the one on ``PATH`` (Debian's, 1.20), else None."""
        beside = self.apiserver.parent / "kubectl"
        return str(beside) if os.access(beside, os.X_OK) else shutil.which("kubectl")

    @classmethod
    def locate(cls) -> Binaries:
        """``KUBE_BIN_DIR`` if set, else the cache ``scripts/install-kubernetes`` builds into
        for ``kube_version()``; etcd from ``ETCD_BIN``, else beside the Kubernetes binaries (the
        module build makes one), else ``PATH``."""
        version = kube_version()
        kube_minor(version)
        explicit = os.environ.get("KUBE_BIN_DIR")
        cache = Path(os.environ.get("RECONCILER_CACHE", str(DEFAULT_CACHE)))
        bin_dir = Path(explicit) if explicit else cache / f"kubernetes-{version}" / "bin"
        beside = bin_dir / "etcd"
        etcd = (os.environ.get("ETCD_BIN") or (str(beside) if os.access(beside, os.X_OK) else "")
                or shutil.which("etcd") or "/usr/bin/etcd")
        found = cls(
            etcd=Path(etcd),
            apiserver=bin_dir / "kube-apiserver",
            controller_manager=bin_dir / "kube-controller-manager",
            scheduler=bin_dir / "kube-scheduler",
            version=version,
        )
        missing = [str(p) for p in (found.etcd, found.apiserver, found.controller_manager,
                                    found.scheduler) if not os.access(p, os.X_OK)]
        if missing:
            build = "" if version == KUBE_VERSION else f"KUBE_VERSION={version} "
            raise ControlPlaneError(
                f"missing control plane binaries: {', '.join(missing)}; "
                f"run {build}scripts/install-kubernetes "
                "(or set KUBE_BIN_DIR to a directory holding kube-apiserver, "
                "kube-controller-manager and kube-scheduler)"
            )
        return found


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (held open together so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def scheduler_configuration(kubeconfig: Path, serving: str, *, current: bool = False,
                            workloads: bool = False) -> str:
    """The scheduler's KubeSchedulerConfiguration (JSON is YAML): v1beta1 serving plain HTTP on
    ``serving`` for 1.20; v1 for a current release, which serves only HTTPS, on its flags.
    ``workloads`` adds the plugins that spread workload pods."""
    extra = WORKLOAD_SCHEDULER_PLUGINS if workloads else ()

    def only(names: tuple[str, ...]) -> dict[str, object]:
        return {"disabled": [{"name": "*"}], "enabled": [{"name": n} for n in (*names, *extra)]}
    config: dict[str, object] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 1000, "burst": 2000},
        "leaderElection": {"leaderElect": False},
        "healthzBindAddress": serving, "metricsBindAddress": serving,
        "profiles": [{"schedulerName": "default-scheduler", "plugins": {
            "preFilter": only(SCHEDULER_PRE_FILTERS), "filter": only(SCHEDULER_FILTERS)}}],
    }
    if current:
        del config["healthzBindAddress"], config["metricsBindAddress"]
        config["apiVersion"] = "kubescheduler.config.k8s.io/v1"
        config["profiles"] = [{"schedulerName": "default-scheduler", "plugins": {
            "multiPoint": {"disabled": [{"name": n} for n in CURRENT_SCHEDULER_DISABLED]},
            "preFilter": only(CURRENT_SCHEDULER_PRE_FILTERS), "filter": only(SCHEDULER_FILTERS)}}]
    return json.dumps(config, indent=2)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (for benchmarks); NaN once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("nan")
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_mib(pid: int, key: str) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib(pid: int) -> float:
    """A process's peak resident memory (VmHWM) in MiB; NaN once it is gone."""
    return _status_mib(pid, "VmHWM:")


def rss_mib(pid: int) -> float:
    """A process's resident memory now (VmRSS) in MiB; NaN once it is gone."""
    return _status_mib(pid, "VmRSS:")


def memory_report(pids: Mapping[str, int]) -> str:
    """``name RSS MiB (peak MiB)`` per process, for ``dev-cluster up`` and the benchmarks."""
    return ", ".join(f"{name} {rss_mib(pid):.0f} MiB (peak {peak_rss_mib(pid):.0f})"
                     for name, pid in pids.items())


@dataclass
class _Process:
    name: str
    args: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    supervised: bool = False
    restarts: int = 0
    supervisor: threading.Thread | None = None


class ControlPlane:
    """``with ControlPlane() as cp: api = cp.api()``; or ``start()`` / ``stop()``."""

    def __init__(
        self,
        *,
        binaries: Binaries | None = None,
        workdir: Path | None = None,
        start_timeout: float = 90.0,
        workload_controllers: bool = False,
    ) -> None:
        self.binaries = binaries or Binaries.locate()
        #: also run the controllers of Deployments, ReplicaSets, Jobs and disruption budgets
        self.workload_controllers = workload_controllers
        self.start_timeout = start_timeout
        self._given_workdir = workdir
        self.workdir: Path = workdir or Path("/nonexistent")
        self.etcd_dir: Path | None = None
        self.kubeconfig: Path = self.workdir / "kubeconfig"
        self.server = ""
        #: etcd's client URL (tests compact its history to make watches expire)
        self.etcd_url = ""
        self.failed = False
        self.boot_seconds: float | None = None
        self.pki: Pki | None = None
        self._processes: list[_Process] = []
        self._pgids: set[int] = set()
        self._minted = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.failed = True
        self.stop()

    def start(self) -> Self:
        started = time.monotonic()
        if self._given_workdir is not None:
            self.workdir = self._given_workdir
            self.workdir.mkdir(parents=True, exist_ok=True)
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix="gpu-reconciler-cp-"))
        shm = Path("/dev/shm")
        self.etcd_dir = Path(tempfile.mkdtemp(prefix="gpu-reconciler-etcd-",
                                              dir=shm if shm.is_dir() else None))
        (self.workdir / "logs").mkdir(exist_ok=True)
        self.kubeconfig = self.workdir / "kubeconfig"
        try:
            self.pki = make_pki(self.workdir / "pki")
            for attempt in range(3):
                try:
                    self._boot()
                    break
                except _PortTaken:
                    self._terminate_all()
                    if attempt == 2:
                        raise
        except BaseException as exc:
            self.failed = True
            self.stop()
            if isinstance(exc, ControlPlaneError):
                raise ControlPlaneError(f"{exc} (logs kept in {self.workdir / 'logs'})") from exc
            raise
        self.boot_seconds = time.monotonic() - started
        return self

    def _boot(self) -> None:
        assert self.pki is not None and self.etcd_dir is not None
        pki = self.pki
        etcd_client, etcd_peer, apiserver_port, kcm_port, scheduler_port = free_ports(5)
        self.server = f"https://127.0.0.1:{apiserver_port}"
        self.etcd_url = f"http://127.0.0.1:{etcd_client}"
        write_kubeconfig(
            self.kubeconfig, server=self.server, ca_cert=pki.ca.cert.read_bytes(), user="admin",
            client_cert=pki.admin.cert.read_bytes(), client_key=pki.admin.key.read_bytes(),
        )
        for name, pair in (("controller-manager", pki.controller_manager),
                           ("scheduler", pki.scheduler)):
            write_kubeconfig(
                self.workdir / f"{name}.kubeconfig", server=self.server,
                ca_cert=pki.ca.cert.read_bytes(), user=name,
                client_cert=pair.cert.read_bytes(), client_key=pair.key.read_bytes(),
            )
        data_dir = self.etcd_dir / "data"
        shutil.rmtree(data_dir, ignore_errors=True)
        self._launch("etcd", [
            str(self.binaries.etcd), "--name", "default", "--data-dir", str(data_dir),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_client}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_client}",
            "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{etcd_peer}",
            "--log-level", "warn", "--logger", "zap", "--quota-backend-bytes", str(4 << 30),
        ])
        self._launch("kube-apiserver", [
            str(self.binaries.apiserver),
            f"--etcd-servers=http://127.0.0.1:{etcd_client}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={apiserver_port}",
            f"--tls-cert-file={pki.apiserver.cert}", f"--tls-private-key-file={pki.apiserver.key}",
            f"--client-ca-file={pki.ca.cert}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # Pods need no service account token mounts here (no kubelet reads them).
            "--disable-admission-plugins=ServiceAccount",
            # Thousands of simulated kubelets write at once: no fairness queueing, wide limits.
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=3000", "--max-mutating-requests-inflight=2000",
            "--endpoint-reconciler-type=none", "--profiling=false",
            f"--cert-dir={self.workdir / 'pki'}",
            "--v=1",
        ])
        self._wait_apiserver()
        current = self.binaries.current
        if current:
            # Insecure serving (--address, --port) is gone: both serve /healthz over TLS only,
            # with the API server's loopback certificate, so the probe verifies it against our CA.
            serving = ["--bind-address=127.0.0.1", f"--tls-cert-file={pki.apiserver.cert}",
                       f"--tls-private-key-file={pki.apiserver.key}"]
            kcm_serving = [f"--secure-port={kcm_port}", *serving]
            scheduler_serving = [f"--secure-port={scheduler_port}", *serving]
            scheme, probe = "https", self._client_context(with_identity=False)
        else:
            kcm_serving = ["--secure-port=0", "--address=127.0.0.1", f"--port={kcm_port}"]
            scheduler_serving = ["--secure-port=0", "--address=127.0.0.1",
                                 f"--port={scheduler_port}"]
            scheme, probe = "http", None
        controllers: tuple[str, ...] = CURRENT_CONTROLLERS if current else CONTROLLERS
        if self.workload_controllers:
            controllers += CURRENT_WORKLOAD_CONTROLLERS if current else WORKLOAD_CONTROLLERS
        self._launch("kube-controller-manager", supervised=True, args=[
            str(self.binaries.controller_manager),
            f"--kubeconfig={self.workdir / 'controller-manager.kubeconfig'}",
            f"--controllers={','.join(controllers)}",
            "--kube-api-qps=1000", "--kube-api-burst=2000",
            "--leader-elect=false", *kcm_serving,
            f"--service-account-private-key-file={pki.service_account_key}",
            f"--root-ca-file={pki.ca.cert}",
            "--v=1",
        ])
        scheduler_config = self.workdir / "scheduler.yaml"
        scheduler_config.write_text(scheduler_configuration(
            self.workdir / "scheduler.kubeconfig", f"127.0.0.1:{scheduler_port}",
            current=current, workloads=self.workload_controllers))
        self._launch("kube-scheduler", supervised=True, args=[
            str(self.binaries.scheduler), f"--config={scheduler_config}",
            *scheduler_serving, "--v=1",
        ])
        self._wait_http_ok("kube-controller-manager",
                           f"{scheme}://127.0.0.1:{kcm_port}/healthz", probe)
        self._wait_http_ok("kube-scheduler",
                           f"{scheme}://127.0.0.1:{scheduler_port}/healthz", probe)

    def _launch(self, name: str, args: list[str], *, supervised: bool = False) -> None:
        process = _Process(name, args, self.workdir / "logs" / f"{name}.log",
                           supervised=supervised)
        process.log = open(process.log_path, "ab")  # noqa: SIM115 - closed in _terminate_all
        main_thread = threading.current_thread() is threading.main_thread()
        with self._lock:
            self._spawn(process, tied=main_thread)
            self._processes.append(process)
        if supervised:
            process.supervisor = threading.Thread(
                target=self._supervise, args=(process,), name=f"supervise {name}", daemon=True)
            process.supervisor.start()

    def _spawn(self, process: _Process, *, tied: bool) -> None:
        process.popen = subprocess.Popen(
            process.args, stdin=subprocess.DEVNULL, stdout=process.log, stderr=subprocess.STDOUT,
            env={"GOGC": GO_GC_PERCENT, **os.environ},
            start_new_session=True, preexec_fn=die_with_parent if tied else None,
        )
        self._pgids.add(process.popen.pid)

    def _supervise(self, process: _Process) -> None:
        """Restarts a controller-manager or scheduler that exits, as a kubelet restarts static
        pods: both exit when the API server goes away while they start (e.g. during
        ``restart_apiserver()``). The thread lives exactly as long as the process it watches,
        so the child may die with it (PR_SET_PDEATHSIG)."""
        while True:
            popen = process.popen
            assert popen is not None
            code = popen.wait()
            if self._stopping.wait(1.0):
                return
            with self._lock:
                if self._stopping.is_set():
                    return
                process.restarts += 1
                assert process.log is not None
                process.log.write(f"\n[control plane] {process.name} exited with {code}; "
                                  f"restart {process.restarts}\n".encode())
                process.log.flush()
                self._spawn(process, tied=True)

    # -- readiness --------------------------------------------------------------------------

    def _deadline_check(self, deadline: float, what: str) -> None:
        for process in self._processes:
            assert process.popen is not None
            if process.supervised and process.restarts < 5:
                continue  # restarted by its supervisor
            if process.popen.poll() is not None:
                text = process.log_path.read_text(errors="replace")
                if "address already in use" in text:
                    raise _PortTaken(process.name)
                tail = "\n".join(text.splitlines()[-15:])
                raise ControlPlaneError(
                    f"{process.name} exited with {process.popen.returncode} while waiting for "
                    f"{what}:\n{tail}"
                )
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"timed out after {self.start_timeout:.0f} s waiting for {what}"
            )

    def _client_context(self, *, with_identity: bool = True) -> ssl.SSLContext:
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        if with_identity:
            context.load_cert_chain(str(self.pki.admin.cert), str(self.pki.admin.key))
        return context

    def _wait_apiserver(self) -> None:
        context = self._client_context()
        deadline = time.monotonic() + self.start_timeout
        while True:
            self._deadline_check(deadline, "kube-apiserver /readyz")
            with contextlib.suppress(OSError, urllib.error.URLError), urllib.request.urlopen(
                f"{self.server}/readyz", context=context, timeout=2
            ) as response:
                if response.status == 200:
                    return
            time.sleep(0.1)

    def _wait_http_ok(self, what: str, url: str, context: ssl.SSLContext | None = None) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            self._deadline_check(deadline, f"{what} {url}")
            with contextlib.suppress(OSError, urllib.error.URLError), urllib.request.urlopen(
                url, timeout=2, context=context
            ) as response:
                if response.status == 200:
                    return
            time.sleep(0.1)

    # -- stopping ---------------------------------------------------------------------------

    def _terminate_all(self) -> None:
        with self._lock:
            self._stopping.set()  # under the lock: no supervisor spawns after this
        for process in reversed(self._processes):
            popen = process.popen
            if popen is not None and popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in reversed(self._processes):
            popen = process.popen
            if popen is None:
                continue
            try:
                popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGKILL)
                popen.wait(5)
            # Anything else left in the group (there should be nothing) goes too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            if process.supervisor is not None:
                process.supervisor.join(5)
            if process.log is not None:
                process.log.close()
        self._processes.clear()
        self._stopping.clear()

    def stop(self) -> None:
        """Stops every process; removes the work directory unless something failed."""
        self._terminate_all()
        if self.etcd_dir is not None:
            shutil.rmtree(self.etcd_dir, ignore_errors=True)
            self.etcd_dir = None
        if self.failed:
            return
        if self._given_workdir is None and self.workdir.name.startswith("gpu-reconciler-cp-"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    def mark_failed(self) -> None:
        """Keep the logs on ``stop()`` (call it when a test using this control plane failed)."""
        self.failed = True

    def leaked_processes(self) -> list[int]:
        """Pids still alive in any process group this control plane started."""
        leaked = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            state, pgid = fields[0], int(fields[2])
            if pgid in self._pgids and state != "Z":
                leaked.append(int(entry.name))
        return leaked

    @property
    def restarts(self) -> dict[str, int]:
        """How often the supervisor restarted each component."""
        return {p.name: p.restarts for p in self._processes}

    @property
    def pids(self) -> dict[str, int]:
        return {p.name: p.popen.pid for p in self._processes if p.popen is not None}

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    def restart_apiserver(self) -> None:
        """Kills kube-apiserver and starts it again on the same port (an outage for clients)."""
        for process in self._processes:
            if process.name == "kube-apiserver" and process.popen is not None:
                os.killpg(process.popen.pid, signal.SIGTERM)
                try:
                    process.popen.wait(5)
                except subprocess.TimeoutExpired:
                    os.killpg(process.popen.pid, signal.SIGKILL)
                    process.popen.wait(5)
                if process.log is not None:
                    process.log.close()
                self._processes.remove(process)
                self._launch("kube-apiserver", process.args)
                self._wait_apiserver()
                return
        raise ControlPlaneError("kube-apiserver is not running")

    # -- clients and identities ---------------------------------------------------------------

    def api(self, *, pool_size: int = 32) -> KubeApi:
        """A JSON client with the admin identity."""
        return KubeApi.from_kubeconfig(self.kubeconfig, pool_size=pool_size)

    def mint_kubeconfig(
        self,
        cluster_role: str | None,
        *,
        name: str | None = None,
        namespace_roles: Mapping[str, str] | None = None,
        expiration_seconds: int = 86400,
    ) -> Path:
        """A kubeconfig for a new service account bound to ``cluster_role`` (a ClusterRole) and,
        per namespace, to the Role named in ``namespace_roles``. Tests of least-privilege RBAC
        run the reconciler with it."""
        with self._lock:
            self._minted += 1
            serial = self._minted
        account = name or f"{(cluster_role or 'identity').replace(':', '-')}-{serial}"
        api = self.api(pool_size=4)
        try:
            self._ensure(api, resource_path("v1", "namespaces"),
                         {"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": MINTED_NAMESPACE}})
            self._ensure(api, resource_path("v1", "serviceaccounts", namespace=MINTED_NAMESPACE),
                         {"apiVersion": "v1", "kind": "ServiceAccount",
                          "metadata": {"name": account, "namespace": MINTED_NAMESPACE}})
            subject = {"kind": "ServiceAccount", "name": account, "namespace": MINTED_NAMESPACE}
            rbac = "rbac.authorization.k8s.io/v1"
            if cluster_role is not None:
                self._ensure(api, resource_path(rbac, "clusterrolebindings"), {
                    "apiVersion": rbac, "kind": "ClusterRoleBinding",
                    "metadata": {"name": f"{MINTED_NAMESPACE}:{account}"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": cluster_role},
                    "subjects": [subject],
                })
            for namespace, role in (namespace_roles or {}).items():
                self._ensure(api, resource_path(rbac, "rolebindings", namespace=namespace), {
                    "apiVersion": rbac, "kind": "RoleBinding",
                    "metadata": {"name": f"{MINTED_NAMESPACE}:{account}", "namespace": namespace},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                "name": role},
                    "subjects": [subject],
                })
            request = api.create(
                resource_path("v1", "serviceaccounts", account, namespace=MINTED_NAMESPACE,
                              subresource="token"),
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                 "spec": {"expirationSeconds": expiration_seconds}},
            )
        finally:
            api.close()
        assert self.pki is not None
        path = self.workdir / "identities" / f"{account}.kubeconfig"
        return write_kubeconfig(
            path, server=self.server, ca_cert=self.pki.ca.cert.read_bytes(),
            user=f"system:serviceaccount:{MINTED_NAMESPACE}:{account}",
            token=str(request["status"]["token"]),
        )

    @staticmethod
    def _ensure(api: KubeApi, collection: str, body: dict[str, object]) -> None:
        try:
            api.create(collection, body)
        except Conflict:
            pass
        except KubeError as exc:
            raise ControlPlaneError(f"cannot create {body.get('kind')}: {exc}") from exc


class _PortTaken(ControlPlaneError):
    pass
