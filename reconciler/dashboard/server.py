"""The dashboard's HTTP side: one static page and a JSON view, read-only.

Live updates are long polls: ``GET /api/view?after=V`` answers at once when the view's version
is not ``V``, else when the next version is built (or after ``LONG_POLL_SECONDS`` with the same
version). A builder thread rebuilds the view ``SETTLE_SECONDS`` after a change is reported
(a burst of watch events is one rebuild), and every ``REFRESH_SECONDS`` for the clock-driven
fields. Only GET and HEAD are served; nothing the server knows is secret (no kubeconfig, no Git
credentials ever reach a view).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from reconciler.clock import monotonic, wall
from reconciler.dashboard.audit import GitAudit
from reconciler.dashboard.model import (
    ClusterFacts,
    DashboardView,
    Prediction,
    build_view,
    measured_install_seconds,
)
from reconciler.dashboard.predict import ModelFleet, install_estimate, predict, prediction_key
from reconciler.names import CANARY_LABEL
from reconciler.ops.http_server import BackgroundHTTPServer, QuietHandler
from reconciler.policy.rollout_settings import RolloutSettings
from reconciler.rollout.model import PlannerSettings
from reconciler.rollout.topology import read as frozen_topology
from reconciler.stored_status import upgrade_status_of
from reconciler.views.nodes import target_revision

log = logging.getLogger(__name__)

LONG_POLL_SECONDS = 20.0
SETTLE_SECONDS = 0.2
REFRESH_SECONDS = 5.0
GIT_REFRESH_SECONDS = 5.0

_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/app.css": ("app.css", "text/css; charset=utf-8"),
}
_SECURITY_HEADERS = {
    # the page loads only its own script and style, and talks only to this server
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "connect-src 'self'; img-src 'self'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def static_file(name: str) -> bytes:
    return resources.files("reconciler.dashboard").joinpath("static", name).read_bytes()


@dataclass(slots=True)
class Built:
    version: int
    view: DashboardView
    body_full: bytes
    body_states: bytes
    fleet_key: str
    build_seconds: float


class DashboardApp:
    """Keeps the newest view; ``changed()`` asks for a rebuild."""

    def __init__(self, facts: Callable[[], ClusterFacts], *, object_name: str,
                 audit: GitAudit | None = None, clock: Callable[[], float] = wall,
                 monotonic: Callable[[], float] = monotonic,
                 ready_timeout: float | None = None) -> None:
        """``ready_timeout``: pins the model's readyTimeout (None: the cluster's
        ``rollout.readyTimeout`` from ``audit``'s reconciler.yaml, else 600 s)."""
        self._facts = facts
        self.object_name = object_name
        self.audit = audit
        self._clock = clock
        self._monotonic = monotonic
        self.ready_timeout = ready_timeout
        self._cond = threading.Condition()
        self._dirty = True
        self._stop = False
        self._built: Built | None = None
        self._compare: bytes = b""
        self._prediction: tuple[str, Prediction] | None = None
        self._thread: threading.Thread | None = None
        self._git_thread: threading.Thread | None = None
        #: seconds spent per rebuild (the benchmark reads them)
        self.build_seconds: list[float] = []

    # -- building ----------------------------------------------------------------------------
    def changed(self) -> None:
        with self._cond:
            self._dirty = True
            self._cond.notify_all()

    def _predict(self, facts: ClusterFacts, target: str) -> Prediction | None:
        co = facts.cluster_operator or {}
        upgrade = upgrade_status_of(co)
        if upgrade.get("phase") != "Progressing":
            return None
        driver = dict((co.get("spec") or {}).get("driver") or {})
        if not (driver.get("upgradePolicy") or {}).get("upgradeSteps"):
            return None
        nodes = int((upgrade.get("status") or {}).get("totalUpgradeReplicas") or 0) or len(
            facts.nodes)
        samples = measured_install_seconds(facts, target=target)
        install, _ = install_estimate(samples)
        settings = PlannerSettings().for_pass(self._rollout_settings(upgrade))
        fleet = _model_fleet(facts, settings)
        key = prediction_key(driver, nodes, install, settings, fleet)
        if self._prediction is not None and self._prediction[0] == key:
            return self._prediction[1]
        try:
            result = predict(driver, nodes=nodes, install_samples=samples, settings=settings,
                             fleet=fleet)
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("no prediction: %s", exc)
            return None
        self._prediction = (key, result)
        return result

    def _rollout_settings(self, upgrade: Mapping[str, Any]) -> RolloutSettings:
        """The ``rollout`` section the controller plans this rollout with: the cluster's in
        reconciler.yaml at the branch head (with ``audit``), ``--ready-timeout`` over it, and
        the topology the rollout froze when it started (docs/rollout.md#topology-aware-waves:
        a change waits for the next rollout)."""
        settings = self.audit.settings if self.audit is not None else None
        rollout = settings.rollout if settings is not None else RolloutSettings()
        if self.ready_timeout is not None:
            rollout = replace(rollout, ready_timeout=self.ready_timeout)
        frozen = upgrade.get("topology")
        return replace(rollout, topology=frozen_topology(frozen)
                       if isinstance(frozen, Mapping) else None)

    def build(self) -> Built:
        """Rebuild now (the builder thread calls this; tests and the benchmark too)."""
        started = self._monotonic()
        facts = self._facts()
        now = self._clock()
        co = facts.cluster_operator or {}
        upgrade = upgrade_status_of(co)
        target = target_revision(upgrade, facts.current_revision)
        prediction = self._predict(facts, target)
        audit = self.audit
        view = build_view(
            facts, now=now, object_name=self.object_name, prediction=prediction,
            git=audit.context if audit is not None else None,
            audit=list(audit.entries) if audit is not None else None,
            recorded=audit.snapshot if audit is not None else None,
        )
        if audit is not None and audit.error:
            view.error = "; ".join(filter(None, [view.error, f"Git: {audit.error}"]))
        data = view.to_json(with_names=False)
        compare = json.dumps({**data, "generatedAt": None}, sort_keys=True).encode()
        with self._cond:
            previous = self._built
            same = previous is not None and compare == self._compare
            version = previous.version if same and previous is not None else (
                (previous.version if previous else 0) + 1)
            self._compare = compare
        states = json.dumps({"version": version, "view": data}).encode()
        full = json.dumps({"version": version, "view": view.to_json()}).encode()
        elapsed = self._monotonic() - started
        built = Built(version, view, full, states, view.fleet_key(), elapsed)
        with self._cond:
            self._built = built
            self._cond.notify_all()
        self.build_seconds.append(elapsed)
        del self.build_seconds[:-1000]
        return built

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stop:
                    return
                if not self._dirty:
                    self._cond.wait(REFRESH_SECONDS)
                    if self._stop:
                        return
                self._dirty = False
            try:
                self.build()
            except Exception:  # the page keeps the last view; the log says why
                log.exception("building the dashboard view failed")
            time.sleep(SETTLE_SECONDS)

    def _run_git(self) -> None:
        assert self.audit is not None
        while True:
            with self._cond:
                if self._stop:
                    return
            if self.audit.refresh():
                self.changed()
            with self._cond:
                self._cond.wait(GIT_REFRESH_SECONDS)

    def start(self) -> DashboardApp:
        self._thread = threading.Thread(target=self._run, name="dashboard-build", daemon=True)
        self._thread.start()
        if self.audit is not None:
            self._git_thread = threading.Thread(target=self._run_git, name="dashboard-git",
                                                daemon=True)
            self._git_thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for thread in (self._thread, self._git_thread):
            if thread is not None:
                thread.join(timeout=5)

    # -- serving -----------------------------------------------------------------------------
    def wait_view(self, after: int | None, timeout: float) -> Built | None:
        deadline = self._monotonic() + timeout
        with self._cond:
            while True:
                built = self._built
                if built is not None and (after is None or built.version != after):
                    return built
                left = deadline - self._monotonic()
                if left <= 0 or self._stop:
                    return built
                self._cond.wait(left)


