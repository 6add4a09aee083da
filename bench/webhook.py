#!/usr/bin/env python3
"""Webhook receiver benchmark (issue 7, performance).

Figures:
1. bad-signature flood: requests/s sustained at a 200/s open-loop target on loopback, with
   latency percentiles, and that none of them triggered anything;
2. a control loop's tick lateness idle vs under the flood (stand-in for "an ongoing rollout is
   not affected": the rollout controller is a loop of this kind in the same process);
3. valid push -> trigger callback latency, idle and under the flood;
4. valid push -> fetch done and the new commit reported by the Git source (a real bare
   repository over file://; the ClusterOperator update after that is the daemon's, not
   measured here);
5. slow clients (issue 15): 200 connections from one address each sending a byte a second,
   how many are refused at once, how long the admitted ones are held (the request deadline),
   and valid pushes from another address meanwhile;
6. every forge (issue 33): a push delivery of GitHub, Gitea/Forgejo, GitLab, Bitbucket Server
   and Gitee, each with its own headers and proof of the secret -> trigger callback, p50 over
   --forge-pushes deliveries per forge (the apply behind it: bench/sync_latency.py).

Usage: bench/webhook.py [--seconds 10] [--rate 200] [--workers 8] [--slow 200] [--forge-pushes 15]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from forge_pushes import delivery  # bench/ is on sys.path: it is the script's folder

from reconciler.ops.http_server import ServerLimits
from reconciler.ops.metrics import Metrics
from reconciler.trust.forges import FORGES, Forge
from reconciler.trust.webhook import (
    PushEvent,
    WatchedBranch,
    WebhookReceiver,
    WebhookSecret,
    WebhookServer,
)

SECRET = b"bench-secret"
REPO = "https://github.com/example-org/gpu-fleet.git"


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def sign(body: bytes, secret: bytes = SECRET) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def push_body(after: str = "a" * 40) -> bytes:
    return json.dumps(
        {
            "ref": "refs/heads/main",
            "after": after,
            "repository": {
                "full_name": "example-org/gpu-fleet",
                "clone_url": REPO,
                "html_url": "https://github.com/example-org/gpu-fleet",
            },
            "pusher": {"name": "bench"},
            "commits": [{"id": after, "message": "x" * 200}] * 5,
        }
    ).encode()


def send(conn: http.client.HTTPConnection, body: bytes, signature: str) -> int:
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-Hub-Signature-256": signature,
    }
    return post(conn, body, headers)


def post(conn: http.client.HTTPConnection, body: bytes, headers: dict[str, str]) -> int:
    conn.request("POST", "/webhook", body=body, headers=headers)
    resp = conn.getresponse()
    resp.read()
    return resp.status


class Flood:
    """Open loop: request i is due at start + i/rate whatever the previous ones did."""

    def __init__(
        self, address: tuple[str, int], rate: float, seconds: float, workers: int, fresh: bool
    ):
        self.address, self.rate, self.seconds, self.workers = address, rate, seconds, workers
        self.fresh = fresh  # a new TCP connection per request, as a careless attacker would
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}
        self.late: list[float] = []
        self._next = 0
        self._lock = threading.Lock()
        self.elapsed = 0.0

    def _worker(self, start: float, total: int) -> None:
        conn = http.client.HTTPConnection(*self.address, timeout=10)
        body = push_body()
        bad = sign(body, b"forged")
        while True:
            with self._lock:
                i = self._next
                self._next += 1
            if i >= total:
                break
            due = start + i / self.rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            t0 = time.perf_counter()
            if self.fresh:
                conn.close()
                conn = http.client.HTTPConnection(*self.address, timeout=10)
            try:
                status = send(conn, body, bad)
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection(*self.address, timeout=10)
                status = -1
            t1 = time.perf_counter()
            with self._lock:
                self.latencies.append(t1 - t0)
                self.late.append(max(0.0, t0 - due))
                self.statuses[status] = self.statuses.get(status, 0) + 1
        conn.close()

    def run(self) -> None:
        total = int(self.rate * self.seconds)
        start = time.perf_counter() + 0.05
        threads = [
            threading.Thread(target=self._worker, args=(start, total), daemon=True)
            for _ in range(self.workers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.elapsed = time.perf_counter() - start


def tick_lateness(stop: threading.Event, period: float = 0.05) -> list[float]:
    """A control loop that wants to run every ``period``: how late is each tick?"""
    lateness: list[float] = []
    due = time.perf_counter() + period
    while not stop.is_set():
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        now = time.perf_counter()
        lateness.append(now - due)
        # a little work per tick, like computing a plan from a snapshot
        sum(i * i for i in range(2000))
        due += period
    return lateness


def measure_ticks(seconds: float) -> list[float]:
    stop = threading.Event()
    out: list[float] = []
    t = threading.Thread(target=lambda: out.extend(tick_lateness(stop)), daemon=True)
    t.start()
    time.sleep(seconds)
    stop.set()
    t.join()
    return out


def valid_push_latencies(
    address: tuple[str, int],
    fired: Callable[[], threading.Event],
    count: int,
    gap: float,
    source: str = "127.0.0.1",
    forge: Forge | None = None,
) -> list[float]:
    """Valid pushes -> the trigger: GitHub's as in the figures above, or ``forge``'s own
    delivery (each with a new id, so none is taken for a repeat)."""
    out: list[float] = []
    conn = http.client.HTTPConnection(*address, timeout=10, source_address=(source, 0))
    body = push_body()
    for i in range(count):
        if forge is None:
            request = body, {"Content-Type": "application/json", "X-GitHub-Event": "push",
                             "X-Hub-Signature-256": sign(body)}  # fmt: skip
        else:
            after = f"{i + 1:040x}"
            request = delivery(forge, SECRET, "example-org/gpu-fleet", after, f"bench-{i}")
        event = fired()
        t0 = time.perf_counter()
        status = post(conn, *request)
        if status != 202 or not event.wait(5):
            raise SystemExit(f"valid push not triggered (HTTP {status})")
        out.append(event.triggered_at - t0)  # type: ignore[attr-defined]
        time.sleep(gap)
    conn.close()
    return out


class SlowClients:
    """``count`` connections from ``source``, each sending a request a byte a second."""

    def __init__(self, address: tuple[str, int], count: int, source: str = "127.0.0.3"):
        self.address, self.count, self.source = address, count, source
        self.answers: dict[int, int] = {}  # status (0: closed without one) -> connections
        self.held: list[float] = []  # seconds from connect to the server's answer or close
        self.unanswered = 0  # still open when the bench gave up

    def run(self, give_up: float = 30.0) -> None:
        request = b"POST /webhook HTTP/1.1\r\nHost: bench\r\n" + b"X-Slow: " + b"s" * 100
        live: dict[socket.socket, tuple[float, int]] = {}
        for _ in range(self.count):
            s = socket.socket()
            s.bind((self.source, 0))
            s.connect(self.address)
            s.setblocking(False)
            live[s] = (time.perf_counter(), 0)
        end = time.perf_counter() + give_up
        next_byte = time.perf_counter()
        while live and time.perf_counter() < end:
            if time.perf_counter() >= next_byte:
                for s, (opened, sent) in list(live.items()):
                    try:
                        s.send(request[sent : sent + 1])
                        live[s] = (opened, sent + 1)
                    except OSError:
                        pass  # refused and closed: the answer is read below
                next_byte += 1.0
            wait = max(0.0, next_byte - time.perf_counter())
            readable, _, _ = select.select(list(live), [], [], wait)
            for s in readable:
                opened, _ = live.pop(s)
                self.held.append(time.perf_counter() - opened)
                try:
                    head = s.recv(64)
                except OSError:
                    head = b""
                status = int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else 0
                self.answers[status] = self.answers.get(status, 0) + 1
                s.close()
        self.unanswered = len(live)
        for s in live:
            s.close()


class TriggerProbe:
    def __init__(self) -> None:
        self.count = 0
        self._event = threading.Event()

    def arm(self) -> threading.Event:
        self._event = threading.Event()
        return self._event

    def __call__(self, event: PushEvent) -> None:
        self.count += 1
        self._event.triggered_at = time.perf_counter()  # type: ignore[attr-defined]
        self._event.set()


def git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@example.org",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "b@example.org"}  # fmt: skip
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def push_to_fetch(samples: int) -> tuple[list[float], str]:
    """Webhook POST -> CommitSource fetched and reported the new commit."""
    try:
        from reconciler.gitops.mirror import Mirror
        from reconciler.gitops.source import CommitSource, NewCommit
    except ImportError as e:  # the Git side is another component; say so rather than guess
        return [], f"not measured: {e}"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bare = root / "remote.git"
        git("init", "-q", "--bare", "-b", "main", str(bare))
        work = root / "work"
        git("clone", "-q", str(bare), str(work))
        (work / "f").write_text("0\n")
        git("add", "f", cwd=work)
        git("commit", "-q", "-m", "init", cwd=work)
        git("push", "-q", "origin", "HEAD:main", cwd=work)
        seen: dict[str, float] = {}
        arrived = threading.Condition()

        def on_commit(new: NewCommit) -> None:
            with arrived:
                seen[new.sha] = time.perf_counter()
                arrived.notify_all()

        mirror = Mirror(bare.as_uri(), root / "state")
        source = CommitSource(mirror, ["main"], on_commit, interval=3600)
        receiver = WebhookReceiver(
            WebhookSecret(SECRET), WatchedBranch("example-org/gpu-fleet", "main"),
            lambda e: source.trigger(),
        )  # fmt: skip
        latencies: list[float] = []
        with WebhookServer("127.0.0.1", 0, receiver) as srv:
            source.start()
            time.sleep(0.5)  # first look at the branch
            conn = http.client.HTTPConnection(*srv.address, timeout=10)
            for i in range(samples):
                (work / "f").write_text(f"{i + 1}\n")
                git("commit", "-q", "-am", f"change {i}", cwd=work)
                git("push", "-q", "origin", "HEAD:main", cwd=work)
                sha = git("rev-parse", "HEAD", cwd=work)
                body = push_body(sha)
                t0 = time.perf_counter()
                send(conn, body, sign(body))
                with arrived:
                    if not arrived.wait_for(partial(seen.__contains__, sha), timeout=10):
                        source.stop()
                        return latencies, f"commit {sha[:12]} not reported within 10 s"
                latencies.append(seen[sha] - t0)
            conn.close()
            source.stop()
        return latencies, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="flood duration")
    parser.add_argument("--rate", type=float, default=200.0, help="bad requests per second")
    parser.add_argument("--workers", type=int, default=8, help="client connections")
    parser.add_argument("--pushes", type=int, default=20, help="valid pushes per measurement")
    parser.add_argument("--slow", type=int, default=200, help="slow connections from one address")
    parser.add_argument("--forge-pushes", type=int, default=15, help="valid pushes per forge")
    parser.add_argument(
        "--new-connections", action="store_true", help="one TCP connection per bad request"
    )
    args = parser.parse_args()

    metrics = Metrics()
    probe = TriggerProbe()
    receiver = WebhookReceiver(
        WebhookSecret(SECRET), WatchedBranch(REPO, "main"), probe, metrics=metrics
    )
    rows: list[tuple[str, str, str, str]] = []
    with WebhookServer("127.0.0.1", 0, receiver) as srv:
        idle_ticks = measure_ticks(min(3.0, args.seconds))
        idle_push = valid_push_latencies(srv.address, probe.arm, args.pushes, 0.05)
        triggered_before = probe.count

        flood = Flood(srv.address, args.rate, args.seconds, args.workers, args.new_connections)
        stop = threading.Event()
        flood_ticks: list[float] = []
        ticker = threading.Thread(
            target=lambda: flood_ticks.extend(tick_lateness(stop)), daemon=True
        )
        flood_push: list[float] = []

        def pusher() -> None:
            time.sleep(0.5)
            n = max(1, min(args.pushes, int(args.seconds / 0.4) - 2))
            flood_push.extend(valid_push_latencies(srv.address, probe.arm, n, 0.3))

        pushing = threading.Thread(target=pusher, daemon=True)
        ticker.start()
        pushing.start()
        flood.run()
        stop.set()
        ticker.join()
        pushing.join()
        forged_triggers = probe.count - triggered_before - len(flood_push)

        slow = SlowClients(srv.address, args.slow)
        slowing = threading.Thread(target=slow.run, daemon=True)
        slowing.start()
        time.sleep(1.5)  # every slow connection is open and has sent a byte or two
        slow_push = valid_push_latencies(srv.address, probe.arm, args.pushes, 0.2, "127.0.0.2")
        slowing.join()
        by_forge = {
            f.name: valid_push_latencies(srv.address, probe.arm, args.forge_pushes, 0.05, forge=f)
            for f in FORGES
        }

    achieved = len(flood.latencies) / flood.elapsed
    ok401 = flood.statuses.get(401, 0)
    rows.append(("bad-signature rate sustained (req/s)", f">= {args.rate:.0f}",
                 f"{achieved:.1f}", f"{achieved / args.rate:.2f}"))  # fmt: skip
    rows.append(("  answered 401", f"= {len(flood.latencies)}", f"{ok401}",
                 f"{ok401 / max(1, len(flood.latencies)):.2f}"))  # fmt: skip
    rows.append(("  triggers caused by forged requests", "0", f"{forged_triggers}",
                 "ok" if forged_triggers == 0 else "FAIL"))  # fmt: skip
    for p in (50, 95, 99):
        v = pct(flood.latencies, p) * 1000
        rows.append((f"  401 latency p{p} (ms)", "-", f"{v:.2f}", "-"))
    rows.append(("  requests started late > 50 ms", "0",
                 f"{sum(1 for x in flood.late if x > 0.05)}", "-"))  # fmt: skip
    for label, ticks in (("idle", idle_ticks), ("under flood", flood_ticks)):
        v = pct(ticks, 99) * 1000
        rows.append((f"control-loop tick lateness p99, {label} (ms)", "< 50", f"{v:.2f}",
                     f"{v / 50:.2f}"))  # fmt: skip
    for label, lat in (("idle", idle_push), ("under flood", flood_push)):
        v = statistics.median(lat) * 1000
        rows.append((f"valid push -> trigger p50, {label} (ms)", "< 1000", f"{v:.2f}",
                     f"{v / 1000:.4f}"))  # fmt: skip
        rows.append((f"valid push -> trigger max, {label} (ms)", "-",
                     f"{max(lat) * 1000:.2f}", "-"))  # fmt: skip
    limits = ServerLimits()
    admitted = min(args.slow, limits.max_connections_per_client)
    refused = slow.answers.get(429, 0)
    cut = slow.answers.get(408, 0)
    rows.append((f"slow connections refused with 429 at once (of {args.slow})",
                 f"{args.slow - admitted}", f"{refused}", "ok" if refused == args.slow - admitted
                 else "FAIL"))  # fmt: skip
    rows.append(("slow connections admitted, then cut with 408", f"{admitted}", f"{cut}",
                 "ok" if cut == admitted else "FAIL"))  # fmt: skip
    longest = max(slow.held, default=0.0)
    goal = limits.request_deadline + limits.write_grace
    rows.append(("  longest a slow connection was held (s)", f"<= {goal:.0f}", f"{longest:.1f}",
                 f"{longest / goal:.2f}"))  # fmt: skip
    v = statistics.median(slow_push) * 1000
    rows.append(("valid push from another address -> trigger p50, slow clients held (ms)",
                 "< 1000", f"{v:.2f}", f"{v / 1000:.4f}"))  # fmt: skip
    rows.append(("valid push from another address -> trigger max, slow clients held (ms)", "-",
                 f"{max(slow_push) * 1000:.2f}", "-"))  # fmt: skip
    for name, lat in by_forge.items():
        v = statistics.median(lat) * 1000
        rows.append((f"{name} push -> trigger p50, {len(lat)} deliveries (ms)", "< 1000",
                     f"{v:.2f} (max {max(lat) * 1000:.2f})", f"{v / 1000:.4f}"))  # fmt: skip
    fetch, note = push_to_fetch(min(args.pushes, 10))
    if fetch:
        v = statistics.median(fetch) * 1000
        rows.append(("webhook -> fetch done, commit reported p50 (ms)", "< 1000", f"{v:.1f}",
                     f"{v / 1000:.3f}"))  # fmt: skip
        rows.append(("webhook -> fetch done, commit reported max (ms)", "-",
                     f"{max(fetch) * 1000:.1f}", "-"))  # fmt: skip
    if note:
        rows.append(("webhook -> fetch done", "< 1000", note, "-"))

    widths = [max(len(r[i]) for r in [("figure", "goal", "measured", "ratio"), *rows])
              for i in range(4)]  # fmt: skip
    header = ("figure", "goal", "measured", "ratio")
    print(f"webhook benchmark: {args.seconds:.0f} s flood at {args.rate:.0f}/s, "
          f"{args.workers} clients, "
          f"{'a new connection per request' if args.new_connections else 'keep-alive'}, "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    for row in (header, tuple("-" * w for w in widths), *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    failed = (
        achieved < 0.95 * args.rate
        or forged_triggers != 0
        or ok401 != len(flood.latencies)
        or refused != args.slow - admitted
        or cut != admitted
        or longest > goal
        or slow.unanswered > 0
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
