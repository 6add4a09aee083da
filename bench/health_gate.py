#!/usr/bin/env python3
"""GPU health gates' cost on the real control plane with a real Prometheus (issue 18).

Starts `reconciler dev-cluster up --prometheus` (control plane, fleet, its MX Exporter stand-in
and a Prometheus server scraping it) with N nodes and a fixed install time, then runs two
rollouts with the rollout controller in this process, the policy of
bench/controller_rollout.py: first without health checks (old -> NEW), then with a node check
and a step check (NEW -> NEXT). Reports:

- Prometheus queries per in-flight node per check interval (`health.interval`): the most
  queries any one node check (one node, one check) got within one interval (goal <= 1);
- the rollout's wall time over the theoretical minimum, without and with the checks, and the
  growth: with - without (goal: at most the checks' own delays, waves x (scrape interval +
  check interval) + steps x (step check `for` + check interval): a node's check can pass
  only once Prometheus scraped its new driver's samples and the next query came, a step's
  checks only after holding `for`).

Usage: bench/health_gate.py [--nodes 2000] [--install-seconds 20] [--interval 2]
                            [--for 5] [--json]
"""

from __future__ import annotations

import bisect
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from controller_rollout import NEW, POLICY, command_line, theoretical_minimum

from reconciler.config.document import load
from reconciler.config.settings import resolve
from reconciler.controller.act import Target
from reconciler.controller.health import HealthFeeder
from reconciler.controller.loop import RolloutController, prefer_responsiveness
from reconciler.health.checks import Reading
from reconciler.health.prometheus import PrometheusClient
from reconciler.kube.api import KubeApi
from reconciler.kube.objects import cluster_operator_path
from reconciler.names import CLUSTER_OPERATOR_NAME
from reconciler.policy.upgrade_policy import UpgradePolicy
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.children import die_with_parent

NEXT = "2.34.0.1"
ANNOUNCED = re.compile(r"prometheus (?P<url>http://\S+) .* every (?P<interval>[\d.]+) s")


def health_section(url: str, interval: float, hold: float) -> str:
    return yaml.safe_dump({"health": {
        "prometheus": {"url": url, "timeout": "5s"},
        "interval": f"{interval:g}s",
        "nodeChecks": [{
            "name": "gpus-available",
            # the new driver's samples only: the old pod's last scrape never passes it
            "query": 'min(mx_gpu_state{Hostname="{{node}}", driver_version="{{version}}"})',
            "expect": "== 1", "within": "10m"}],
        "stepChecks": [{
            "name": "no-throttling",
            "query": 'max(mx_clk_thr{Hostname=~"{{nodes}}"}) or vector(0)',
            "expect": "== 0", "for": f"{hold:g}s"}],
    }})


class CountedQueries:
    """The feeder's clock and query function: each query with the feeder's ``now`` when it
    decided to send it (the instant its once-per-interval rule compares)."""

    def __init__(self, url: str, timeout: float) -> None:
        self.client = PrometheusClient(url, timeout=timeout)
        self.sent: dict[str, list[float]] = {}
        self._now = 0.0
        self._lock = threading.Lock()

    def clock(self) -> float:
        self._now = time.time()
        return self._now

    def query(self, expr: str) -> Reading:
        with self._lock:
            self.sent.setdefault(expr, []).append(self._now)
        return self.client.query(expr)

    def most_in_one_interval(self, interval: float, *, node_checks: bool) -> int:
        """The most queries one check of one node (or of a step) got within any window of
        one interval."""
        worst = 0
        for expr, times in self.sent.items():
            if ('Hostname="' in expr) != node_checks:
                continue
            ordered = sorted(times)
            for i, start in enumerate(ordered):
                # [start, start + interval): an answer is reused for a whole interval
                count = bisect.bisect_left(ordered, start + interval - 1e-6) - i
                worst = max(worst, count)
        return worst

    def count(self, *, node_checks: bool) -> tuple[int, int]:
        """(queries, distinct node checks or step checks queried)."""
        keys = [k for k in self.sent if ('Hostname="' in k) == node_checks]
        return sum(len(self.sent[k]) for k in keys), len(keys)


def rollout(api: KubeApi, version: str, timeout: float = 3600) -> float:
    """Seconds from the merged change to the status saying Completed for ``version``."""
    path = cluster_operator_path(CLUSTER_OPERATOR_NAME)
    started = time.time()
    api.patch(path, {"spec": {"driver": {"payload": {"version": version},
                                         "upgradePolicy": POLICY}}})
    while True:
        status = (api.get(path).get("status") or {}).get("upgradeStatus") or {}
        inner = status.get("status") or {}
        applied = ((status.get("lastAppliedSpec") or {}).get("payload") or {}).get("version")
        if applied == version and status.get("phase") == "Idling" \
                and inner.get("currentStepState") == "Completed":
            return time.time() - started
        if status.get("phase") == "Idling" and any(
                c.get("type") in ("BatchFailed", "RolledBack") and c.get("status") == "True"
                for c in status.get("condition") or ()):
            raise RuntimeError(f"the rollout to {version} failed: {status.get('condition')}")
        if time.time() - started > timeout:
            raise RuntimeError(f"the rollout to {version} did not complete in {timeout:.0f} s")
        time.sleep(0.2)


