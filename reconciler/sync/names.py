"""The names the sync's pure code needs (SPEC 2 and 4.6), importable without the Kubernetes
client. ``reconciler.kube.objects`` holds the same values for the adapters; the two agree by
test (tests/sync/test_steps.py) until one module of names serves both."""

from __future__ import annotations

from reconciler.fieldpath import FieldPath

GROUP = "gpu.metax-tech.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ClusterOperator"

#: field manager of the sync role's server-side applies
SYNC_FIELD_MANAGER = "gpu-gitops-reconciler"
#: the commit the cluster runs, on the ClusterOperator
SOURCE_COMMIT_ANNOTATION = "gpu.metax-tech.com/source-commit"

#: the fields the rollout controller and the firmware orchestrator change (SPEC 4.6)
PAUSE: FieldPath = ("spec", "driver", "upgradePolicy", "pause")
VERSION_FIELD: FieldPath = ("spec", "driver", "payload", "version")
FW_POLICY: FieldPath = ("spec", "driver", "fwUpgradePolicy")
FW_VIRT: FieldPath = ("spec", "driver", "fwEnableVirt")
