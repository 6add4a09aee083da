"""The sync role (docs/gitops.md): Git -> validation -> the ClusterOperator, and the
cluster's status and the rollout's own spec changes back to Git."""
