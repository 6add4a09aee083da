"""Leader election through a ``coordination.k8s.io/v1`` Lease: two replicas never both act.

The algorithm is client-go's: a candidate takes the Lease when it is free, or when its record
has not changed for ``lease_duration`` as measured on the candidate's own monotonic clock (so
wall-clock skew between replicas does not matter; the Lease's timestamps are informational).
The leader renews every ``retry_period``; if it cannot renew for ``renew_deadline`` it stops
acting. Because ``renew_deadline < lease_duration`` and the leader counts from the moment it
*sent* its last successful renewal, it has stopped before any other replica can take over.

``is_leader`` is itself time-bounded: it turns false at the renew deadline even if the election
thread is stuck, so code that checks it before each action never acts on a stale lease.
"""

from __future__ import annotations

import logging
import math
import os
import random
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from reconciler.clock import Clock, monotonic, utc_now
from reconciler.ops.metrics import Metrics
from reconciler.timefmt import format_micro_time

log = logging.getLogger(__name__)

DEFAULT_LEASE_NAME = "gpu-reconciler"
JITTER_FACTOR = 1.2  # candidates wait retry_period * (1 + rand * 1.2), as client-go does


def default_identity() -> str:
    """``POD_NAME`` (set from the downward API) or the host name, plus a random suffix so a
    restarted process never mistakes its predecessor's Lease for its own."""
    base = os.environ.get("POD_NAME") or socket.gethostname() or "reconciler"
    return f"{base}_{uuid.uuid4().hex[:8]}"


class LeaseError(Exception):
    """The Lease could not be read or written (API server unreachable, forbidden...)."""


class LeaseConflict(LeaseError):
    """Someone else wrote the Lease first (HTTP 409): retry from a fresh read."""


@dataclass(frozen=True)
class LeaseRecord:
    holder: str | None
    lease_duration_seconds: int
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0
    resource_version: str | None = None  # optimistic concurrency token, from the server


