"""The Git side of GitOps: watch a policy repository, read commits, write status and the
rollout's own spec changes back.

Adapters (``mirror``, ``source``, ``publisher``, ``status_writer``, ``spec_writeback``,
``status_reader``) do Git I/O through GitPython and the git CLI; the decisions they act on
(``status_policy``, ``edits``, ``ownership``, ``commits`` trailers) are pure and tested without Git.
"""
