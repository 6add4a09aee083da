"""The fields of the ClusterOperator the sync role watches for the rollout's own changes: the
ones the rollout controller and the firmware orchestrator write
(docs/gitops.md#git-stays-the-truth). Names of objects, annotations and field managers:
``reconciler.names``."""

from __future__ import annotations

from reconciler.fieldpath import FieldPath

PAUSE: FieldPath = ("spec", "driver", "upgradePolicy", "pause")
VERSION_FIELD: FieldPath = ("spec", "driver", "payload", "version")
FW_POLICY: FieldPath = ("spec", "driver", "fwUpgradePolicy")
FW_VIRT: FieldPath = ("spec", "driver", "fwEnableVirt")