class LeaseClient(Protocol):
    """The narrow seam to the API server."""

    def get(self, namespace: str, name: str) -> LeaseRecord | None: ...

    def create(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord: ...

    def update(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord: ...


@dataclass(frozen=True)
class ElectionConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election needs a non-empty identity (e.g. the pod name)")
        if not self.lease_duration > self.renew_deadline:
            raise ValueError(
                f"lease duration ({self.lease_duration}s) must be longer than the renew "
                f"deadline ({self.renew_deadline}s): a leader must stop acting before its "
                "lease can be taken"
            )
        if not self.renew_deadline > JITTER_FACTOR * self.retry_period:
            raise ValueError(
                f"renew deadline ({self.renew_deadline}s) must exceed {JITTER_FACTOR} x the "
                f"retry period ({self.retry_period}s), or one slow retry loses the lease"
            )
        if self.lease_duration < 1:
            raise ValueError("lease duration must be at least 1 s (Leases count whole seconds)")


Callback = Callable[[], None]


class LeaderElector:
    """Runs the election for one replica. ``tick()`` is one step; ``run()`` loops it."""

    def __init__(
        self,
        client: LeaseClient,
        config: ElectionConfig,
        *,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        clock: Clock = monotonic,
        wall_clock: Callable[[], datetime] = utc_now,
        rng: random.Random | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._client = client
        self.config = config
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._clock = clock
        self._wall = wall_clock
        self._rng = rng or random.Random()
        self._metrics = metrics
        self._lock = threading.RLock()
        self._leading = False
        self._last_renew = float("-inf")  # when the last successful renewal was *sent*
        self._observed: LeaseRecord | None = None
        self._observed_time = float("-inf")
        self._known_leader: str | None = None
        self._failing = False
        self._held_by_other = False
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._set_metric(False)

    # -- what the rest of the daemon asks ----------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """True only while the lease was renewed within the renew deadline."""
        with self._lock:
            return self._leading and self._clock() - self._last_renew < self.config.renew_deadline

    @property
    def leader(self) -> str | None:
        """The identity last seen holding the Lease (possibly stale)."""
        return self._known_leader

    # -- the algorithm --------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One attempt to take or keep the Lease; True when this replica holds it now."""
        cfg = self.config
        now = self._wall()
        try:
            current = self._client.get(cfg.namespace, cfg.name)
            if current is None:
                record = LeaseRecord(
                    holder=cfg.identity,
                    lease_duration_seconds=math.ceil(cfg.lease_duration),
                    acquire_time=now,
                    renew_time=now,
                    transitions=0,
                )
                self._remember(self._client.create(cfg.namespace, cfg.name, record))
                return True
            if self._observed is None or _fingerprint(current) != _fingerprint(self._observed):
                self._remember(current)
            held_by_other = bool(current.holder) and current.holder != cfg.identity
            if held_by_other:
                self._held_by_other = True
                if self._observed_time + self._duration(current) > self._clock():
                    return False
            self._held_by_other = False
            ours = current.holder == cfg.identity
            record = replace(
                current,
                holder=cfg.identity,
                lease_duration_seconds=math.ceil(cfg.lease_duration),
                acquire_time=current.acquire_time if ours else now,
                renew_time=now,
                transitions=current.transitions if ours else current.transitions + 1,
            )
            self._remember(self._client.update(cfg.namespace, cfg.name, record))
            return True
        except LeaseConflict:
            log.debug("lease %s/%s: conflict, someone else wrote it", cfg.namespace, cfg.name)
            return False
        except LeaseError as e:
            # the first failure after a success is a warning; a long outage is not a flood
            level = logging.DEBUG if self._failing else logging.WARNING
            self._failing = True
            log.log(level, "lease %s/%s: %s", cfg.namespace, cfg.name, e)
            return False

    def _duration(self, record: LeaseRecord) -> float:
        # the holder's promise, as written in the Lease (replicas may be configured differently
        # during a rolling update); our own setting when the record has none
        return float(record.lease_duration_seconds or self.config.lease_duration)

    def _remember(self, record: LeaseRecord) -> None:
        self._failing = False
        self._observed = record
        self._observed_time = self._clock()
        if record.holder != self._known_leader:
            self._known_leader = record.holder
            if record.holder:
                log.info("lease %s: leader is now %s", self.config.name, record.holder)
                callback = self._on_new_leader
                holder = record.holder
                if callback is not None:
                    _safely(lambda: callback(holder), "on_new_leader")

    def tick(self) -> float:
        """One step of the election; returns seconds to wait before the next."""
        cfg = self.config
        attempt_start = self._clock()
        ok = self.try_acquire_or_renew()
        started = False
        stopped = False
        with self._lock:
            if ok:
                self._last_renew = attempt_start
                if not self._leading:
                    self._leading = started = True
            elif self._leading and (
                self._held_by_other or self._clock() - self._last_renew >= cfg.renew_deadline
            ):
                # someone else holds it (we were cut off longer than the lease), or we could
                # not renew in time: stop acting now
                self._leading = False
                stopped = True
        if started:
            log.info("lease %s/%s: %s became leader", cfg.namespace, cfg.name, cfg.identity)
            self._set_metric(True)
            if self._on_started is not None:
                _safely(self._on_started, "on_started_leading")
        if stopped:
            log.warning(
                "lease %s/%s: %s; %s stops acting",
                cfg.namespace,
                cfg.name,
                f"now held by {self._known_leader}"
                if self._held_by_other
                else f"could not renew for {cfg.renew_deadline:.1f}s",
                cfg.identity,
            )
            self._set_metric(False)
            if self._on_stopped is not None:
                _safely(self._on_stopped, "on_stopped_leading")
        if self._leading:
            return cfg.retry_period
        delay = cfg.retry_period * (1 + self._rng.random() * JITTER_FACTOR)
        observed = self._observed
        if observed is not None and observed.holder and observed.holder != cfg.identity:
            # wake when the holder's lease would expire, so a dead leader is replaced within
            # the lease duration rather than up to a jittered retry period later
            expires_in = self._observed_time + self._duration(observed) - self._clock()
            if 0 <= expires_in < delay:
                delay = expires_in + 0.01 + self._rng.random() * 0.05 * cfg.retry_period
        return delay

    def release(self) -> None:
        """Stop acting, then hand the Lease back so a standby takes over at once."""
        cfg = self.config
        with self._lock:
            was_leading = self._leading
            self._leading = False
        if not was_leading:
            return
        self._set_metric(False)
        if self._on_stopped is not None:
            _safely(self._on_stopped, "on_stopped_leading")
        observed = self._observed
        if observed is None or observed.holder != cfg.identity:
            return
        try:
            self._client.update(
                cfg.namespace,
                cfg.name,
                replace(observed, holder=None, lease_duration_seconds=1, renew_time=self._wall()),
            )
            log.info("lease %s/%s: released by %s", cfg.namespace, cfg.name, cfg.identity)
        except LeaseError as e:
            log.warning(
                "lease %s/%s: release failed (%s); it expires by itself", cfg.namespace, cfg.name, e
            )

    # -- background thread ------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                delay = self.tick()
            except Exception:  # a bug must not end the election: is_leader expires safely
                log.exception("lease %s: election step failed", self.config.name)
                delay = self.config.retry_period
            stop.wait(delay)
        self.release()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run, args=(self._stop,), name="leader-election", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _set_metric(self, leading: bool) -> None:
        if self._metrics is not None:
            self._metrics.set_leader(f"{self.config.namespace}/{self.config.name}", leading)


def _fingerprint(record: LeaseRecord) -> tuple[Any, ...]:
    return (record.holder, record.renew_time, record.transitions, record.resource_version)


def _safely(callback: Callback, name: str) -> None:
    try:
        callback()
    except Exception:
        log.exception("leader election callback %s failed", name)


# -- the Kubernetes adapter -----------------------------------------------------------------


def _micro_time(value: datetime | None) -> str | None:
    if value is None:
        return None
    return format_micro_time(value)


class KubernetesLeaseClient:
    """``LeaseClient`` over the official client's ``CoordinationV1Api``."""

    def __init__(self, api_client: Any, *, request_timeout: float = 5.0) -> None:
        from reconciler.kube.leases import coordination_api  # the client loads on first use

        self._api: Any = coordination_api(api_client)
        self._timeout = request_timeout

    def get(self, namespace: str, name: str) -> LeaseRecord | None:
        try:
            lease = self._api.read_namespaced_lease(name, namespace, _request_timeout=self._timeout)
        except Exception as e:
            if getattr(e, "status", None) == 404:
                return None
            raise _lease_error(e, "read", namespace, name) from e
        return self._record(lease)

    def _body(self, name: str, record: LeaseRecord) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name}
        if record.resource_version is not None:
            metadata["resourceVersion"] = record.resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": record.holder,
                "leaseDurationSeconds": record.lease_duration_seconds,
                "acquireTime": _micro_time(record.acquire_time),
                "renewTime": _micro_time(record.renew_time),
                "leaseTransitions": record.transitions,
            },
        }

    def _record(self, lease: Any) -> LeaseRecord:
        from reconciler.kube.leases import lease_spec

        spec = lease_spec(lease)
        return LeaseRecord(
            holder=spec.holder_identity or None,
            lease_duration_seconds=spec.lease_duration_seconds or 0,
            acquire_time=spec.acquire_time,
            renew_time=spec.renew_time,
            transitions=spec.lease_transitions or 0,
            resource_version=lease.metadata.resource_version,
        )

    def create(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord:
        try:
            lease = self._api.create_namespaced_lease(
                namespace, self._body(name, record), _request_timeout=self._timeout
            )
        except Exception as e:
            raise _lease_error(e, "create", namespace, name) from e
        return self._record(lease)

    def update(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord:
        try:
            lease = self._api.replace_namespaced_lease(
                name, namespace, self._body(name, record), _request_timeout=self._timeout
            )
        except Exception as e:
            raise _lease_error(e, "update", namespace, name) from e
        return self._record(lease)


def _lease_error(e: Exception, verb: str, namespace: str, name: str) -> LeaseError:
    status = getattr(e, "status", None)
    if status in (409,):
        return LeaseConflict(f"{verb} lease {namespace}/{name}: conflict")
    if status is not None:
        reason = getattr(e, "reason", "") or ""
        return LeaseError(f"{verb} lease {namespace}/{name}: HTTP {status} {reason}".strip())
    return LeaseError(f"{verb} lease {namespace}/{name}: {type(e).__name__}: {e}")
