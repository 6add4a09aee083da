"""GPU health gates (docs/health.md): ``checks`` is pure; ``prometheus`` is the HTTP adapter.

Kept empty so that importing the pure module never imports the adapter's network code."""