class DashboardHandler(QuietHandler):
    server_version = "gpu-reconciler-dashboard"

    @property
    def app(self) -> DashboardApp:
        app = getattr(self.server, "app")  # noqa: B009 - set by BackgroundHTTPServer
        assert isinstance(app, DashboardApp)
        return app

    def _send(self, status: int, body: bytes, content_type: str, *, cache: bool = False) -> None:
        headers = {"Content-Type": content_type, **_SECURITY_HEADERS,
                   "Cache-Control": "max-age=60" if cache else "no-store"}
        self.send_body(status, body, headers)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path in _STATIC:
            name, content_type = _STATIC[url.path]
            self._send(200, static_file(name), content_type)
            return
        if url.path == "/api/view":
            after = _int(query.get("after", [""])[0])
            have = query.get("have", [""])[0]
            wait = LONG_POLL_SECONDS if after is not None else 0.0
            built = self.app.wait_view(after, wait if after is not None else 10.0)
            if built is None:
                self._send(503, b'{"error": "the view is not built yet"}\n',
                           "application/json")
                return
            body = built.body_states if have and have == built.fleet_key else built.body_full
            self._send(200, body, "application/json")
            return
        if url.path == "/api/node":
            name = query.get("name", [""])[0]
            built = self.app.wait_view(None, 10.0)
            row = built.view.node(name) if built is not None else None
            if row is None:
                self._send(404, json.dumps({"error": "no such node"}).encode(),
                           "application/json")
                return
            self._send(200, json.dumps(row.to_json()).encode(), "application/json")
            return
        if url.path == "/favicon.ico":
            self._send(204, b"", "image/x-icon", cache=True)
            return
        if url.path == "/healthz":
            self._send(200, b"ok\n", "text/plain; charset=utf-8")
            return
        self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def _read_only(self) -> None:
        self.close_connection = True
        self.send_body(405, b"the dashboard is read-only\n",
                       {"Content-Type": "text/plain; charset=utf-8", "Allow": "GET, HEAD"})

    do_POST = do_PUT = do_PATCH = do_DELETE = _read_only


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def serve(app: DashboardApp, host: str, port: int) -> BackgroundHTTPServer:
    server = BackgroundHTTPServer(host, port, DashboardHandler, app, name="dashboard")
    server.start()
    return server


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def describe_listen(host: str) -> str | None:
    """A warning for an address beyond loopback, else None."""
    if is_loopback(host):
        return None
    return (f"warning: the dashboard listens on {host}, beyond this machine: anyone who can "
            "reach it sees the fleet's state (it is read-only and shows no secrets); "
            "use 127.0.0.1 and an SSH tunnel or an authenticating proxy instead")



def _model_fleet(facts: ClusterFacts, settings: PlannerSettings) -> ModelFleet:
    """With a topology: the GPU nodes by name with the labels that order them (the topology
    key, the canary label), so the model takes the domains the controller takes; without one
    the model's nameless nodes do."""
    if settings.topology is None:
        return ()
    key = settings.topology.key
    return tuple(
        (node.name, {**({key: node.labels[key]} if key in node.labels else {}),
                     **({CANARY_LABEL: "true"} if node.canary else {})})
        for node in sorted(facts.nodes, key=lambda n: n.name))
