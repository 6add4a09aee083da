"""The rollout role: runs the pure rollout planner against Kubernetes.

``observe`` turns API objects into the planner's snapshot, ``act`` carries out its actions, and
``loop`` ties them to list+watch caches. All rollout state is in the ClusterOperator's status and
in node annotations, so a controller killed at any moment resumes where it stopped.
"""
