#!/usr/bin/env python3
"""Merge-to-apply latency and status commits per rollout (issue 6's performance figures).

Starts a real control plane and a simulated fleet, then measures with the sync role in this
process:

- local watch: ``git commit`` in a working copy -> the ``ClusterOperator`` carries the commit
  (watchdog on the refs, no fetch interval involved); goal p50 < 1 s;
- remote + immediate trigger: ``git push`` to a ``git daemon`` on loopback, then ``trigger()``
  (what the webhook receiver calls) -> applied; goal p50 < 1 s;
- remote + signed webhook: the same through the real webhook receiver over HTTP (GitHub's
  headers), and then through each other forge's own (Gitea/Forgejo, GitLab, Bitbucket Server,
  Gitee: issue 33), --samples merges each;
- a real Gitea (when scripts/install-gitea built one): ``git push`` over its HTTP, its own push
  webhook delivery to the receiver -> applied, --samples merges;
- status commits in one rollout of 3 steps with pauses (10 nodes, builtin controller);
  goal <= 3 x steps + 3.

Each change alternates a label in the policy file's metadata, so no rollout starts.

Usage: bench/sync_latency.py [--samples 15] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forge_pushes import delivery  # bench/ is on sys.path: it is the script's folder

from reconciler.controller.act import Target
from reconciler.controller.loop import RolloutController
from reconciler.kube.api import KubeApi
from reconciler.kube.objects import cluster_operator_path
from reconciler.kube.watch import ListWatch
from reconciler.names import CLUSTER_OPERATOR_NAME, SOURCE_COMMIT_ANNOTATION
from reconciler.policy.payload import Payload
from reconciler.rollout.model import PlannerSettings
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sync.loop import ClusterSync
from reconciler.trust.forges import FORGES, Forge
from reconciler.trust.webhook import (
    PushEvent,
    WatchedBranch,
    WebhookReceiver,
    WebhookSecret,
    WebhookServer,
)
from tests.gitops.gitea import Gitea, GiteaNotFound, gitea_home

REGISTRY = "cr.metax-tech.com/public-library"
OLD, NEW = "2.32.0.6", "2.33.0.9"
POLICY_PATH = "clusters/bench/cluster-operator.yaml"
STEPS = 3
#: the forges measured beside GitHub's webhook (its figure is "push + webhook")
FORGE_NAMES = ("gitea", "gitlab", "bitbucket-server", "gitee")


def policy(version: str = OLD, *, label: str = "0", rollout: bool = False) -> str:
    # pauses longer than the status interval (5 s), so each paused step is a state of its own
    steps = ('[{replicas: 2, pauseDuration: 6000}, {replicas: "50%", pauseDuration: 6000}, '
             '{replicas: "100%", pauseDuration: 0}]')
    return f"""\
apiVersion: gpu.metax-tech.com/v1alpha1
kind: ClusterOperator
metadata:
  name: cluster-operator
  labels:
    bench/sample: "{label}"
spec:
  driver:
    payload: {{name: driver-image, registry: {REGISTRY}, version: {version}}}
    upgradePolicy:
      enableRollout: {str(rollout).lower()}
      upgradeSteps: {steps}
      maxParallel: "100%"
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


class Applied:
    """Watches the ClusterOperator's source-commit annotation; records when each one appears."""

    def __init__(self, api: KubeApi) -> None:
        self.seen: dict[str, float] = {}
        self.watch = ListWatch(api, cluster_operator_path(), on_event=self._on_event,
                               query={"fieldSelector": f"metadata.name={CLUSTER_OPERATOR_NAME}"})
        self.watch.start()
        self.watch.wait_synced(30)

    def _on_event(self, event: str, obj: dict[str, object]) -> None:
        meta = obj.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        sha = annotations.get(SOURCE_COMMIT_ANNOTATION) if isinstance(annotations, dict) else None
        if isinstance(sha, str):
            self.seen.setdefault(sha, time.monotonic())

    def wait(self, sha: str, timeout: float = 30) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sha in self.seen:
                return self.seen[sha]
            time.sleep(0.002)
        raise TimeoutError(f"{sha[:12]} not applied within {timeout} s")


