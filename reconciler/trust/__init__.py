"""Trust: who may make the reconciler act.

The webhook receiver only accepts pushes signed with the shared secret, and commit signature
verification decides whether a commit is applied at all. Both answer with reasons a person
can act on.
"""
