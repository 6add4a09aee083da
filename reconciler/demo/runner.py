"""The demo's script: local control plane + 10 simulated GPU nodes, a policy repository with a
bare remote, the reconciler daemon in a child process, a person merging the driver bump of the
vendor manual's 10-node scenario, another person releasing the manual gate, and the ``git log``
audit trail at the end. Everything it starts is stopped on the way out, Ctrl-C included."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from ruamel.yaml import YAML

from reconciler.demo.gitwork import DemoGitError, Person, Remote, Webhook, WorkingCopy
from reconciler.demo.progress import NodeView, Snapshot, changes, render, snapshot_from
from reconciler.gitops.edits import EditOutcome, FieldEdit, edit_policy_text
from reconciler.kube.api import KubeApi, KubeError, resource_path
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import ARCH_SUFFIXES, CLUSTER_OPERATOR_NAME, GPU_NODE_LABEL
from reconciler.policy.payload import Payload, normalize_version
from reconciler.sim.children import die_with_parent

CLUSTER = "lab-10"
POLICY_FILE = f"clusters/{CLUSTER}/cluster-operator.yaml"
STATUS_FILE = f"status/{CLUSTER}.yaml"
OLD = "2.32.0.6"
NEW = "2.33.0.9"
ALICE = Person("Alice Ops", "alice@example.com")
BOB = Person("Bob Reviewer", "bob@example.com")
WEBHOOK_REPOSITORY = "demo/gpu-policy"
FAILING = ("ErrImagePull", "ImagePullBackOff", "CrashLoopBackOff")


class DemoError(RuntimeError):
    pass


class Interrupted(Exception):
    pass


VERSION_FIELD = ("spec", "driver", "payload", "version")


def _same_version(written: str | None, version: str) -> bool:
    """``2.33.0.9`` and ``2.33.0.9-amd64`` are the same driver."""
    return written is not None and normalize_version(written) == normalize_version(version)


def examples_repo() -> Path:
    return Path(__file__).resolve().parents[2] / "examples-repo"


@dataclass
class DemoOptions:
    nodes: int = 10
    install_seconds: float = 3.0
    review_seconds: float = 3.0
    timeout: float = 600.0
    workdir: Path | None = None
    keep: bool = False
    live: bool | None = None  # None: live when the output is a terminal
    examples: Path | None = None
    #: serve ``reconciler dashboard`` of the demo's cluster at this HOST:PORT (None: do not)
    dashboard: str | None = None


def _free_port() -> int:
    from reconciler.sim.control_plane import free_ports

    return free_ports(1)[0]


class Demo:
    def __init__(self, options: DemoOptions, console: Console | None = None) -> None:
        self.options = options
        self.console = console or Console()
        self.live_mode = options.live if options.live is not None else self.console.is_terminal
        self.interrupted = threading.Event()
        self.narration: list[str] = []
        self.started = time.monotonic()
        self.work = Path("/nonexistent")
        self.api: KubeApi | None = None
        self.plane: Any = None
        self.fleet: Any = None
        self.remote: Remote | None = None
        self.daemon: subprocess.Popen[bytes] | None = None
        self.admission: Any = None
        self.daemon_log = Path("/nonexistent")
        self.last: Snapshot | None = None
        self.live: Live | None = None
        self.note = (f"simulated driver install: {options.install_seconds:g} s per node "
                     "(a real one takes minutes)")
        self._dashboard: list[Any] = []  # what to stop: server, app, source
        #: the arch suffix the example's policy file writes versions with ("" for none)
        self.arch = ""

    def written(self, version: str) -> str:
        """``version`` as the policy file writes versions (the example's arch suffix)."""
        return version + self.arch

    # -- output ------------------------------------------------------------------------------

    def say(self, message: str) -> None:
        stamp = f"{time.monotonic() - self.started:5.1f}s"
        self.narration.append(f"{stamp}  {message}")
        if self.live is not None:
            self._refresh_display()
        else:
            self.console.print(f"[dim]{stamp}[/dim]  {escape(message)}", highlight=False,
                               soft_wrap=True)

    def _refresh_display(self) -> None:
        if self.last is None:
            return
        if self.live is not None:
            self.live.update(render(self.last, new=NEW, old=OLD, narration=self.narration,
                                    note=self.note, height=self.console.size.height))

    # -- lifecycle ---------------------------------------------------------------------------

    def run(self) -> int:
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def interrupt(signum: int, frame: FrameType | None) -> None:
            if not self.interrupted.is_set():
                self.interrupted.set()
            else:
                self.console.print("[yellow]stopping: cleaning up what the demo started[/]")

        with contextlib.suppress(ValueError):  # not the main thread: no handlers
            for sig in previous:
                signal.signal(sig, interrupt)
        code = 0
        try:
            with self._resources():
                self._script()
        except Interrupted:
            code = 130
        except Exception as exc:
            # Ctrl-C also reaches git children of this process group: their failure is the
            # interruption, not an error of the demo
            if self.interrupted.is_set():
                code = 130
            elif isinstance(exc, DemoError | DemoGitError):
                self.console.print(f"[bold red]demo failed:[/] {escape(str(exc))}")
                code = 1
            else:
                raise
        finally:
            for sig, handler in previous.items():
                with contextlib.suppress(ValueError, TypeError):
                    signal.signal(sig, handler)
        if code == 130:
            self.console.print("interrupted: everything the demo started is stopped")
        return code

    @contextlib.contextmanager
    def _resources(self) -> Iterator[None]:
        from reconciler.sim.control_plane import ControlPlane, ControlPlaneError

        given = self.options.workdir
        if given is not None:
            given.mkdir(parents=True, exist_ok=True)
            self.work = Path(tempfile.mkdtemp(prefix="demo-", dir=given))
        else:
            self.work = Path(tempfile.mkdtemp(prefix="gpu-reconciler-demo-"))
        plane: ControlPlane | None = None
        failed = True
        try:
            self.say("starting the local control plane (etcd, kube-apiserver, "
                     "kube-controller-manager, kube-scheduler)")
            try:
                plane = ControlPlane(workdir=self.work / "control-plane")
                plane.start()
            except ControlPlaneError as exc:
                raise DemoError(str(exc)) from exc
            self.check()
            self.say(f"control plane up in {plane.boot_seconds or 0:.1f} s at {plane.server}")
            self.plane = plane
            self.api = plane.api(pool_size=16)
            yield
            failed = False
        finally:
            for part in reversed(self._dashboard):
                with contextlib.suppress(Exception):
                    part.stop()
            self._stop_daemon()
            if self.admission is not None:
                with contextlib.suppress(Exception):
                    self.admission.stop()
            if self.live is not None:
                self.live.stop()
                self.live = None
            if self.fleet is not None:
                with contextlib.suppress(Exception):
                    self.fleet.stop(cleanup=False)
            if self.api is not None:
                self.api.close()
            if plane is not None:
                if failed and not self.interrupted.is_set():
                    plane.mark_failed()
                plane.stop()
                leaked = plane.leaked_processes()
                if leaked:
                    self.console.print(f"[red]processes left running: {leaked}[/]")
            if (failed and not self.interrupted.is_set()) or self.options.keep:
                self.console.print(f"demo files and logs kept in {self.work}")
            else:
                shutil.rmtree(self.work, ignore_errors=True)

    def check(self) -> None:
        if self.interrupted.is_set():
            raise Interrupted
        if self.daemon is not None and self.daemon.poll() is not None:
            raise DemoError(f"the reconciler exited with {self.daemon.returncode}:\n"
                            f"{self._daemon_tail()}")

    def _daemon_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.daemon_log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _stop_daemon(self) -> None:
        daemon = self.daemon
        if daemon is None:
            return
        if daemon.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait(5)
        # anything the daemon started (git) goes with it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, signal.SIGKILL)

    def _start_dashboard(self, listen: str, repo: Path) -> None:
        """``reconciler dashboard`` of the demo's cluster, in this process."""
        from reconciler.dashboard.audit import GitAudit
        from reconciler.dashboard.server import DashboardApp, serve
        from reconciler.dashboard.source import ClusterSource
        from reconciler.ops.http_server import parse_listen_address

        assert self.api is not None
        host, port = parse_listen_address(listen)
        app: DashboardApp
        source = ClusterSource(self.api, cluster=CLUSTER, object_name=CLUSTER_OPERATOR_NAME,
                               on_change=lambda: app.changed())
        app = DashboardApp(source.facts, object_name=CLUSTER_OPERATOR_NAME,
                           audit=GitAudit(str(repo), cluster=CLUSTER))
        self._dashboard += [source.start(), app.start()]
        try:
            server = serve(app, host, port)
        except OSError as exc:
            raise DemoError(f"cannot serve the dashboard on {listen}: {exc}") from exc
        self._dashboard.append(server)
        self.say(f"dashboard: {server.url}/ (open it in a browser to watch the rollout)")

    # -- the script --------------------------------------------------------------------------

    def _script(self) -> None:
        from reconciler.sim.fleet import Fleet

        assert self.api is not None
        examples = self.options.examples or examples_repo()
        policy_text = (examples / POLICY_FILE).read_text() if (examples / POLICY_FILE).is_file() \
            else None
        if policy_text is None:
            raise DemoError(f"{examples / POLICY_FILE} not found: the demo runs from a source "
                            "checkout (or give --examples DIR)")
        payload = YAML(typ="safe").load(policy_text)["spec"]["driver"]["payload"]
        # the example writes versions with their arch suffix (2.33.0.9-amd64): the demo's too
        self.arch = next((s for s in ARCH_SUFFIXES if str(payload["version"]).endswith(s)), "")
        n = self.options.nodes
        self.say(f"simulating {n} GPU nodes on driver {OLD} ({self.note})")
        self.fleet = Fleet(self.api, nodes=n, install_seconds=self.options.install_seconds,
                           payload=Payload(payload["registry"], payload["name"], OLD))
        self.fleet.start(timeout=120)
        self.wait(lambda s: s.on(OLD) == n, 120, f"{n} driver pods Ready on {OLD}")
        self.say(f"{n} GPU nodes Ready on {OLD}")

        # the policy repository: a bare remote and Alice's clone, from examples-repo/
        self.remote = Remote.create(self.work / "remote" / "gpu-policy.git")
        secret = secrets.token_hex(16).encode()
        port = _free_port()
        webhook = Webhook(f"http://127.0.0.1:{port}/webhook", secret, WEBHOOK_REPOSITORY)
        (self.work / "people").mkdir()
        alice = WorkingCopy.clone(self.remote, self.work / "people" / "alice", ALICE)
        alice.webhook = webhook
        self._import_examples(alice, examples)
        self.say(f"policy repository created from examples-repo/ with a bare remote "
                 f"({self.remote.path}); {CLUSTER} runs {OLD}")
        if self.options.dashboard:
            self._start_dashboard(self.options.dashboard, self.remote.path)
        else:
            self.say("to watch it in a browser as well: reconciler demo --dashboard "
                     "(serves the live dashboard on http://127.0.0.1:8090/)")

        self._start_daemon(port, secret)
        applied = self.wait(lambda s: s.phase is not None and s.policy.enable_rollout
                            and _same_version(s.spec_version, OLD), 90,
                            "the reconciler to apply the repository's lab-10 policy")
        self.say(f"the reconciler applied {POLICY_FILE} (phase {applied.phase})")
        self._start_admission()
        self._start_live()

        # a pull request bumps the driver; the CI check validates it; Alice merges it
        alice.git("checkout", "--quiet", "-b", "upgrade-driver")
        alice.edit_policy(POLICY_FILE, [FieldEdit(VERSION_FIELD, self.written(NEW))],
                          f"{CLUSTER}: upgrade the GPU driver to {NEW}")
        check = self._reconciler("validate", "--against", "origin/main", cwd=alice.path)
        verdict = (check.stdout + check.stderr).strip().splitlines()
        self.say(f"pull request #1 ({OLD} -> {NEW}): `reconciler validate --against origin/main`"
                 f" says: {verdict[-1] if verdict else check.returncode}")
        if check.returncode != 0:
            raise DemoError(f"the pull request's check failed:\n{check.stdout}{check.stderr}")
        alice.git("checkout", "--quiet", "main")
        alice.git("pull", "--quiet", "origin", "main")
        alice.git("merge", "--quiet", "--no-ff", "upgrade-driver", "-m",
                  f"Merge pull request #1: upgrade {CLUSTER} to {NEW}")
        merged = alice.push()
        self.say(f"Alice merged pull request #1 ({merged[:8]}); the push webhook tells the "
                 "reconciler at once")

        # the rollout: batches, pauses, and each manual gate released by a person's commit
        bob: WorkingCopy | None = None
        released = 0
        while True:
            snap = self.wait(lambda s: self._completed(s) or (s.gate and self._git_pause()),
                             self._time_left(), "the rollout to complete or reach a gate")
            if self._completed(snap):
                break
            released += 1
            self.say(f"step {snap.step} done: {snap.on(NEW)} node(s) on {NEW}. The reconciler "
                     "paused at the manual gate and committed pause: true to Git")
            if released == 1:
                self._refused_patch()
            self.say(f"Bob checks the canary nodes ({self.options.review_seconds:g} s), then "
                     "merges pause: false")
            self.sleep(self.options.review_seconds)
            if bob is None:
                bob = WorkingCopy.clone(self.remote, self.work / "people" / "bob", BOB)
                bob.webhook = webhook
            else:
                bob.pull()
            bob.edit_policy(POLICY_FILE,
                            [FieldEdit(("spec", "driver", "upgradePolicy", "pause"), False)],
                            f"{CLUSTER}: release the rollout after step {snap.step} "
                            "(canary looks good)")
            bob.push()
            self.say(f"Bob released the gate after step {snap.step} (pause: false merged)")
            self.wait(lambda s: not s.gate, 60, "the gate to be released")
        self.say(f"rollout completed: {snap.on(NEW)}/{n} nodes on {NEW}")
        self.wait(lambda s: self._git_says_completed(), 60,
                  "the final status snapshot in Git")
        if self.live is not None:
            self.live.stop()
            self.live = None
        self._epilogue(released)

    def _import_examples(self, alice: WorkingCopy, examples: Path) -> None:
        for entry in examples.iterdir():
            if entry.name == "status":  # the reconciler writes those
                continue
            target = alice.path / entry.name
            if entry.is_dir():
                shutil.copytree(entry, target)
            else:
                shutil.copy2(entry, target)
        policy = alice.path / POLICY_FILE
        # the repository before the upgrade: lab-10 on the old driver (the payload's version,
        # written as the example writes versions; the file is a whole object with more)
        edited = edit_policy_text(policy.read_text(), [FieldEdit(VERSION_FIELD,
                                                                 self.written(OLD))])
        if edited.outcome is not EditOutcome.CHANGED or edited.text is None:
            raise DemoError(f"{POLICY_FILE}: cannot set the payload version: "
                            f"{edited.outcome.value} {edited.detail or ''}")
        policy.write_text(edited.text)
        alice.git("checkout", "--quiet", "-B", "main")
        alice.git("add", "--all")
        alice.git("commit", "--quiet", "-m",
                  f"Import the policy repository (examples-repo; {CLUSTER} on {OLD})")
        alice.push()

    def _start_daemon(self, port: int, secret: bytes) -> None:
        assert self.remote is not None
        secret_file = self.work / "webhook-secret"
        secret_file.write_bytes(secret)
        secret_file.chmod(0o600)
        self.daemon_log = self.work / "reconciler.log"
        command = [
            "run", "--repo", self.remote.url, "--cluster", CLUSTER,
            "--kubeconfig", str(self.plane.kubeconfig),
            "--state-dir", str(self.work / "reconciler-state"),
            "--fetch-interval", "5s", "--status-min-interval", "1s", "--ready-timeout", "60s",
            "--webhook-listen", f"127.0.0.1:{port}", "--webhook-secret-file", str(secret_file),
            "--webhook-repository", WEBHOOK_REPOSITORY, "--ops-listen", "off",
        ]
        self.say("starting the reconciler: reconciler " + " ".join(
            c if c != self.remote.url else "file://.../gpu-policy.git" for c in command[:5]))
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")}
        env.pop("KUBECONFIG", None)
        with self.daemon_log.open("wb") as log:
            self.daemon = subprocess.Popen(
                [sys.executable, "-m", "reconciler.cli.main", *command],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, env={**env, "PYTHONUNBUFFERED": "1"},
                preexec_fn=die_with_parent
                if threading.current_thread() is threading.main_thread() else None,
            )

    def _start_admission(self) -> None:
        """The admission webhook, as `dev-cluster up --admission` registers it (fail closed)."""
        from reconciler.sim.admission import DevAdmission

        assert self.api is not None
        self.admission = DevAdmission(self.api, self.work).start()
        self.say(f"admission webhook registered ({self.admission.url}): the API server asks "
                 "the reconciler before any ClusterOperator change")

    def _refused_patch(self) -> None:
        """Someone changes maxParallel in the cluster mid-rollout, the seed's way; the API
        server refuses it with the webhook's message (docs/rollout.md#starting-a-rollout)."""
        patch = '[{"op": "replace", "path": "/spec/driver/upgradePolicy/maxParallel", "value": 5}]'
        command = ["kubectl", "patch",
                   f"clusteroperators.gpu.metax-tech.com/{CLUSTER_OPERATOR_NAME}",
                   "--type=json", "-p", patch]
        kubectl = self.plane.binaries.kubectl  # the server's own release where it was built
        if kubectl is None:
            self.say("kubectl is not installed: skipping the refused `kubectl patch` "
                     "(scripts/install installs Debian's kubectl)")
            return
        done = subprocess.run([kubectl, "--kubeconfig", str(self.plane.kubeconfig),
                               *command[1:]], capture_output=True, text=True, timeout=60,
                              check=False)
        shown = " ".join(command[:3]) + " ... maxParallel: 5"
        if done.returncode == 0:
            raise DemoError(f"`{shown}` was admitted mid-rollout; the webhook should refuse it")
        reason = done.stderr.strip().splitlines()[0] if done.stderr.strip() else "(no message)"
        self.say(f"meanwhile someone runs `{shown}` mid-rollout: refused by the API server: "
                 f"{reason}")

    def _reconciler(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "reconciler.cli.main", *args], cwd=cwd,
                              capture_output=True, text=True, timeout=120, check=False)

    def _start_live(self) -> None:
        if not self.live_mode:
            return
        self.live = Live(console=self.console, refresh_per_second=4, transient=False)
        self.live.start()
        self._refresh_display()

    # -- observing ---------------------------------------------------------------------------

    def _time_left(self) -> float:
        return max(1.0, self.options.timeout - (time.monotonic() - self.started))

    def observe(self) -> Snapshot:
        assert self.api is not None
        try:
            co: dict[str, Any] | None = self.api.get(cluster_operator_path(CLUSTER_OPERATOR_NAME))
        except KubeError:
            co = None
        cordoned: dict[str, bool] = {}
        with contextlib.suppress(KubeError):
            listing = self.api.list(resource_path("v1", "nodes"),
                                    query={"labelSelector": f"{GPU_NODE_LABEL}=true"})
            for node in listing.get("items") or []:
                cordoned[node["metadata"]["name"]] = bool(
                    (node.get("spec") or {}).get("unschedulable"))
        views = self.fleet.driver_pods() if self.fleet is not None else {}
        nodes = []
        for name in sorted(set(cordoned) | set(views)):
            view = views.get(name)
            version = view.version if view else None
            problem = view.waiting_reason if view and view.waiting_reason in FAILING else None
            upgrading = view is None or view.deleting or (not view.ready and problem is None)
            nodes.append(NodeView(name, version, bool(view and view.ready and not view.deleting),
                                  upgrading, cordoned.get(name, False), problem))
        log: list[str] = []
        if self.remote is not None:
            with contextlib.suppress(DemoGitError):
                log = self.remote.log("-n", "12")
        return snapshot_from(co, nodes, log)

    def wait(self, condition: Callable[[Snapshot], bool], timeout: float, what: str) -> Snapshot:
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            snap = self.observe()
            self._show(snap)
            if condition(snap):
                return snap
            if time.monotonic() > deadline:
                raise DemoError(f"timed out after {timeout:.0f} s waiting for {what}; last "
                                f"status: {snap.headline()}\nreconciler log "
                                f"({self.daemon_log}):\n{self._daemon_tail()}")
            time.sleep(0.25)

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.check()
            self._show(self.observe())
            time.sleep(0.25)

    def _show(self, snap: Snapshot) -> None:
        previous, self.last = self.last, snap
        if self.live is not None:
            self._refresh_display()
        else:
            for line in changes(previous, snap, new=NEW):
                self.console.print(f"           {escape(line)}", highlight=False,
                                   soft_wrap=True)

    @staticmethod
    def _completed(snap: Snapshot) -> bool:
        return (snap.phase == "Idling" and snap.state == "Completed"
                and snap.step == snap.steps and _same_version(snap.spec_version, NEW)
                and snap.on(NEW) == len(snap.nodes) > 0)

    def _git_policy(self) -> dict[str, Any]:
        assert self.remote is not None
        text = self.remote.show(f"main:{POLICY_FILE}") or ""
        data = YAML(typ="safe").load(text) if text else None
        return data if isinstance(data, dict) else {}

    def _git_pause(self) -> bool:
        policy = ((self._git_policy().get("spec") or {}).get("driver") or {}).get(
            "upgradePolicy") or {}
        return policy.get("pause") is True

    def _git_says_completed(self) -> bool:
        assert self.remote is not None
        text = self.remote.show(f"main:{STATUS_FILE}")
        data = YAML(typ="safe").load(text) if text else None
        if not isinstance(data, dict):
            return False
        upgrade = data.get("upgradeStatus") or {}
        inner = upgrade.get("status") or {}
        return upgrade.get("phase") == "Idling" and inner.get("currentStepState") == "Completed"

    # -- the end -----------------------------------------------------------------------------

    def _epilogue(self, released: int) -> None:
        assert self.remote is not None
        elapsed = time.monotonic() - self.started
        self.console.rule("git log --graph: the audit trail (remote main, newest first)")
        trail = self.remote.log("--graph")
        for line in trail:
            self.console.print(escape(line), highlight=False, soft_wrap=True)
        self.console.rule(f"reconciler status --cluster {CLUSTER} --from git")
        reader = WorkingCopy.clone(self.remote, self.work / "people" / "reader", ALICE)
        status = self._reconciler("status", "--cluster", CLUSTER, "--from", "git",
                                  "--repo", str(reader.path), cwd=reader.path)
        self.console.print((status.stdout + status.stderr).rstrip(), highlight=False,
                           markup=False, soft_wrap=True)
        if status.returncode != 0:
            raise DemoError(f"`reconciler status` exited with {status.returncode}")
        self.console.rule()
        self.console.print(
            f"done in {elapsed:.0f} s: {CLUSTER} upgraded {OLD} -> {NEW} by merging a pull "
            f"request; {released} gate(s) released by a person's commit. {self.note}.",
            highlight=False, soft_wrap=True)