def measure(samples: int, change: Callable[[int], tuple[str, float]],
            applied: Applied) -> list[float]:
    out = []
    for i in range(samples):
        sha, started = change(i)
        out.append(applied.wait(sha) - started)
        time.sleep(0.2)
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def gitea_pushes(api: KubeApi, applied: Applied, work: Path,
                 samples: int) -> dict[str, list[float]] | None:
    """Merge-to-apply through a real Gitea: a push over its HTTP with a token, its own push
    webhook (X-Gitea-Signature) to the receiver, the fetch from it, the apply (``apply``);
    from the push's start ``push`` until ``git push`` returns and ``delivery`` until the webhook
    arrives; ``ours`` from the webhook's arrival to the apply. None without a Gitea build."""
    try:
        gitea_home()
    except GiteaNotFound:
        return None
    server = Gitea(work / "gitea").start()
    sync: ClusterSync | None = None
    webhook: WebhookServer | None = None
    try:
        server.create_repository("bench", "policy")
        url = server.clone_url("bench", "policy")
        clone = work / "gitea-clone"
        git(work, "clone", "-q", url, str(clone))
        (clone / POLICY_PATH).parent.mkdir(parents=True)
        (clone / POLICY_PATH).write_text(policy(NEW, label="gitea-seed"))
        git(clone, "add", "-A")
        git(clone, "commit", "-q", "-m", "seed")
        git(clone, "push", "-q", "origin", "HEAD:main")
        sync = ClusterSync(api, url, cluster="bench", state_dir=work / "state-gitea",
                           fetch_interval=3600).start()
        applied.wait(git(clone, "rev-parse", "HEAD"), timeout=60)
        target = sync
        delivered: dict[str, float] = {}

        def trigger(event: PushEvent) -> None:
            delivered.setdefault(event.after, event.received_monotonic)
            target.trigger()

        receiver = WebhookReceiver(secret=WebhookSecret(b"bench-secret"),
                                   watched=WatchedBranch("bench/policy", "main"),
                                   trigger=trigger)
        webhook = WebhookServer("127.0.0.1", free_port(), receiver)
        webhook.start()
        server.add_push_webhook("bench", "policy",
                                f"http://{webhook.address[0]}:{webhook.address[1]}/webhook",
                                "bench-secret")

        starts: dict[str, float] = {}
        pushed: list[float] = []

        def change(i: int) -> tuple[str, float]:
            git(clone, "pull", "-q", "--rebase", "origin", "main")
            (clone / POLICY_PATH).write_text(policy(NEW, label=f"gitea-{i}"))
            git(clone, "commit", "-q", "-am", f"gitea sample {i}")
            for _ in range(5):
                sha = git(clone, "rev-parse", "HEAD")
                started = time.monotonic()
                push = subprocess.run(["git", "push", "-q", "origin", "HEAD:main"], cwd=clone,
                                      capture_output=True, text=True)
                if push.returncode == 0:
                    pushed.append(time.monotonic() - started)
                    starts[sha] = started
                    return sha, started
                # a status commit of the sync's came first: rebase, as a person does
                git(clone, "pull", "-q", "--rebase", "origin", "main")
            raise RuntimeError(f"git push to Gitea refused: {push.stderr.strip()}")

        applies = measure(samples, change, applied)
        # (a sample whose delivery went unseen is left out of the last two)
        parts = [(delivered[sha] - started, apply) for (sha, started), apply
                 in zip(starts.items(), applies, strict=True) if sha in delivered]
        return {"apply": applies, "push": pushed, "delivery": [d for d, _ in parts],
                "ours": [apply - d for d, apply in parts]}
    finally:
        if webhook is not None:
            webhook.stop()
        if sync is not None:
            sync.stop()
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-sync-"))
    env_config = work / "gitconfig"
    env_config.write_text("[user]\n\tname = Bench Person\n\temail = bench@example.com\n"
                          "[init]\n\tdefaultBranch = main\n")
    os.environ["GIT_CONFIG_GLOBAL"] = str(env_config)
    os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
    plane = ControlPlane().start()
    results: dict[str, object] = {}
    try:
        api = plane.api(pool_size=40)
        fleet = Fleet(api, nodes=10, install_seconds=0.2,
                      payload=Payload(registry=REGISTRY, name="driver-image", version=OLD)).start()
        applied = Applied(api)

        # -- local working copy, watched ------------------------------------------------------
        local = work / "local"
        local.mkdir()
        git(local, "init", "-q")
        (local / "clusters/bench").mkdir(parents=True)
        (local / POLICY_PATH).write_text(policy())
        git(local, "add", "-A")
        git(local, "commit", "-q", "-m", "seed")
        sync = ClusterSync(api, str(local), cluster="bench", state_dir=work / "state-local",
                           fetch_interval=3600).start()
        applied.wait(git(local, "rev-parse", "HEAD"))

        def local_change(i: int) -> tuple[str, float]:
            (local / POLICY_PATH).write_text(policy(label=f"local-{i}"))
            git(local, "add", "-A")
            started = time.monotonic()
            git(local, "commit", "-q", "-m", f"sample {i}")
            return git(local, "rev-parse", "HEAD"), started

        watch = measure(args.samples, local_change, applied)
        sync.stop()

        # -- remote over git daemon: push, then trigger / webhook -----------------------------
        server_root = work / "server"
        server_root.mkdir()
        bare = server_root / "policy.git"
        git(server_root, "init", "-q", "--bare", str(bare))
        git(local, "push", "-q", str(bare), "HEAD:main")
        port = free_port()
        daemon = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack",
             f"--base-path={server_root}", "--listen=127.0.0.1", f"--port={port}",
             str(server_root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        url = f"git://127.0.0.1:{port}/policy.git"
        clone = work / "clone"
        git(work, "clone", "-q", url, str(clone))
        sync = ClusterSync(api, url, cluster="bench", state_dir=work / "state-remote",
                           fetch_interval=3600).start()
        applied.wait(git(clone, "rev-parse", "HEAD"))
        secret = WebhookSecret(b"bench-secret")
        receiver = WebhookReceiver(secret=secret, watched=WatchedBranch("bench/policy", "main"),
                                   trigger=lambda event: sync.trigger())
        webhook = WebhookServer("127.0.0.1", free_port(), receiver)
        webhook.start()

        def push(i: int, how: str) -> tuple[str, float]:
            git(clone, "pull", "-q", "--rebase", "origin", "main")
            (clone / POLICY_PATH).write_text(policy(label=f"{how}-{i}"))
            git(clone, "commit", "-q", "-am", f"{how} sample {i}")
            started = time.monotonic()
            git(clone, "push", "-q", "origin", "HEAD:main")
            return git(clone, "rev-parse", "HEAD"), started

        def trigger_change(i: int) -> tuple[str, float]:
            sha, started = push(i, "trigger")
            sync.trigger()
            return sha, started

        def webhook_change(i: int) -> tuple[str, float]:
            sha, started = push(i, "webhook")
            body = json.dumps({"ref": "refs/heads/main", "after": sha,
                               "repository": {"full_name": "bench/policy"}}).encode()
            signature = "sha256=" + hmac.new(b"bench-secret", body, hashlib.sha256).hexdigest()
            conn = http.client.HTTPConnection(*webhook.address, timeout=5)
            conn.request("POST", "/webhook", body=body, headers={
                "X-GitHub-Event": "push", "X-Hub-Signature-256": signature})
            conn.getresponse().read()
            conn.close()
            return sha, started

        def forge_change(forge: Forge, i: int) -> tuple[str, float]:
            sha, started = push(i, forge.name)
            body, headers = delivery(forge, b"bench-secret", "bench/policy", sha, f"{sha}-{i}")
            conn = http.client.HTTPConnection(*webhook.address, timeout=5)
            conn.request("POST", "/webhook", body=body, headers=headers)
            conn.getresponse().read()
            conn.close()
            return sha, started

        triggered = measure(args.samples, trigger_change, applied)
        hooked = measure(args.samples, webhook_change, applied)
        others = [f for f in FORGES if f.name in FORGE_NAMES]
        by_forge = {f.name: measure(args.samples, partial(forge_change, f), applied)
                    for f in others}

        # -- status commits in one rollout ------------------------------------------------------
        controller = RolloutController(api, Target(cluster_operator=CLUSTER_OPERATOR_NAME),
                                       settings=PlannerSettings(ready_timeout=60)).start()
        controller.wait_synced(30)
        git(clone, "pull", "-q", "--rebase", "origin", "main")
        before = int(git(clone, "rev-list", "--count", "origin/main"))
        (clone / POLICY_PATH).write_text(policy(NEW, label="rollout", rollout=True))
        git(clone, "commit", "-q", "-am", "rollout")
        git(clone, "push", "-q", "origin", "HEAD:main")
        sync.trigger()
        rollout_started = time.monotonic()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            co = api.get(cluster_operator_path(CLUSTER_OPERATOR_NAME))
            inner = (((co.get("status") or {}).get("upgradeStatus") or {}).get("status") or {})
            if inner.get("currentStepState") == "Completed" and inner.get(
                    "currentStepIndex") == STEPS:
                break
            time.sleep(0.1)
        rollout_seconds = time.monotonic() - rollout_started
        time.sleep(3)  # the terminal snapshot is committed at once; let the push land
        git(clone, "fetch", "-q", "origin")
        after = int(git(clone, "rev-list", "--count", "origin/main"))
        subjects = git(clone, "log", "--format=%s", f"--max-count={after - before}",
                       "origin/main").splitlines()
        status_commits = [s for s in subjects if s.startswith("status(")]
        controller.stop()
        sync.stop()
        webhook.stop()
        daemon.terminate()
        daemon.wait(10)
        real_gitea = gitea_pushes(api, applied, work, args.samples)
        fleet.stop(cleanup=True)
        results = {
            "local_watch_p50": statistics.median(watch),
            "local_watch_max": max(watch),
            "trigger_p50": statistics.median(triggered),
            "trigger_max": max(triggered),
            "webhook_p50": statistics.median(hooked),
            "webhook_max": max(hooked),
            **{f"webhook_{name}_p50": statistics.median(v) for name, v in by_forge.items()},
            **{f"webhook_{name}_max": max(v) for name, v in by_forge.items()},
            **({"gitea_real_p50": statistics.median(real_gitea["apply"]),
                "gitea_real_max": max(real_gitea["apply"]),
                "gitea_real_push_p50": statistics.median(real_gitea["push"]),
                "gitea_real_delivery_p50": statistics.median(real_gitea["delivery"]),
                "gitea_real_ours_p50": statistics.median(real_gitea["ours"]),
                "gitea_real_ours_max": max(real_gitea["ours"])}
               if real_gitea else {}),
            "status_commits": len(status_commits),
            "status_commit_subjects": list(reversed(status_commits)),
            "rollout_seconds": rollout_seconds,
            "samples": args.samples,
        }
    finally:
        plane.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    budget = 3 * STEPS + 3
    rows = [
        ("merge-to-apply, local watch, p50", "< 1 s", f"{results['local_watch_p50']:.3f} s "
         f"(max {results['local_watch_max']:.3f})", f"{results['local_watch_p50'] / 1.0:.2f}"),
        ("merge-to-apply, push + trigger, p50", "< 1 s", f"{results['trigger_p50']:.3f} s "
         f"(max {results['trigger_max']:.3f})", f"{results['trigger_p50'] / 1.0:.2f}"),
        ("merge-to-apply, push + webhook, p50", "< 1 s", f"{results['webhook_p50']:.3f} s "
         f"(max {results['webhook_max']:.3f})", f"{results['webhook_p50'] / 1.0:.2f}"),
        *((f"merge-to-apply, push + {name} webhook, p50", "< 1 s",
           f"{results[f'webhook_{name}_p50']:.3f} s (max {results[f'webhook_{name}_max']:.3f})",
           f"{float(str(results[f'webhook_{name}_p50'])) / 1.0:.2f}")
          for name in FORGE_NAMES),
        # a push to Gitea waits for its own hooks (no goal of ours); from its webhook's
        # arrival on, the time is ours
        *((("merge-to-apply, push to Gitea + its webhook, p50", "-",
            f"{results['gitea_real_p50']:.3f} s (max {results['gitea_real_max']:.3f})", "-"),
           ("Gitea's webhook arrival to apply, p50", "< 1 s",
            f"{results['gitea_real_ours_p50']:.3f} s (max {results['gitea_real_ours_max']:.3f})",
            f"{float(str(results['gitea_real_ours_p50'])) / 1.0:.2f}"))
          if "gitea_real_p50" in results else ()),
        (f"status commits, rollout of {STEPS} steps", f"<= {budget}",
         str(results["status_commits"]), f"{int(str(results['status_commits'])) / budget:.2f}"),
    ]
    width = max(40, *(len(row[0]) + 1 for row in rows))  # two spaces at least: bench/run
    print(f"{'figure':{width}} {'goal':8} {'measured':28} ratio")
    for row in rows:
        print(f"{row[0]:{width}} {row[1]:8} {row[2]:28} {row[3]}")
    if "gitea_real_p50" not in results:
        print("\nno Gitea built (scripts/install-gitea): the real Gitea row is left out")
    else:
        print(f"\nreal Gitea, from the push's start, p50: git push returns after "
              f"{results['gitea_real_push_p50']:.3f} s, its webhook arrives after "
              f"{results['gitea_real_delivery_p50']:.3f} s")
    print(f"\n{args.samples} samples each; rollout took {results['rollout_seconds']:.1f} s; "
          "status commits:")
    for subject in results["status_commit_subjects"]:  # type: ignore[union-attr]
        print(f"  {subject}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
