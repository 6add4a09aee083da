"""Notifications (docs/notifications.md): events derived from successive status snapshots
(``events``, pure), rendered and signed per sink (``sinks``), sent once per sink by the sync role's
leader (``notifier``: a background worker; ``ledger``: what was sent, in an annotation of the
ClusterOperator)."""
