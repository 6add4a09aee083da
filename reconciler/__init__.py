"""GitOps reconciler for GPU fleets: driver and firmware upgrade policy in Git, applied to the
vendor's ``ClusterOperator`` and rolled out through a batched canary."""

__version__ = "0.1.0"
