"""A real Prometheus server (Debian's ``prometheus``, installed by ``scripts/install``) for the
dev cluster and tests, scraping the simulator's endpoints on loopback.

It runs as a child in its own process group with its own configuration file and TSDB in a
temporary directory (or a given one), listens on a free loopback port, and counts as started
once ``/-/ready`` answers. ``stop()`` terminates it (SIGTERM: it closes its TSDB; SIGKILL after
10 s) and removes the temporary directory unless something failed (``mark_failed()``), so its
log can be read.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Self

from reconciler.sim.children import die_with_parent
from reconciler.sim.control_plane import free_ports

DEFAULT_BINARY = "/usr/bin/prometheus"


class PrometheusError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """One scrape job of one ``host:port`` endpoint."""

    job: str
    address: str
    metrics_path: str = "/metrics"
    labels: Mapping[str, str] = field(default_factory=dict)


def locate_binary() -> Path:
    """``PROMETHEUS_BIN`` if set, else ``prometheus`` on ``PATH``, else Debian's path."""
    found = Path(os.environ.get("PROMETHEUS_BIN") or shutil.which("prometheus")
                 or DEFAULT_BINARY)
    if not os.access(found, os.X_OK):
        raise PrometheusError(f"no Prometheus server at {found}; run scripts/install (Debian's "
                              "prometheus package) or set PROMETHEUS_BIN")
    return found


def go_duration(seconds: float) -> str:
    """Seconds as a Prometheus duration (``1500ms``); at least 1 ms."""
    return f"{max(1, round(seconds * 1000))}ms"


def configuration(targets: Sequence[ScrapeTarget], scrape_interval: float) -> str:
    """``prometheus.yml`` (JSON is YAML). The timeout is the interval: a scrape of a big fleet
    may take most of it."""
    interval = go_duration(scrape_interval)
    return json.dumps({
        "global": {"scrape_interval": interval, "scrape_timeout": interval,
                   "evaluation_interval": interval},
        "scrape_configs": [
            {"job_name": target.job, "metrics_path": target.metrics_path,
             "static_configs": [{"targets": [target.address], "labels": dict(target.labels)}]}
            for target in targets
        ],
    }, indent=2)


class PrometheusServer:
    """``with PrometheusServer([target]) as prometheus: prometheus.url`` (or ``start()`` and
    ``stop()``)."""

    def __init__(self, targets: Sequence[ScrapeTarget], *, scrape_interval: float = 1.0,
                 binary: Path | None = None, workdir: Path | None = None,
                 start_timeout: float = 60.0, retention: str = "1d") -> None:
        if scrape_interval <= 0:
            raise ValueError("scrape_interval must be positive")
        self.targets = list(targets)
        self.scrape_interval = scrape_interval
        self.binary = binary or locate_binary()
        self.start_timeout = start_timeout
        self.retention = retention
        self._given_workdir = workdir
        self.workdir: Path | None = None
        self.url = ""
        self.failed = False
        self.boot_seconds: float | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.failed = True
        self.stop()

    @property
    def log_path(self) -> Path:
        if self.workdir is None:
            raise RuntimeError("start() the server first")
        return self.workdir / "prometheus.log"

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    def start(self) -> Self:
        started = time.monotonic()
        if self._given_workdir is not None:
            self.workdir = self._given_workdir
            self.workdir.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(self.workdir / "data", ignore_errors=True)  # a previous run's series
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix="gpu-reconciler-prometheus-"))
        config = self.workdir / "prometheus.yml"
        config.write_text(configuration(self.targets, self.scrape_interval))
        try:
            for attempt in range(3):  # a free port can be taken between the probe and the bind
                port = free_ports(1)[0]
                self._spawn(config, port)
                if self._wait_ready(started):
                    break
                self._terminate()
                if attempt == 2:
                    raise PrometheusError(f"no free port for Prometheus:\n{self._tail()}")
        except BaseException:
            self.failed = True
            self.stop()
            raise
        self.boot_seconds = time.monotonic() - started
        return self

    def _spawn(self, config: Path, port: int) -> None:
        assert self.workdir is not None
        self.url = f"http://127.0.0.1:{port}"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _terminate
        main_thread = threading.current_thread() is threading.main_thread()
        self._popen = subprocess.Popen(
            [str(self.binary), f"--config.file={config}",
             f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--storage.tsdb.retention.time={self.retention}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            cwd=self.workdir, start_new_session=True,
            preexec_fn=die_with_parent if main_thread else None,
        )

    def _wait_ready(self, started: float) -> bool:
        """True once ``/-/ready`` answers 200; False if the port was taken."""
        assert self._popen is not None
        while True:
            if self._popen.poll() is not None:
                if "address already in use" in self._tail():
                    return False
                raise PrometheusError(
                    f"prometheus exited with {self._popen.returncode}:\n{self._tail()}")
            if time.monotonic() - started > self.start_timeout:
                raise PrometheusError(
                    f"prometheus not ready after {self.start_timeout:.0f} s:\n{self._tail()}")
            with contextlib.suppress(OSError, urllib.error.URLError), urllib.request.urlopen(
                f"{self.url}/-/ready", timeout=2
            ) as response:
                if response.status == 200:
                    return True
            time.sleep(0.1)

    def _tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def query(self, expr: str, *, timeout: float = 10.0) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now (``/api/v1/query``): each element's
        ``metric`` labels and ``value`` [time, "text"]."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            raise PrometheusError(f"query {expr!r}: HTTP {exc.code}: {exc.read()[:300]!r}"
                                  ) from None
        except (OSError, ValueError) as exc:
            raise PrometheusError(f"query {expr!r}: {exc}") from None
        data = body.get("data") or {}
        if body.get("status") != "success" or data.get("resultType") != "vector":
            raise PrometheusError(f"query {expr!r}: unexpected answer {body!r:.300}")
        return list(data.get("result") or [])

    def _terminate(self) -> None:
        popen = self._popen
        if popen is not None:
            if popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGTERM)
            try:
                popen.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGKILL)
                popen.wait(5)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)  # anything left in its group
            self._popen = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        """Stops the server; removes its temporary directory unless something failed (a
        ``workdir`` given to it stays)."""
        self._terminate()
        if self.workdir is not None and not self.failed and self._given_workdir is None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def mark_failed(self) -> None:
        """Keep the log and data on ``stop()``."""
        self.failed = True
