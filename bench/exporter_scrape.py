#!/usr/bin/env python3
"""Benchmark of the MX Exporter stand-in (issue 18): one scrape of a whole fleet's telemetry
(8 GPUs a node, 8 metrics a GPU) from a synthetic fleet state: its size, the time to render it
cold (every node's text rendered), warm (nothing changed) and after 1 % of the nodes changed
(a rollout batch), and, with ``--prometheus``, a real Prometheus server's own
``scrape_duration_seconds`` and ``scrape_samples_scraped`` for the endpoint.

    bench/exporter_scrape.py [--nodes 10000] [--prometheus] [--interval 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import prometheus_client  # noqa: F401
except ImportError:  # run with the project's venv when started directly
    venv_python = ROOT / ".venv" / "bin" / "python"
    if venv_python.exists() and Path(sys.executable) != venv_python:
        os.execv(str(venv_python), [str(venv_python), *sys.argv])
    raise
sys.path.insert(0, str(ROOT))

from reconciler.sim.fleet import node_name  # noqa: E402
from reconciler.sim.mx_exporter import GpuUser, MxExporter, NodeTelemetry  # noqa: E402
from reconciler.sim.prometheus import PrometheusServer  # noqa: E402


def synthetic_fleet(nodes: int) -> list[NodeTelemetry]:
    """A fleet mid-rollout: a fifth of the nodes on the new driver, every tenth running a job."""
    width = max(4, len(str(nodes)))
    fleet = []
    for index in range(1, nodes + 1):
        name = node_name(index, width)
        users = tuple((d, GpuUser("gpu-workloads", f"train-{index}", "train"))
                      for d in range(8)) if index % 10 == 0 else ()
        fleet.append(NodeTelemetry(
            hostname=name, driver_version="2.33.0.9" if index % 5 == 0 else "2.31.0.6",
            bios_version="1.12.0.0", users=users,
            unavailable=frozenset({0, 1}) if index % 997 == 0 else frozenset(),
        ))
    return fleet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--prometheus", action="store_true",
                        help="also let a real Prometheus scrape the endpoint")
    parser.add_argument("--interval", type=float, default=15.0,
                        help="Prometheus scrape interval, seconds (with --prometheus)")
    args = parser.parse_args()
    state = synthetic_fleet(args.nodes)
    exporter = MxExporter(lambda: state)

    started = time.perf_counter()
    body = exporter.render()
    cold = time.perf_counter() - started
    warm = []
    for _ in range(args.passes):
        started = time.perf_counter()
        exporter.render()
        warm.append(time.perf_counter() - started)
    changed = []
    for round_ in range(args.passes):
        step = 100
        for i in range(round_, len(state), step):  # 1 % of the nodes change driver version
            state[i] = NodeTelemetry(state[i].hostname, f"2.40.0.{round_}", state[i].bios_version)
        started = time.perf_counter()
        exporter.render()
        changed.append(time.perf_counter() - started)
    samples = sum(1 for line in body.splitlines() if not line.startswith(b"#"))
    print(f"{args.nodes} nodes, {samples} samples, body {len(body) / 2**20:.1f} MiB "
          f"({len(body) / samples:.0f} bytes a sample)")
    print(f"render cold (every node rendered): {cold:.2f} s")
    print(f"render warm (nothing changed), median of {args.passes}: "
          f"{statistics.median(warm) * 1000:.0f} ms")
    print(f"render after 1 % of the nodes changed, median of {args.passes}: "
          f"{statistics.median(changed) * 1000:.0f} ms")

    if args.prometheus:
        exporter.start()
        try:
            started = time.perf_counter()
            with urllib.request.urlopen(exporter.url, timeout=120) as response:
                size = len(response.read())
            print(f"HTTP GET of {exporter.url}: {size / 2**20:.1f} MiB in "
                  f"{time.perf_counter() - started:.2f} s")
            with PrometheusServer([exporter.scrape_target()],
                                  scrape_interval=args.interval) as prometheus:
                deadline = time.monotonic() + 4 * args.interval + 60
                seen: list[str] = []  # the times of the scrapes reported
                while time.monotonic() < deadline and len(seen) < 3:
                    when = prometheus.query('timestamp(up{job="mx-exporter"})')
                    if when and when[0]["value"][1] not in seen:
                        seen.append(when[0]["value"][1])
                        up = prometheus.query('up{job="mx-exporter"}')[0]["value"][1]
                        duration = prometheus.query(
                            'scrape_duration_seconds{job="mx-exporter"}')[0]["value"][1]
                        count = prometheus.query(
                            'scrape_samples_scraped{job="mx-exporter"}')[0]["value"][1]
                        print(f"Prometheus scrape: up={up}, {count} samples, "
                              f"scrape_duration_seconds={float(duration):.2f} "
                              f"(interval {args.interval:g} s)")
                    time.sleep(1.0)
                nodes = prometheus.query('count(count by (Hostname) (mx_gpu_state))')
                print(f"nodes seen by Prometheus: {nodes[0]['value'][1] if nodes else 0}")
        finally:
            exporter.stop()


if __name__ == "__main__":
    main()
