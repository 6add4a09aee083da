#!/usr/bin/env python3
"""Admission webhook benchmark (issue 17): does a review answer within the API server's timeout
(5 s in deploy/admission-webhook.yaml) when many arrive at once?

The server runs in a child process, as in the daemon (its own interpreter, so the clients here
do not share its GIL); 50 clients (``--clients``) each keep one HTTPS connection, as the API
server does, and send reviews back to back. The reviews are UPDATEs of the installed
ClusterOperator (the whole object the vendor's chart 0.15.2 installs, docs/dev-cluster.md: every
section, Helm metadata, managedFields), half of them a valid change while idle and half a locked
change during a rollout (denied), so both answers are measured. Figures: latency percentiles per
review, reviews/s, the server's CPU seconds.

Usage: bench/admission.py [--clients 50] [--reviews 40] [--big]
       (--big: annotations that make each object 1 MiB, near etcd's limit)
"""

from __future__ import annotations

import argparse
import copy
import datetime
import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
venv_python = ROOT / ".venv" / "bin" / "python"
if venv_python.exists() and Path(sys.executable) != venv_python and "VIRTUAL_ENV" not in os.environ:
    os.execv(str(venv_python), [str(venv_python), *sys.argv])
sys.path.insert(0, str(ROOT))

from reconciler.admission.certificates import (  # noqa: E402
    issue_ca,
    issue_serving,
    write_cert_dir,
)
from reconciler.admission.server import PATH  # noqa: E402
from reconciler.policy.payload import Payload  # noqa: E402
from reconciler.sim.control_plane import cpu_seconds  # noqa: E402
from reconciler.sim.operator_install import cluster_operator  # noqa: E402

SERVER = """
import sys
from pathlib import Path
from reconciler.admission.server import AdmissionServer, CertificateSource
server = AdmissionServer("127.0.0.1", 0, CertificateSource(Path(sys.argv[1]))).start()
print(server.port, flush=True)
sys.stdin.read()
server.stop()
"""


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def reviews(big: bool) -> list[bytes]:
    stored = cluster_operator(Payload("registry.example.com/metax", "driver-image", "2.29.0.13"))
    stored["metadata"].update({
        "uid": "8d1a3c6e-0000-4000-8000-000000000001", "resourceVersion": "48213",
        "generation": 7, "creationTimestamp": "2026-12-01T09:00:00Z",
        "managedFields": [{"manager": m, "operation": "Apply", "apiVersion":
                           "gpu.metax-tech.com/v1alpha1", "fieldsType": "FieldsV1",
                           "fieldsV1": {"f:spec": {"f:driver": {"f:payload": {}}}}}
                          for m in ("helm", "gpu-gitops-reconciler", "gpu-rollout-controller")],
    })
    if big:
        stored["metadata"]["annotations"]["bench/filler"] = "x" * (1024 * 1024)
    out = []
    for index, phase in enumerate(("Idling", "Progressing") * 2):
        old = copy.deepcopy(stored)
        old["status"] = {"upgradeStatus": {"phase": phase, "upgrading": phase != "Idling"}}
        new = copy.deepcopy(old)
        new["spec"]["driver"]["upgradePolicy"]["maxParallel"] = 2 + index
        out.append(json.dumps({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": f"bench-{index}", "operation": "UPDATE",
                        "resource": {"group": "gpu.metax-tech.com", "version": "v1alpha1",
                                     "resource": "clusteroperators"},
                        "name": "cluster-operator", "object": new, "oldObject": old},
        }).encode())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--reviews", type=int, default=40, help="reviews per client")
    parser.add_argument("--big", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-admission-") as tmp:
        now = datetime.datetime.now(datetime.UTC)
        ca = issue_ca("bench CA", now=now)
        write_cert_dir(Path(tmp), issue_serving(ca, ["127.0.0.1"], now=now))
        child = subprocess.Popen([sys.executable, "-c", SERVER, tmp], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert child.stdout is not None and child.stdin is not None
        port = int(child.stdout.readline())
        bodies = reviews(args.big)
        context = ssl.create_default_context(cadata=ca.cert_pem.decode())
        latencies: list[float] = []
        outcomes = {"allowed": 0, "denied": 0, "failed": 0}
        lock = threading.Lock()
        start = threading.Barrier(args.clients + 1)

        def client(number: int) -> None:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
            conn.connect()
            start.wait()
            for i in range(args.reviews):
                body = bodies[(number + i) % len(bodies)]
                began = time.perf_counter()
                try:
                    conn.request("POST", PATH, body=body,
                                 headers={"Content-Type": "application/json"})
                    response = conn.getresponse()
                    answer = json.loads(response.read())
                    took = time.perf_counter() - began
                    kind = "allowed" if answer["response"]["allowed"] else "denied"
                except (OSError, http.client.HTTPException, ValueError, KeyError):
                    took, kind = time.perf_counter() - began, "failed"
                    conn.close()
                    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context,
                                                       timeout=30)
                with lock:
                    latencies.append(took)
                    outcomes[kind] += 1
            conn.close()

        threads = [threading.Thread(target=client, args=(n,)) for n in range(args.clients)]
        for thread in threads:
            thread.start()
        cpu_before = cpu_seconds(child.pid)
        start.wait()
        began = time.perf_counter()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - began
        cpu = cpu_seconds(child.pid) - cpu_before
        child.stdin.close()
        child.wait(30)

    size = len(bodies[0]) / 1024
    print(f"{args.clients} concurrent clients x {args.reviews} reviews, {size:.0f} KiB each "
          f"(UPDATE of the installed object, chart 0.15.2)")
    print(f"  answers: {outcomes['allowed']} allowed, {outcomes['denied']} denied, "
          f"{outcomes['failed']} failed")
    print(f"  latency ms: p50 {pct(latencies, 50) * 1000:.1f}  p90 {pct(latencies, 90) * 1000:.1f}"
          f"  p99 {pct(latencies, 99) * 1000:.1f}  max {max(latencies) * 1000:.1f}"
          f"  mean {statistics.mean(latencies) * 1000:.1f}")
    print(f"  throughput: {len(latencies) / wall:.0f} reviews/s; server CPU {cpu:.1f} s "
          f"({cpu / len(latencies) * 1000:.1f} ms per review)")


if __name__ == "__main__":
    main()
