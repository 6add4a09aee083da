"""The read model: what a rollout looks like to a person, built once, purely, from a status
snapshot (the Git file's shape, or the same built from the live object), the GPU nodes (when the
cluster is read) and ``now``.

``reconciler status``, the dashboard and the demo read it; notifications and forge commit
statuses call the same functions:

- ``nodes``: the node states (old, cordoned ahead, draining, in flight, verifying, failed,
  upgraded, busy, NotReady, skipped, left alone), classified in one place, what they mean for a
  rollout (``NodeStates``: busy, unavailable, failed, draining, skipped nodes) and the progress
  per topology domain (``domain_progress``, docs/rollout.md#topology-aware-waves);
- ``waits``: what the rollout waits for, one typed ``Wait`` per entry (``kind`` one of
  ``KINDS``), with a title, a detail and the exact action a person takes.

No Kubernetes, Git, clock or sockets here (``.importlinter``).
"""
