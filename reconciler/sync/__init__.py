"""The sync role (SPEC sections 1 and 6): Git -> validation -> the ClusterOperator, and the
cluster's status and the rollout's own spec changes back to Git."""
