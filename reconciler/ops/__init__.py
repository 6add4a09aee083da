"""Operations: what a platform team needs to run the daemon.

Prometheus metrics, the ``/healthz`` ``/readyz`` ``/metrics`` server, JSON logs, SIGTERM
shutdown and Lease-based leader election. Nothing here decides anything about rollouts; the
daemon feeds these components and asks them whether it may act.
"""
