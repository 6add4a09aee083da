"""``reconciler run`` as a real process, as people and Kubernetes run it."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from reconciler.sim.control_plane import free_ports
from reconciler.sim.waiting import wait_for

RECONCILER = str(Path(sys.executable).parent / "reconciler")
WEBHOOK_SECRET = "test-webhook-secret"


class Daemon:
    def __init__(self, args: list[str], *, workdir: Path, name: str,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.ops_port, self.webhook_port = free_ports(2)
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / f"{name}.log"
        secret = workdir / f"{name}.secret"
        secret.write_text(WEBHOOK_SECRET + "\n")
        secret.chmod(0o600)
        self.args = [
            RECONCILER, "run", *args,
            "--ops-listen", f"127.0.0.1:{self.ops_port}",
            "--state-dir", str(workdir / f"{name}-state"),
        ]
        if "--role" not in args or "controller" not in args:
            self.args += ["--webhook-listen", f"127.0.0.1:{self.webhook_port}",
                          "--webhook-secret-file", str(secret)]
        self.env = {**os.environ, "POD_NAME": name, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=self.env)

    def stop(self, sig: int = signal.SIGTERM, *, timeout: float = 30.0) -> int:
        """The exit code after ``sig``. A daemon still running ``timeout`` seconds later is
        killed (a leftover would act on the shared control plane in later tests) and the test
        fails with its log's tail."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # every thread's stack into its log first (`reconciler run` dumps them on SIGUSR1)
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            self.proc.kill()
            self.proc.wait(timeout=30)
            self._log.close()
            raise AssertionError(f"{self.name} did not exit within {timeout:g} s of signal "
                                 f"{sig}; killed. Its log ends:\n{self.log()[-12000:]}") from None
        self._log.close()
        return code

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.ops_port, timeout=5)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    def ready(self) -> bool:
        try:
            return self.get("/readyz")[0] == 200
        except OSError:
            return False

    def metrics(self) -> str:
        return self.get("/metrics")[1]

    def push_event(self, repository: str, *, branch: str = "main", secret: str = WEBHOOK_SECRET,
                   signature: str | None = None) -> int:
        body = json.dumps({"ref": f"refs/heads/{branch}", "after": "0" * 40,
                           "repository": {"full_name": repository},
                           "pusher": {"name": "alice"}}).encode()
        sig = signature or "sha256=" + hmac.new(secret.encode(), body,
                                                hashlib.sha256).hexdigest()
        conn = http.client.HTTPConnection("127.0.0.1", self.webhook_port, timeout=5)
        try:
            conn.request("POST", "/webhook", body=body, headers={
                "X-GitHub-Event": "push", "X-Hub-Signature-256": sig,
                "Content-Type": "application/json"})
            return conn.getresponse().status
        finally:
            conn.close()


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The sample ``name{labels}`` of a Prometheus exposition (labels matched as a subset)."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        metric, _, label_text = head.partition("{")
        if metric != name:
            continue
        if all(f'{k}="{v}"' in label_text for k, v in labels.items()):
            return float(value)
    return None


def wait_port_ready(daemon: Daemon, timeout: float = 60) -> None:
    def ready() -> bool:
        if daemon.ready():
            return True
        if not daemon.alive():
            raise AssertionError(f"{daemon.name} exited:\n{daemon.log()[-3000:]}")
        return False

    wait_for(ready, timeout=timeout, what=f"{daemon.name} ready",
             observe=lambda: daemon.log()[-3000:], interval=0.1)
