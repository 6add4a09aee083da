"""`reconciler dev-cluster up --admission`: the dev cluster refuses the seed's mistakes the way a
real install does; without the flag nothing is registered."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reconciler.admission.config import CONFIG_NAME, WEBHOOK_NAME
from reconciler.kube.api import KubeApi
from reconciler.sim.admission import CONFIG_PATH
from reconciler.sim.control_plane import Binaries

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RECONCILER = [str(Path(sys.executable).parent / "reconciler")]


@contextmanager
def dev_cluster(state: Path, *flags: str) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    up = subprocess.Popen(
        [*RECONCILER, "dev-cluster", "up", "--nodes", "2", "--install-seconds", "0.2",
         "--dir", str(state), *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    try:
        assert up.stdout is not None
        line = up.stdout.readline().strip()
        assert line == str(state / "kubeconfig"), up.stderr.read() if up.stderr else ""
        yield Path(line), up
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGTERM)
            up.wait(60)


def _kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    kubectl = Binaries.locate().kubectl  # the dev cluster's own release
    assert kubectl is not None
    return subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_up_with_admission_refuses_bad_patches_with_our_message(tmp_path: Path) -> None:
    with dev_cluster(tmp_path / "dev", "--admission") as (kubeconfig, up):
        # Steps that go back: no CRD rule says it, so it is the webhook that refuses.
        bad = [{"op": "replace", "path": "/spec/driver/upgradePolicy/upgradeSteps",
                "value": [{"replicas": 2, "pauseDuration": 0}, {"replicas": 1, "pauseDuration": 0},
                          {"replicas": "100%", "pauseDuration": 0}]}]
        refused = _kubectl(kubeconfig, "patch", "ClusterOperator/cluster-operator",
                           "--type", "json", "--patch", json.dumps(bad))
        assert refused.returncode != 0
        assert f'admission webhook "{WEBHOOK_NAME}" denied the request' in refused.stderr
        assert "[steps-increasing]" in refused.stderr
        # the installed object (chart 0.15.2: Helm metadata, finalizer) takes a good patch, no
        # warnings
        good = [{"op": "replace", "path": "/spec/driver/upgradePolicy/pause", "value": True}]
        allowed = _kubectl(kubeconfig, "patch", "ClusterOperator/cluster-operator",
                           "--type", "json", "--patch", json.dumps(good))
        assert allowed.returncode == 0, allowed.stderr
        assert "Warning" not in allowed.stderr
        api = KubeApi.from_kubeconfig(str(kubeconfig))
        hook = api.get(f"{CONFIG_PATH}/{CONFIG_NAME}")["webhooks"][0]
        api.close()
        assert hook["failurePolicy"] == "Fail"
        assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:")
        os.killpg(up.pid, signal.SIGTERM)
        assert up.wait(60) == 0
        assert up.stderr is not None
        log = up.stderr.read()
        assert "admission webhook registered at https://127.0.0.1:" in log
        assert "Traceback" not in log


def test_up_without_admission_registers_nothing(tmp_path: Path) -> None:
    with dev_cluster(tmp_path / "dev") as (kubeconfig, _up):
        listed = _kubectl(kubeconfig, "get", "validatingwebhookconfigurations", "-o", "name")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.strip() == ""
        bad = [{"op": "replace", "path": "/spec/driver/upgradePolicy/maxParallel", "value": 7}]
        assert _kubectl(kubeconfig, "patch", "ClusterOperator/cluster-operator", "--type",
                        "json", "--patch", json.dumps(bad)).returncode == 0
