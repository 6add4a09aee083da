"""The repository config (``reconciler.yaml``) resolved for this cluster, and its one live view:
published by the sync role at each commit it applies (or by the ``--repo-config`` file's watch),
read by each control loop at each pass."""
