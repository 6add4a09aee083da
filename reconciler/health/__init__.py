"""GPU health gates (docs/health.md): ``checks`` (the checks' evaluation), ``section`` (the
section as a cluster's settings carry it) and ``rules`` (what ``reconciler validate`` checks in
it) are pure; ``prometheus`` is the HTTP adapter.

Kept empty so that importing the pure modules never imports the adapter's network code."""
