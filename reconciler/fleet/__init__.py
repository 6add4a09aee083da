"""Many clusters in one repository
(docs/configuration.md#a-fleet-of-clusters-clustersname-windows-promotion): maintenance windows
(the calendar, ``windows.py``; operator mode's pauses at their edges, ``window_pause.py``), the
promotion gate (``promotion.py``) and the rules ``reconciler validate`` checks their sections of
``reconciler.yaml`` with (``rules.py``). Pure."""
