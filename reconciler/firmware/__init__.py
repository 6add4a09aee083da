"""Firmware upgrade orchestration (docs/firmware.md).

``preflight`` and ``planner`` are pure (snapshot + settings + now in, refusals, actions and a new
status out); ``controller`` is the thin adapter that observes the cluster and carries the actions
out. All state lives in ``status.firmwareUpgrade`` of the ClusterOperator and in node
annotations, so a restarted orchestrator resumes where it stopped.
"""
