"""The runtime every control loop runs on (the sync role, operator mode's health and window
watches, the firmware orchestrator, the rollout controller): the worker's thread of passes
(``worker.py``), what a failed pass means (``failures.py``: retry after a delay, stalled until
the input changes, conflict: re-read), and the watch-driven worker of the two controllers with
its ``PlanningFailed`` condition (``watched.py``).
"""
