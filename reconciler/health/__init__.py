"""GPU health gates (SPEC section 9): ``checks`` is pure; ``prometheus`` is the HTTP adapter.

Kept empty so that importing the pure module never imports the adapter's network code."""
