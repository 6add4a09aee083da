"""``/healthz``, ``/readyz`` and ``/metrics`` on one port.

``/healthz`` (liveness) says the process serves requests and its loops are not stuck; a failure
makes Kubernetes restart the pod. ``/readyz`` (readiness) says the daemon can do its job: it is
false until every readiness check passes (e.g. the informer caches have synced) and again once
shutdown has begun. Both list their checks like kube-apiserver does (``[+]name ok``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST

from reconciler.ops.http_server import BackgroundHTTPServer, QuietHandler
from reconciler.ops.metrics import Metrics

log = logging.getLogger(__name__)

Check = Callable[[], bool]


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str


class HealthChecks:
    """Named liveness and readiness checks; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._liveness: dict[str, Check] = {}
        self._readiness: dict[str, Check] = {}
        self._flags: dict[str, bool] = {}
        self._shutting_down = False

    def add_liveness(self, name: str, check: Check) -> None:
        with self._lock:
            self._liveness[name] = check

    def add_readiness(self, name: str, check: Check) -> None:
        with self._lock:
            self._readiness[name] = check

    def set_ready(self, name: str, ready: bool) -> None:
        """A readiness check driven by events (``set_ready("caches", True)`` once synced)."""
        with self._lock:
            self._flags[name] = ready
            if name not in self._readiness:
                self._readiness[name] = lambda: self._flags.get(name, False)

    def shutting_down(self) -> None:
        """From now on ``/readyz`` fails, so traffic drains before the process exits."""
        with self._lock:
            self._shutting_down = True

    def liveness(self) -> list[CheckResult]:
        with self._lock:
            checks = dict(self._liveness)
        return [_run(name, check, "failed") for name, check in sorted(checks.items())] or [
            CheckResult("ping", True, "ok")
        ]

    def readiness(self) -> list[CheckResult]:
        with self._lock:
            checks = dict(self._readiness)
            shutting_down = self._shutting_down
        results = [_run(name, check, "not ready") for name, check in sorted(checks.items())]
        if not checks:
            results.append(CheckResult("checks", False, "no readiness check registered yet"))
        if shutting_down:
            results.append(CheckResult("shutdown", False, "shutting down"))
        return results


def _run(name: str, check: Check, failure: str) -> CheckResult:
    try:
        ok = bool(check())
    except Exception as e:  # a broken check must fail the probe, not the server
        log.warning("health check %s raised %s", name, e, exc_info=True)
        return CheckResult(name, False, f"error: {type(e).__name__}: {e}")
    return CheckResult(name, ok, "ok" if ok else failure)


def _report(results: list[CheckResult]) -> tuple[int, str]:
    ok = all(r.ok for r in results)
    lines = [f"[{'+' if r.ok else '-'}]{r.name} {r.detail}" for r in results]
    lines.append("ok" if ok else "failed")
    return (200 if ok else 503), "\n".join(lines) + "\n"


@dataclass
class _OpsApp:
    checks: HealthChecks
    metrics: Metrics


class _OpsHandler(QuietHandler):
    def do_GET(self) -> None:
        app: _OpsApp = self.server.app  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0]
        if path in ("/healthz", "/livez"):
            self.send_text(*_report(app.checks.liveness()))
        elif path == "/readyz":
            self.send_text(*_report(app.checks.readiness()))
        elif path == "/metrics":
            self.send_text(200, app.metrics.exposition().decode(), content_type=CONTENT_TYPE_LATEST)
        else:
            self.send_text(404, "not found: try /healthz, /readyz or /metrics\n")

    do_HEAD = do_GET


class OpsServer(BackgroundHTTPServer):
    """The ops endpoints, served from a background thread."""

    def __init__(self, host: str, port: int, *, checks: HealthChecks, metrics: Metrics) -> None:
        super().__init__(host, port, _OpsHandler, _OpsApp(checks, metrics), name="ops")
        self.checks = checks
        self.metrics = metrics
