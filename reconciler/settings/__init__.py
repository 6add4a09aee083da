"""The one live view of the repository config (``reconciler.yaml``) for this cluster: the
settings ``reconciler.config`` resolves, published by the sync role at each commit it applies (or
by the ``--repo-config`` file's watch), read by each control loop at each pass."""
