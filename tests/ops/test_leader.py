"""Leader election at its seam: an in-memory Lease store with resource versions, virtual clocks.

The real API server test lives in test_leader_cluster.py; here the timing rules are checked
exhaustively: a leader stops acting before anyone else may start, whatever fails when.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from reconciler.ops.leader import (
    ElectionConfig,
    LeaderElector,
    LeaseConflict,
    LeaseError,
    LeaseRecord,
)
from reconciler.ops.metrics import Metrics
from tests.clocks import VirtualClock


class Store:
    """One Lease with optimistic concurrency, like the API server's."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.writes: list[str | None] = []


class Client:
    """A replica's view of the store; ``down`` simulates a network partition."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise LeaseError("connection refused")

    def get(self, namespace: str, name: str) -> LeaseRecord | None:
        self._check()
        return self.store.record

    def create(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord:
        self._check()
        if self.store.record is not None:
            raise LeaseConflict("exists")
        return self._write(record)

    def update(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord:
        self._check()
        current = self.store.record
        if current is None or record.resource_version != current.resource_version:
            raise LeaseConflict("stale resourceVersion")
        return self._write(record)

    def _write(self, record: LeaseRecord) -> LeaseRecord:
        self.store.version += 1
        self.store.record = replace(record, resource_version=str(self.store.version))
        self.store.writes.append(record.holder)
        return self.store.record


CONFIG = dict(namespace="gpu-system", name="gpu-reconciler", lease_duration=15.0,
              renew_deadline=10.0, retry_period=2.0)  # fmt: skip


def elector(
    store: Store, identity: str, clock: VirtualClock, *, skew: float = 0.0, **kwargs: object
) -> tuple[LeaderElector, Client, list[str]]:
    client = Client(store)
    events: list[str] = []
    base = datetime(2026, 11, 30, tzinfo=UTC)
    e = LeaderElector(
        client,
        ElectionConfig(identity=identity, **CONFIG),  # type: ignore[arg-type]
        on_started_leading=lambda: events.append("started"),
        on_stopped_leading=lambda: events.append("stopped"),
        clock=clock,
        # wall clocks disagree by ``skew`` seconds; the algorithm must not care
        wall_clock=lambda: base + timedelta(seconds=clock.now + skew),
        rng=random.Random(identity),
        **kwargs,  # type: ignore[arg-type]
    )
    return e, client, events


def test_first_candidate_creates_the_lease_and_leads() -> None:
    store, clock = Store(), VirtualClock()
    metrics = Metrics()
    a, _, events = elector(store, "a", clock, metrics=metrics)
    assert not a.is_leader
    assert a.tick() == 2.0
    assert a.is_leader
    assert events == ["started"]
    assert store.record is not None
    assert store.record.holder == "a"
    assert store.record.lease_duration_seconds == 15
    assert 'gpu_reconciler_leader{lease="gpu-system/gpu-reconciler"} 1.0' in (
        metrics.exposition().decode()
    )


def test_second_candidate_waits_while_the_leader_renews() -> None:
    store, clock = Store(), VirtualClock()
    a, _, _ = elector(store, "a", clock)
    b, _, b_events = elector(store, "b", clock)
    a.tick()
    for _ in range(50):
        clock.now += 2
        a.tick()
        b.tick()
        assert a.is_leader and not b.is_leader
    assert b_events == []
    assert b.leader == "a"
    assert store.record is not None and store.record.transitions == 0


def test_dead_leader_is_replaced_within_the_lease_duration() -> None:
    store, clock = Store(), VirtualClock()
    a, _, _ = elector(store, "a", clock)
    b, _, b_events = elector(store, "b", clock)
    a.tick()
    b.tick()
    died_at = clock.now
    # a is killed: it never ticks again. b polls at its jittered retry period.
    while True:
        delay = b.tick()
        if b.is_leader:
            break
        clock.now += delay
    # b's last look at a's renewal was at died_at: it takes over just after the lease expires
    assert 15 <= clock.now - died_at <= 15 + 0.2
    assert b_events == ["started"]
    assert store.record is not None
    assert store.record.holder == "b"
    assert store.record.transitions == 1
    # the dead leader, had it survived, would no longer think it leads
    assert not a.is_leader


def test_partitioned_leader_stops_acting_before_the_lease_can_be_taken() -> None:
    store, clock = Store(), VirtualClock()
    a, a_client, a_events = elector(store, "a", clock)
    b, _, _ = elector(store, "b", clock)
    a.tick()
    b.tick()
    a_client.down = True
    a_stopped_at = b_started_at = None
    for _ in range(400):
        clock.now += 0.25
        a.tick()
        b.tick()
        assert not (a.is_leader and b.is_leader)
        if a_stopped_at is None and not a.is_leader:
            a_stopped_at = clock.now
        if b_started_at is None and b.is_leader:
            b_started_at = clock.now
    assert a_stopped_at is not None and b_started_at is not None
    assert a_stopped_at < b_started_at
    assert a_events == ["started", "stopped"]


def test_release_hands_over_at_once() -> None:
    store, clock = Store(), VirtualClock()
    a, _, a_events = elector(store, "a", clock)
    b, _, _ = elector(store, "b", clock)
    a.tick()
    b.tick()
    a.release()
    assert a_events == ["started", "stopped"]
    assert store.record is not None and store.record.holder is None
    clock.now += 0.1
    b.tick()
    assert b.is_leader


def test_renewal_keeps_acquire_time_and_transitions() -> None:
    store, clock = Store(), VirtualClock()
    a, _, _ = elector(store, "a", clock)
    a.tick()
    assert store.record is not None
    acquired = store.record.acquire_time
    clock.now += 2
    a.tick()
    assert store.record.acquire_time == acquired
    assert store.record.renew_time is not None and acquired is not None
    assert store.record.renew_time > acquired
    assert store.record.transitions == 0


def test_stalled_election_thread_cannot_keep_leadership() -> None:
    # The election thread stops ticking (stuck in a long GC or a blocked call):
    # is_leader still turns false at the renew deadline, with no tick needed.
    store, clock = Store(), VirtualClock()
    a, _, _ = elector(store, "a", clock)
    a.tick()
    clock.now += 9.9
    assert a.is_leader
    clock.now += 0.1
    assert not a.is_leader


@pytest.mark.parametrize("seed", range(40))
def test_random_faults_never_two_leaders(seed: int) -> None:
    """Three replicas, random partitions, deaths, restarts and wall-clock skew."""
    rng = random.Random(seed)
    store, clock = Store(), VirtualClock()
    replicas = []
    for name in ("a", "b", "c"):
        e, client, _ = elector(store, name, clock, skew=rng.uniform(-300, 300))
        replicas.append({"elector": e, "client": client, "alive": True, "next": clock.now})
    leaders_seen: set[str] = set()
    for _ in range(3000):
        clock.now += rng.uniform(0.05, 0.5)
        for r in replicas:
            if rng.random() < 0.01:
                r["client"].down = not r["client"].down  # type: ignore[attr-defined]
            if rng.random() < 0.002:
                r["alive"] = not r["alive"]
            if r["alive"] and clock.now >= r["next"]:  # type: ignore[operator]
                r["next"] = clock.now + r["elector"].tick()  # type: ignore[attr-defined]
        # a dead replica's process is gone: it cannot act, whatever its memory says
        acting = [
            r["elector"].config.identity  # type: ignore[attr-defined]
            for r in replicas
            if r["alive"] and r["elector"].is_leader  # type: ignore[attr-defined]
        ]
        assert len(acting) <= 1, f"two replicas act at t={clock.now}: {acting}"
        leaders_seen.update(acting)
    assert leaders_seen, "someone led at some point"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(lease_duration=10.0, renew_deadline=10.0), "must be longer than the renew"),
        (dict(renew_deadline=4.0, retry_period=4.0), "must exceed 1.2 x the retry period"),
        (dict(identity=""), "non-empty identity"),
    ],
)
def test_config_is_checked(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = dict(identity="a", **CONFIG)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        ElectionConfig(**args)  # type: ignore[arg-type]


def test_the_holders_lease_duration_is_honoured() -> None:
    """During a rolling update replicas may disagree on the duration: the record's wins."""
    store, clock = Store(), VirtualClock()
    b_client = Client(store)
    b = LeaderElector(
        b_client,
        ElectionConfig("gpu-system", "gpu-reconciler", "b", 30.0, 20.0, 2.0),
        clock=clock,
    )
    a, _, _ = elector(store, "a", clock)  # configured with 15 s
    b.tick()
    assert store.record is not None and store.record.lease_duration_seconds == 30
    a.tick()
    b_client.down = True  # b dies (cut off)
    clock.now += 20
    a.tick()
    assert not a.is_leader, "15 s of its own setting are not enough: b promised 30"
    clock.now += 10.5
    a.tick()
    assert a.is_leader


def test_lease_duration_is_written_rounded_up() -> None:
    store, clock = Store(), VirtualClock()
    e = LeaderElector(Client(store), ElectionConfig("ns", "l", "a", 2.5, 2.2, 1.0), clock=clock)
    e.tick()
    assert store.record is not None and store.record.lease_duration_seconds == 3


def test_micro_time_always_has_six_fractional_digits() -> None:
    from reconciler.ops.leader import _micro_time

    assert _micro_time(datetime(2026, 11, 30, 2, 0, 0, tzinfo=UTC)) == "2026-11-30T02:00:00.000000Z"
    assert _micro_time(None) is None


def test_default_identity_is_unique_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from reconciler.ops.leader import default_identity

    monkeypatch.setenv("POD_NAME", "gpu-reconciler-7d9f-abcde")
    a, b = default_identity(), default_identity()
    assert a.startswith("gpu-reconciler-7d9f-abcde_")
    assert a != b
