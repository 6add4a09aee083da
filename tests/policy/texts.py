"""Shared policy texts: the vendor manual's scenarios and the firmware tests' policy, line
numbers fixed for exact assertions."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples-repo"

# The seed's 10-node scenario (section 3.1.3 step 7, scenario 1) as a whole object.
# Line numbers matter: the invalid-file tests edit single lines of it. The manual's
# `pauseDuration: {}` (a manual gate) is written the CRD's way: left out (a comment keeps the
# line).
SEED_10 = """\
apiVersion: gpu.metax-tech.com/v1alpha1
kind: ClusterOperator
metadata:
  name: cluster-operator
spec:
  driver:
    payload:
      name: driver-image
      registry: registry.example.com/metax
      version: 2.33.0.9
    upgradePolicy:
      enableRollout: true
      upgradeSteps:
        - replicas: 2
          # no pauseDuration: a person releases the next batch (manual gate)
        - replicas: 5
          pauseDuration: 10000
        - replicas: 8
          pauseDuration: 10000
        - replicas: 100%
          pauseDuration: 10000
      pause: false
      maxParallel: 100%
      maxUnavailable: 0
      maxFailureThreshold: 3
      fallback: pause
"""

# The seed's 100-node scenario (scenario 2), with the manual's own comments.
SEED_100 = """\
apiVersion: gpu.metax-tech.com/v1alpha1
kind: ClusterOperator
metadata:
  name: cluster-operator
spec:
  driver:
    payload:
      name: driver-image
      registry: registry.example.com/metax
      version: 2.33.0.9-amd64
    upgradePolicy:
      enableRollout: true  # 开启灰度发布
      upgradeSteps:
        # 第1批次：升级5%(5)个节点，完成后暂停（需人工触发下一批）
        - replicas: 5%
          # pauseDuration 省略 = 人工确认 (the manual's {}: left out, a person confirms)
        - replicas: 30
          pauseDuration: 300000
        - replicas: 60
          pauseDuration: 300000
        - replicas: 100%
          # no pauseDuration: a person confirms the end of the rollout
      pause: false  # 初始状态：不暂停
      maxParallel: 50%
      maxUnavailable: 10%
      maxFailureThreshold: 5
      fallback: pause
"""

# What `helm install ... --set driver.payload.version=2.32.0.6` leaves: no grey release.
VENDOR_DEFAULT = """\
apiVersion: gpu.metax-tech.com/v1alpha1
kind: ClusterOperator
metadata:
  name: cluster-operator
spec:
  driver:
    deployPolicy: PreferCloud
    fwUpgradePolicy: Never
    fwEnableVirt: false
    fwEffectPolicy: NextReboot
    payload:
      name: driver-image
      registry: DOMAIN/PROJECT
      version: 2.32.0.6
      pullPolicy: IfNotPresent
    image:
      name: driver-manager
      registry: DOMAIN/PROJECT
      version: 0.13.0
      pullPolicy: IfNotPresent
    log:
      dir: /var/log/metax
      format: text
      level: info
      maxAge: 7d
      rotationTime: 24h
  devicePlugin: {}
  maca: {}
  runtime: {}
  labelgen: {}
  dataExporter: {}
"""

#: The driver payload of the firmware tests' policy files and status snapshots.
FIRMWARE_PAYLOAD = {"name": "driver-image", "registry": "registry.example.com/metax",
                    "version": "2.33.0.9"}


def firmware_policy(fw_upgrade_policy: str, virt: str = "false", *,
                    payload: str = json.dumps(FIRMWARE_PAYLOAD)) -> str:
    """A policy without grey release for the firmware rules (``payload``: one line of JSON).
    Line 8 is ``fwUpgradePolicy``, where the firmware findings point."""
    return f"""\
apiVersion: gpu.metax-tech.com/v1alpha1
kind: ClusterOperator
metadata:
  name: cluster-operator
spec:
  driver:
    payload: {payload}
    fwUpgradePolicy: {fw_upgrade_policy}   # Never or PreferCloud
    fwEnableVirt: {virt}
    upgradePolicy:
      enableRollout: false
"""


def replace_line(text: str, line: int, new: str | None) -> str:
    """``text`` with 1-based ``line`` replaced by ``new`` (None deletes it)."""
    lines = text.splitlines(keepends=True)
    assert 1 <= line <= len(lines)
    lines[line - 1 : line] = [] if new is None else [new + "\n"]
    return "".join(lines)


def insert_line(text: str, before: int, new: str) -> str:
    lines = text.splitlines(keepends=True)
    lines.insert(before - 1, new + "\n")
    return "".join(lines)
