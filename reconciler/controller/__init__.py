"""The rollout role: runs the pure rollout planner against Kubernetes.

``observe`` turns API objects into the planner's snapshot, ``index`` keeps them (with the
intents of requests in flight laid over them), ``dispatch`` hands the plan's actions out and
``act`` carries each out, ``status_writer`` writes the planned status once they landed, and
``loop`` wires them to list+watch caches and the worker (``worker``, shared with the firmware
orchestrator). All rollout state is in the ClusterOperator's status and in node annotations, so
a controller killed at any moment resumes where it stopped.
"""
