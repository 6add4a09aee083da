"""What the sync worker knows across passes, and its counters (tests and benchmarks read
them; the metrics carry the same to Prometheus)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

#: the sync role logs under one name, whichever module writes the line (log queries and the
#: JSON log's ``logger`` field filter on it)
log = logging.getLogger("reconciler.sync.loop")


@dataclass(slots=True)
class SyncStats:
    applied: int = 0
    rejected: int = 0
    write_backs: int = 0
    drift_repairs: int = 0
    errors: int = 0
    #: (commit, seconds from the commit being reported to the apply answered)
    applies: list[tuple[str, float]] = field(default_factory=list)


@dataclass(slots=True)
class SyncRecord:
    """Written by the worker thread only."""

    #: the person's commit the cluster runs
    applied_commit: str | None = None
    #: the branch head last judged
    handled_commit: str | None = None
    #: the person's commit behind ``handled_commit``
    handled_source: str | None = None
    #: the rejection of the last judged commit, as the status snapshot shows it
    rejection: dict[str, Any] | None = None
    #: the change the promotion gate holds (docs/configuration.md#promotion), as the status
    #: snapshot's ``promotion.held`` shows it; None: nothing held
    held: dict[str, Any] | None = None
    #: wall-clock seconds at which the held head is judged again (None: none scheduled)
    recheck_at: float | None = None
    #: the upstream rolled back the version this cluster runs (``promotion.upstreamRolledBack``)
    upstream_rolled_back: dict[str, Any] | None = None
    #: ``promote/<cluster>/<version>`` branches pushed (or found) in ``mode: branch``
    promoted: set[str] = field(default_factory=set)