def controller(api: KubeApi, feeder: HealthFeeder | None) -> RolloutController:
    ctl = RolloutController(api, Target(cluster_operator=CLUSTER_OPERATOR_NAME),
                            settings=PlannerSettings(ready_timeout=600), health=feeder).start()
    ctl.wait_synced(120)
    while not (api.get(cluster_operator_path(CLUSTER_OPERATOR_NAME)).get("status") or {}):
        time.sleep(0.1)
    return ctl


def main() -> int:
    parser = command_line(__doc__)
    parser.add_argument("--interval", type=float, default=2.0,
                        help="health.interval, seconds (default 2)")
    parser.add_argument("--for", dest="hold", type=float, default=5.0,
                        help="the step check's `for`, seconds (default 5)")
    args = parser.parse_args()

    state = Path(tempfile.mkdtemp(prefix="bench-health-"))
    err_path = state / "dev-cluster.err"
    cluster = subprocess.Popen(
        [sys.executable, "-m", "reconciler.cli.main", "dev-cluster", "up", "--nodes",
         str(args.nodes), "--install-seconds", str(args.install_seconds), "--dir",
         str(state / "dev"), "--timeout", "900", "--prometheus"],
        stdout=subprocess.PIPE, stderr=open(err_path, "wb"),  # noqa: SIM115
        start_new_session=True, text=True, preexec_fn=die_with_parent,
    )
    try:
        assert cluster.stdout is not None
        kubeconfig = cluster.stdout.readline().strip()
        announced = ANNOUNCED.search(err_path.read_text())
        if not kubeconfig or announced is None:
            print(f"dev-cluster failed; see {err_path}", file=sys.stderr)
            return 1
        url, scrape = announced["url"], float(announced["interval"])
        prefer_responsiveness()
        api = KubeApi.from_kubeconfig(kubeconfig, pool_size=64)

        plain = controller(api, None)
        try:
            without = rollout(api, NEW)
        finally:
            plain.stop()

        section = resolve(load(health_section(url, args.interval, args.hold)), None,
                          source="bench").health
        assert section.config is not None, section.error
        counted = CountedQueries(url, section.config.timeout)
        feeder = HealthFeeder(section, clock=counted.clock, query=counted.query)
        gated = controller(api, feeder)
        try:
            with_checks = rollout(api, NEXT)
        finally:
            gated.stop()
    finally:
        os.killpg(cluster.pid, signal.SIGINT)
        try:
            cluster.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(cluster.pid, signal.SIGKILL)
            cluster.wait(10)

    minimum = theoretical_minimum(args.nodes, args.install_seconds)
    waves = round(minimum / args.install_seconds)
    policy = UpgradePolicy.from_spec(POLICY)
    targets = policy.step_targets(args.nodes)
    steps = sum(1 for i, t in enumerate(targets) if t > (targets[i - 1] if i else 0))
    budget = waves * (scrape + args.interval) + steps * (args.hold + args.interval)
    growth = with_checks - without
    per_node = counted.most_in_one_interval(args.interval, node_checks=True)
    per_step = counted.most_in_one_interval(args.interval, node_checks=False)
    node_queries, checked_nodes = counted.count(node_checks=True)
    step_queries, _ = counted.count(node_checks=False)
    result: dict[str, Any] = {
        "nodes": args.nodes, "install_seconds": args.install_seconds,
        "check_interval_seconds": args.interval, "scrape_interval_seconds": scrape,
        "step_check_for_seconds": args.hold, "theoretical_minimum_seconds": minimum,
        "waves": waves, "steps": steps,
        "wall_without_checks_seconds": round(without, 2),
        "wall_with_checks_seconds": round(with_checks, 2),
        "over_minimum_without_seconds": round(without - minimum, 2),
        "over_minimum_with_seconds": round(with_checks - minimum, 2),
        "growth_seconds": round(growth, 2), "growth_budget_seconds": round(budget, 2),
        "most_queries_per_node_check_per_interval": per_node,
        "most_queries_per_step_check_per_interval": per_step,
        "node_check_queries": node_queries, "nodes_checked": checked_nodes,
        "node_check_queries_per_node": round(node_queries / max(checked_nodes, 1), 2),
        "step_check_queries": step_queries,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    rows = [
        # the measured cell starts with the figure the goal bounds (bench/run reads it)
        (f"queries per in-flight node per {args.interval:g} s interval", "<= 1",
         f"{per_node} ({node_queries} for {checked_nodes} nodes, "
         f"{node_queries / max(checked_nodes, 1):.2f} each)", f"{per_node / 1:.3f}"),
        (f"queries per step check per {args.interval:g} s interval", "<= 1",
         f"{per_step} ({step_queries} in all)", f"{per_step / 1:.3f}"),
        ("wall over minimum without checks", "-",
         f"{without - minimum:.1f} s ({without:.1f} s / {minimum:.0f} s)", "-"),
        ("wall over minimum with checks", "-",
         f"{with_checks - minimum:.1f} s ({with_checks:.1f} s / {minimum:.0f} s)", "-"),
        ("growth with checks (checks' delays)", f"<= {budget:.1f} s",
         f"{growth:.1f} s ({waves} waves x ({scrape:g} s scrape + {args.interval:g} s "
         f"interval) + {steps} steps x ({args.hold:g} s for + {args.interval:g} s))",
         f"{growth / budget:.3f}" if budget else "-"),
    ]
    header = ("figure", "goal", "measured", "ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    for row in [header, *rows]:  # two spaces between cells: bench/run splits there
        print("  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[3]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
