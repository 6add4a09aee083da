"""Policy: the ``ClusterOperator`` spec as the admission webhook sees it.

Pure code: no Kubernetes, Git or clock imports, so the same rules run in the daemon, in
``reconciler validate`` and in pull-request checks.
"""
