"""One replica for the two-replica leader election test: a real process, killed for real.

It runs the elector against the API server and, while ``is_leader``, "acts" every 50 ms by
appending ``identity start end`` (wall-clock seconds) to the shared action log: each line says
"this replica was acting from start to end". The test checks that no two replicas' intervals
overlap. The end is stamped after re-checking ``is_leader``, so an interval never claims time
when the replica was not leader.

Usage: python leader_replica.py KUBECONFIG NAMESPACE IDENTITY ACTION_LOG
"""

from __future__ import annotations

import os
import sys
import threading
import time

from kubernetes import config

from reconciler.ops.leader import ElectionConfig, KubernetesLeaseClient, LeaderElector
from reconciler.ops.shutdown import Shutdown

LEASE, RENEW, RETRY = 3.0, 2.0, 0.5


def main() -> int:
    kubeconfig, namespace, identity, action_log = sys.argv[1:5]
    shutdown = Shutdown()
    shutdown.install()
    api = config.new_client_from_config(kubeconfig)
    elector = LeaderElector(
        KubernetesLeaseClient(api, request_timeout=1.0),
        ElectionConfig(namespace, "gpu-reconciler", identity, LEASE, RENEW, RETRY),
        on_started_leading=lambda: print("started", flush=True),
        on_stopped_leading=lambda: print("stopped", flush=True),
    )
    elector.start()
    shutdown.on_shutdown("leader", elector.stop)
    print("running", flush=True)
    fd = os.open(action_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    lock = threading.Lock()
    while not shutdown.wait(0.05):
        with lock:
            if not elector.is_leader:
                continue
            start = time.time()
            time.sleep(0.02)  # the action
            if elector.is_leader:
                os.write(fd, f"{identity} {start:.6f} {time.time():.6f}\n".encode())
    shutdown.run_steps()
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
