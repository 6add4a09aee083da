"""The controller's health step (``HealthFeeder``): only pending checks are asked, at most once
per check and node per ``interval``; an invalid section fails closed; readings carry their time."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from reconciler.config.document import load
from reconciler.controller.health import HealthFeeder
from reconciler.health.checks import HealthRecord, QueryError, Reading
from reconciler.health.section import HealthSection
from reconciler.names import ANN_HEALTH
from reconciler.rollout.planner import plan
from reconciler.rollout.simulator import EPOCH
from tests.health.conftest import health_of
from tests.rollout.world import NEW_REV, World, policy

CONFIG = """\
health:
  prometheus: {url: http://127.0.0.1:1}
  interval: 10s
  nodeChecks:
    - name: gpus-available
      query: 'min(mx_gpu_state{Hostname="{{node}}"})'
      expect: '== 1'
      within: 5m
    - name: driver-reported
      query: 'count(mx_gpu_state{Hostname="{{node}}", driver_version!="{{version}}"}) or vector(0)'
      expect: '== 0'
"""


class FakeClock:
    def __init__(self) -> None:
        self.t = EPOCH

    def __call__(self) -> float:
        return self.t


def verifying_world(n_ready: int) -> World:
    """A rollout whose first ``n_ready`` nodes are Ready on the new revision with their checks
    started (the record stored)."""
    w = World(4, policy(maxParallel=4, maxUnavailable=4))
    w.plan(0)
    w.plan(0)
    for i in range(1, n_ready + 1):
        name = f"node-{i:04d}"
        w.ready(name)
        w.apply([])
        node = w.nodes[name]
        w.nodes[name] = dataclasses.replace(node, annotations={
            **node.annotations, ANN_HEALTH: HealthRecord(EPOCH).to_text()})
    return w


def test_only_pending_checks_are_asked_at_most_once_per_interval() -> None:
    sent: list[str] = []

    def query(expr: str) -> Reading:
        sent.append(expr)
        return 1.0

    clock = FakeClock()
    feeder = HealthFeeder(health_of(CONFIG), clock=clock, query=query)
    w = verifying_world(2)
    snap = feeder.feed(w.snapshot())
    assert len(sent) == 4  # 2 verifying nodes x 2 checks; the 2 still starting are not asked
    assert any('Hostname="node-0001", driver_version!="2.33.0.9"' in q for q in sent)
    assert snap.health is not None and snap.health.node_readings["node-0002"][
        "gpus-available"].value == 1.0
    clock.t += 5
    feeder.feed(w.snapshot())
    assert len(sent) == 4  # within the interval: the cached readings
    clock.t += 5
    again = feeder.feed(w.snapshot())
    assert len(sent) == 8 and feeder.queries == 8
    assert again.health is not None
    assert again.health.node_readings["node-0001"]["gpus-available"].at == clock.t


def test_a_passed_check_is_not_asked_again() -> None:
    sent: list[str] = []
    feeder = HealthFeeder(health_of(CONFIG), clock=FakeClock(),
                          query=lambda q: sent.append(q) or 1.0)  # type: ignore[func-returns-value]
    w = verifying_world(1)
    name = "node-0001"
    node = w.nodes[name]
    record = HealthRecord(EPOCH, passed={"gpus-available": EPOCH + 1})
    w.nodes[name] = dataclasses.replace(node, annotations={**node.annotations,
                                                           ANN_HEALTH: record.to_text()})
    feeder.feed(w.snapshot())
    assert len(sent) == 1 and "driver_version" in sent[0]


def test_prometheus_unreachable_is_no_answer_and_starts_nothing() -> None:
    clock = FakeClock()
    feeder = HealthFeeder(health_of(CONFIG), clock=clock,
                          query=lambda q: QueryError(None, "connection refused"))
    w = World(4, policy(maxParallel=1, maxUnavailable=4))
    w.plan(0)
    w.plan(0)
    w.ready("node-0001")
    first = plan(feeder.feed(w.snapshot()), EPOCH + 1)  # stores the record
    w.apply(first.actions)
    w.status = first.status
    clock.t = EPOCH + 20
    second = plan(feeder.feed(w.snapshot()), EPOCH + 20)
    assert "query error" in second.status["status"]["message"]
    assert not [a for a in second.actions if type(a).__name__ == "DeleteDriverPod"]
    assert w.on(NEW_REV) == ["node-0001"]


def test_an_invalid_section_fails_closed_with_the_located_error() -> None:
    section = health_of(CONFIG.replace("within: 5m", "within: 0s"))
    assert section.config is None and section.error is not None
    assert section.error.startswith("reconciler.yaml:8:") and "[health-duration]" in section.error
    feeder = HealthFeeder(section, clock=FakeClock())
    w = World(3, policy())
    w.plan(0)
    result = plan(feeder.feed(w.snapshot()), EPOCH)
    assert not [a for a in result.actions if type(a).__name__ == "DeleteDriverPod"]
    assert "health-duration" in result.status["status"]["message"]


def test_no_section_leaves_the_snapshot_alone() -> None:
    feeder = HealthFeeder(health_of("rollout: {readyTimeout: 5m}\n"), clock=FakeClock())
    snap = World(2, policy()).snapshot()
    assert feeder.feed(snap) is snap


def test_a_cluster_section_replaces_the_top_level_one() -> None:
    text = CONFIG + "clusters:\n  prod-a:\n    health:\n      prometheus: {url: http://p:9090}\n"
    assert health_of(text, cluster="prod-a").config is not None
    own = health_of(text, cluster="prod-a").config
    assert own is not None and own.node_checks == () and own.prometheus_url == "http://p:9090"
    top = health_of(text, cluster="prod-b").config
    assert top is not None and len(top.node_checks) == 2


def test_run_role_controller_reads_health_from_repo_config(tmp_path: Path) -> None:
    """``reconciler run --role controller --repo-config F``: the feeder the daemon builds, over
    the live view of F, which is read again when F changes."""
    from reconciler.settings.live import LiveSettings, RepoConfigWatch

    path = tmp_path / "reconciler.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    live = LiveSettings(None)
    watch = RepoConfigWatch(path, live)
    watch.check()
    feeder = HealthFeeder(lambda: live.current().health)
    assert isinstance(feeder, HealthFeeder) and feeder.section.config is not None
    assert [c.name for c in feeder.section.config.node_checks] == ["gpus-available",
                                                                   "driver-reported"]
    path.write_text(CONFIG.replace("'== 1'", "'= 1'"), encoding="utf-8")
    watch.check()
    failing = feeder
    assert failing.section.config is None
    error = failing.section.error or ""
    assert f"{path}:7:15:" in error and "health-expect" in error
    path.write_text("rollout: {readyTimeout: 5m}\n", encoding="utf-8")
    watch.check()
    # no section: the feeder passes snapshots through (F may get one again)
    assert not feeder.section.present and live.current().rollout.ready_timeout == 300.0


def test_the_section_is_read_again_when_the_commit_changes_it() -> None:
    """docs/health.md: ``health`` is read at every commit. The daemon's feeder follows the commit
    the sync read last: a section added, made invalid and fixed again takes effect at once."""
    from reconciler.settings.live import LiveSettings

    live = LiveSettings(None)

    def current() -> HealthSection:
        return live.current().health

    sent: list[str] = []
    feeder = HealthFeeder(current, clock=FakeClock(), query=lambda q: sent.append(q) or 1.0)
    w = verifying_world(1)
    snap = w.snapshot()
    assert feeder.feed(snap) is snap  # no commit read yet: no section, no gates
    live.offer(load(CONFIG), source="commit 1")
    gated = feeder.feed(w.snapshot())
    assert gated.health is not None and gated.health.config is not None and sent
    live.offer(load(CONFIG.replace("within: 5m", "within: 0s")),
               source="commit 2")
    closed = feeder.feed(w.snapshot())
    assert closed.health is not None and closed.health.config is None
    assert closed.health.error is not None and "[health-duration]" in closed.health.error
    live.offer(load("rollout: {readyTimeout: 5m}\n"), source="commit 3")
    plain = w.snapshot()
    assert feeder.feed(plain) is plain  # the section removed: no gates again


def test_a_loaded_repo_config_keeps_its_findings_for_the_sections_read_from_it() -> None:
    assert load(CONFIG) == load(CONFIG) and load(CONFIG).findings == ()
    assert load("").findings == () and load("").obj == {}
    broken = load(CONFIG.replace("within: 5m", "within: 0s"))
    assert [f.rule for f in broken.errors] == ["health-duration"]
    section = health_of(CONFIG.replace("within: 5m", "within: 0s"))
    assert section.error is not None and section.error.startswith(
        f"reconciler.yaml:{broken.errors[0].line}:{broken.errors[0].column}: ")
