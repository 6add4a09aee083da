"""``reconciler plan --against REF`` (docs/plan.md): per changed cluster, what merging does, in a
real Git repository (``plan_repo``): table tests of each kind of change, markdown golden files, the
JSON schema of the output, exit codes as ``validate``, and a plan too long for a comment."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from reconciler.cli.main import cli
from reconciler.cli.plan import build_plans, render
from reconciler.cli.validate import find_repository
from reconciler.merge.plan import (
    COMMENT_LIMIT,
    ClusterPlan,
    PlanStep,
    labelled_fleet,
    render_markdown,
)
from reconciler.policy.findings import Finding
from reconciler.rollout.model import PlannerSettings
from reconciler.rollout.simulator import SimConfig, simulate
from reconciler.timefmt import format_seconds
from tests.fleet.plan_repo import (
    BETA_HELD_UNTIL,
    NEW,
    OLD,
    bump,
    edit,
    make_repository,
    policy_path,
)
from tests.policy.commands import git, reconciler

pytestmark = pytest.mark.slow  # CLI runs as child processes: minutes on a loaded machine

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data" / "plan"
SCHEMA = json.loads((REPO / "schemas" / "plan.schema.json").read_text())
#: a fixed "now" for in-process plans (2026-12-01T12:00:00Z), so goldens do not move
NOW = 1796126400.0

Edit = Callable[[Path], None]


def plans_of(root: Path, monkeypatch: pytest.MonkeyPatch, *, only: str | None = None
             ) -> tuple[list[ClusterPlan], list[Finding]]:
    monkeypatch.chdir(root)
    return build_plans(find_repository(root), "main", now=NOW, only=only)


def by_cluster(plans: list[ClusterPlan]) -> dict[str, ClusterPlan]:
    return {plan.cluster: plan for plan in plans}


def steps(plan: ClusterPlan) -> list[tuple[int | None, str | float | None]]:
    return [(s["nodes"], s["pause"]) for s in plan.to_json()["steps"]]


def alpha_model_seconds() -> float:
    """alpha's rollout on the model itself: 20 nodes, 30 s per install, gates released."""
    from reconciler.policy.validation import validate_document
    from tests.fleet.plan_repo import policy_text

    obj = validate_document(policy_text(NEW), "p.yaml").obj
    result = simulate(obj["spec"]["driver"], SimConfig(
        nodes=20, from_version=OLD, install_seconds=30.0, auto_confirm=0.0,
        settings=PlannerSettings(ready_timeout=600.0)))
    assert result.completed
    return round(result.duration_seconds, 1)


def test_a_version_bump_starts_a_rollout_resolved_for_the_measured_fleet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_repository(tmp_path)
    bump(root, "alpha")
    plans, others = plans_of(root, monkeypatch)
    assert [p.cluster for p in plans] == ["alpha"] and others == []
    alpha = plans[0]
    assert (alpha.change, alpha.from_version, alpha.to_version) == ("rollout", OLD, NEW)
    assert (alpha.nodes, alpha.nodes_source) == (20, "fleet.nodes")
    assert (alpha.install_seconds, alpha.install_assumed) == (30.0, False)
    # 2 (a gate), 5 (3 more), 8 (3 more), 100% of 20 (12 more), each then 10 s
    assert steps(alpha) == [(2, "gate"), (3, 10.0), (3, 10.0), (12, 10.0)]
    assert alpha.gates == 1
    # four batches of one install each (30 s, maxParallel 100%) and three 10 s pauses; the
    # gate released at once
    assert alpha.predicted_seconds == alpha_model_seconds() == 150.0
    assert alpha.predicted_end == format_seconds(NOW + 150)
    assert alpha.held_until is None and alpha.findings == ()


def test_each_steps_toleration_is_resolved_and_shown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/rollout.md#failures-tolerated-in-a-step: step 2 tolerates 50% of its 3 nodes (2),
    step 4 one; the others none. The tables show the column, the JSON each step's count."""
    root = make_repository(tmp_path)
    bump(root, "alpha")
    edit(root, policy_path("alpha"), "        - replicas: 5\n",
         "        - replicas: 5\n          toleration: 50%\n")
    edit(root, policy_path("alpha"), "        - replicas: 100%\n",
         "        - replicas: 100%\n          toleration: 1\n")
    [alpha] = plans_of(root, monkeypatch)[0]
    out = alpha.to_json()
    Draft202012Validator(SCHEMA["$defs"]["Step"]).validate(out["steps"][0])
    assert [s["toleration"] for s in out["steps"]] == [0, 2, 0, 1]
    assert steps(alpha) == [(2, "gate"), (3, 10.0), (3, 10.0), (12, 10.0)]
    text = render("text", [alpha], [], against="main")
    assert "  step replicas  nodes target  tolerate  pause" in text
    assert "     2        5      3      5   2 (50%)  10s" in text
    assert "     4     100%     12     20         1  10s" in text
    markdown = render("markdown", [alpha], [], against="main")
    assert "| 2 | 5 | 3 | 5 | 2 (50%) | 10s |" in markdown
    tables_are_whole(markdown)
    # node count unknown: nothing resolves
    gamma_like = replace(alpha, steps=tuple(replace(s, toleration=None) for s in alpha.steps))
    assert "       ?  gate" in render("text", [gamma_like], [], against="main")


SETTINGS_ONLY: Edit = lambda root: edit(  # noqa: E731
    root, "reconciler.yaml", "  beta:\n", "  gamma:\n    rollout: {readyTimeout: 20m}\n  beta:\n")


def firmware(root: Path) -> None:
    edit(root, policy_path("fw"), "fwUpgradePolicy: Never", "fwUpgradePolicy: PreferCloud")


def refused(root: Path) -> None:
    bump(root, "alpha")
    edit(root, policy_path("alpha"), "maxParallel: 100%", "maxParallel: 50 %")


def comments_only(root: Path) -> None:
    edit(root, policy_path("gamma"), "      fallback: pause\n",
         "      fallback: pause  # as before\n")


def policy_tuning(root: Path) -> None:
    edit(root, policy_path("gamma"), "maxFailureThreshold: 3", "maxFailureThreshold: 4")


@pytest.mark.parametrize(("name", "change", "expected"), [
    ("settings only", SETTINGS_ONLY,
     {"gamma": {"change": "settings", "settings_changes": ["rollout.readyTimeout"],
                "policy_changes": [], "steps": [], "predicted_seconds": None}}),
    ("policy tuning", policy_tuning,
     {"gamma": {"change": "settings",
                "policy_changes": ["spec.driver.upgradePolicy.maxFailureThreshold"]}}),
    ("firmware", firmware,
     {"fw": {"change": "firmware", "firmware": True, "from_version": OLD, "to_version": OLD,
             "steps": []}}),
    ("promotion hold", lambda root: bump(root, "beta"),
     {"beta": {"change": "held", "held_until": BETA_HELD_UNTIL, "nodes": 8,
               "install_assumed": True, "install_seconds": 60.0}}),
    ("unknown fleet", lambda root: bump(root, "gamma"),
     {"gamma": {"change": "rollout", "nodes": None, "predicted_seconds": None,
                "predicted_end": None, "install_assumed": True}}),
    ("comments only", comments_only,
     {"gamma": {"change": "none", "policy_changes": [], "settings_changes": []}}),
    ("cluster removed", lambda root: shutil.rmtree(root / "clusters" / "gamma"),
     {"gamma": {"change": "none", "from_version": OLD, "to_version": None, "steps": []}}),
    ("no change", lambda root: None, {}),
])
def test_each_kind_of_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                             change: Edit, expected: dict[str, dict[str, Any]]) -> None:
    root = make_repository(tmp_path)
    change(root)
    plans, others = plans_of(root, monkeypatch)
    found = {p.cluster: p.to_json() for p in plans}
    assert sorted(found) == sorted(expected), name
    for cluster, keys in expected.items():
        assert {k: found[cluster][k] for k in keys} == keys, (name, found[cluster])
    assert others == []


def test_held_steps_and_prediction_start_when_the_gate_opens(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_repository(tmp_path)
    bump(root, "beta")
    (beta,) = plans_of(root, monkeypatch)[0]
    # 8 nodes: the last step adds none, its pause still applies
    assert steps(beta) == [(2, "gate"), (3, 10.0), (3, 10.0), (0, 10.0)]
    assert beta.predicted_start == BETA_HELD_UNTIL
    assert beta.predicted_seconds is not None
    assert [f.rule for f in beta.findings] == ["promotion-gate"]


#: alpha's own rollout section: its nodes drained first, one node at a time per domain of a
#: label the plan does not know (every node in the unlabelled domain)
DRAIN_AND_TOPOLOGY = """\
  alpha:
    rollout:
      drain: {timeout: 5m}
      topology: {key: topology.kubernetes.io/zone, maxUnavailablePerDomain: 1}
"""


def test_a_rollout_with_drain_and_topology_is_predicted_as_the_controller_runs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42: ``plan`` predicts with the planner settings the controller plans each pass with
    (``PlannerSettings.for_pass`` of the cluster's ``rollout`` section, drain and topology
    included), so its steps and end are those of ``reconciler simulate`` on the same
    reconciler.yaml and fleet, and no longer those of a rollout without them."""
    root = make_repository(tmp_path)
    bump(root, "alpha")
    [plain] = plans_of(root, monkeypatch)[0]
    (root / "reconciler.yaml").write_text(
        (root / "reconciler.yaml").read_text() + DRAIN_AND_TOPOLOGY)
    [alpha] = plans_of(root, monkeypatch)[0]
    assert alpha.change == "rollout" and alpha.findings == ()
    assert "rollout.drain" in alpha.settings_changes and "rollout.topology" in (
        alpha.settings_changes)
    result = CliRunner().invoke(cli, [
        "simulate", str(root / policy_path("alpha")), "--nodes", "20", "--from-version", OLD,
        "--install-seconds", "30", "--auto-confirm", "0", "--repo-config",
        str(root / "reconciler.yaml"), "--cluster", "alpha", "--format", "json"])
    assert result.exit_code == 0, result.output
    simulated = json.loads(result.output)
    started: dict[int, int] = {}
    step = 0
    for event in simulated["events"]:
        if event["type"] in ("RolloutStarted", "StepStarted"):
            step = event["step"]
        if event["type"] == "NodeUpgradeStarted":
            started[step] = started.get(step, 0) + 1
    # the same steps: the nodes each adds, as the simulated run started them
    assert [nodes for nodes, _ in steps(alpha)] == [started.get(i, 0) for i in range(1, 5)]
    assert alpha.predicted_seconds == round(simulated["duration_seconds"], 1)
    assert alpha.predicted_end == format_seconds(NOW + alpha.predicted_seconds)
    # one node at a time in the one domain: far longer than the four waves without them
    assert plain.predicted_seconds == 150.0 and alpha.predicted_seconds > 20 * 30.0
    assert any("rollout.topology" in note for note in alpha.notes)
    assert any("rollout.drain" in note for note in alpha.notes)


SPREAD = """\
  alpha:
    rollout:
      topology: {key: topology.kubernetes.io/zone, order: spread, maxUnavailablePerDomain: 1}
"""
ZONES = {"zone-a": 12, "zone-b": 6, "(no label)": 2}


def test_the_topology_domains_of_the_snapshot_are_the_fleet_the_plan_predicts_with(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sync counts the rollout nodes per domain of the topology key into the snapshot's
    ``fleet.domains``: ``plan`` predicts on nodes labelled so, the end ``simulate --nodes-file``
    gives on a fleet of the same domains, not the one-domain end."""
    root = make_repository(tmp_path)
    (root / "reconciler.yaml").write_text((root / "reconciler.yaml").read_text() + SPREAD)
    git(root, "commit", "-q", "-am", "alpha rolls out zone by zone")
    bump(root, "alpha")
    [one_domain] = plans_of(root, monkeypatch)[0]
    assert one_domain.domains is None
    assert any("counted no domains of topology.kubernetes.io/zone" in note
               for note in one_domain.notes)
    snapshot = root / "status" / "alpha.yaml"

    def snapshot_on_main(old: str, new: str, subject: str) -> None:
        """The status commit on main (the snapshot is read at the ref)."""
        git(root, "checkout", "-q", "main")
        snapshot.write_text(snapshot.read_text().replace(old, new))
        git(root, "commit", "-q", "-m", subject, str(snapshot))
        git(root, "checkout", "-q", "change")

    snapshot_on_main("fleet: {nodes: 20, installSeconds: 30}",
                     "fleet: {nodes: 20, installSeconds: 30, domains: {key: "
                     "topology.kubernetes.io/zone, nodes: {zone-a: 12, zone-b: 6, "
                     "(no label): 2}}}", "alpha's snapshot counted its zones")
    [alpha] = plans_of(root, monkeypatch)[0]
    assert alpha.domains == ZONES
    fleet = labelled_fleet("topology.kubernetes.io/zone", ZONES)
    assert [name for name, _ in fleet] == [f"node-{i:05d}" for i in range(1, 21)]
    assert [labels for _, labels in fleet].count({}) == 2
    assert alpha.to_json()["domains"] == ZONES
    Draft202012Validator(SCHEMA).validate({"clusters": [alpha.to_json()]})
    nodes = [{"name": f"gpu-{domain.strip('()').replace(' ', '-')}-{i}",
              "labels": {} if domain == "(no label)" else {"topology.kubernetes.io/zone": domain}}
             for domain, count in ZONES.items() for i in range(count)]
    (tmp_path / "nodes.json").write_text(json.dumps({"nodes": nodes}))
    result = CliRunner().invoke(cli, [
        "simulate", str(root / policy_path("alpha")), "--nodes-file", str(tmp_path / "nodes.json"),
        "--from-version", OLD, "--install-seconds", "30", "--auto-confirm", "0",
        "--repo-config", str(root / "reconciler.yaml"), "--cluster", "alpha", "--format", "json"])
    assert result.exit_code == 0, result.output
    simulated = json.loads(result.output)
    assert alpha.predicted_seconds == round(simulated["duration_seconds"], 1)
    # three domains one node each at a time: sooner than one node at a time in one domain
    assert alpha.predicted_seconds is not None and one_domain.predicted_seconds is not None
    assert alpha.predicted_seconds < one_domain.predicted_seconds
    # counts for another key, or that no longer add up to the nodes: one domain, and why
    snapshot_on_main("zone-a: 12", "zone-a: 11", "a node left")
    [stale] = plans_of(root, monkeypatch)[0]
    assert stale.domains is None and stale.predicted_seconds == one_domain.predicted_seconds
    assert any("hold 19 nodes, not 20" in note for note in stale.notes)


@pytest.mark.parametrize("nodes", [100_001, 2**63, 10**30])
def test_a_fleet_past_the_model_is_resolved_but_not_simulated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: int) -> None:
    """A snapshot's node count past what the model runs (or past int64: a hand-edited file)
    gives the steps and a note, never a run that does not end."""
    root = make_repository(tmp_path)
    git(root, "checkout", "-q", "main")
    snapshot = root / "status" / "alpha.yaml"
    snapshot.write_text(snapshot.read_text().replace("nodes: 20,", f"nodes: {nodes},"))
    git(root, "commit", "-q", "-am", "a fleet past the model")
    git(root, "checkout", "-q", "change")
    git(root, "merge", "-q", "main")
    bump(root, "alpha")
    [alpha] = plans_of(root, monkeypatch)[0]
    # (the YAML reader gives a number past 2**64 as one past int64, still past the model)
    assert alpha.nodes == min(nodes, 2**63 + 1) and alpha.predicted_seconds is None
    assert [n for n, _ in steps(alpha)][:3] == [2, 3, 3]
    assert any("past the 100,000 the model runs" in note for note in alpha.notes)


def test_refused_carries_the_findings_exactly_as_validate_gives_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_repository(tmp_path)
    refused(root)
    done = reconciler(root, "plan", "--against", "main", "--format", "json")
    assert done.returncode == 1, done.stderr
    output = json.loads(done.stdout)
    Draft202012Validator(SCHEMA).validate(output)
    (alpha,) = output["clusters"]
    assert alpha["change"] == "refused" and alpha["steps"] == []
    checked = reconciler(root, "validate", "--against", "main", "--format", "json")
    assert checked.returncode == 1
    given = json.loads(checked.stdout)
    # plan leaves out the infos (docs/validation.md#severities: they change nothing a merge
    # does); every other finding is validate's, exactly
    assert {f["severity"] for f in given} == {"error", "info"}
    assert alpha["findings"] == [f for f in given if f["severity"] != "info"] != []


def several(root: Path) -> None:
    bump(root, "alpha")
    bump(root, "beta")
    bump(root, "gamma")
    firmware(root)
    edit(root, "reconciler.yaml", "readyTimeout: 10m", "readyTimeout: 15m")


def test_several_clusters_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_repository(tmp_path)
    several(root)
    plans = by_cluster(plans_of(root, monkeypatch)[0])
    assert {name: plan.change for name, plan in plans.items()} == {
        "alpha": "rollout", "beta": "held", "fw": "firmware", "gamma": "rollout",
        "lab": "settings"}
    assert all(p.settings_changes == ("rollout.readyTimeout",) for p in plans.values())
    # the PATH of one cluster (its folder or a file in it) plans that cluster alone
    for path in ("clusters/alpha", policy_path("alpha")):
        done = reconciler(root, "plan", "--against", "main", "--format", "json", path)
        assert done.returncode == 0, done.stderr
        assert [c["cluster"] for c in json.loads(done.stdout)["clusters"]] == ["alpha"]


@pytest.mark.parametrize(("golden", "change"), [
    ("several.md", several),
    ("refused.md", refused),
    ("no-change.md", lambda root: None),
])
def test_markdown_golden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, golden: str,
                         change: Edit) -> None:
    root = make_repository(tmp_path)
    change(root)
    plans, others = plans_of(root, monkeypatch)
    text = render("markdown", plans, others, against="main")
    path = DATA / golden
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()
    # deterministic: the same inputs give the same comment
    again = render("markdown", *plans_of(root, monkeypatch), against="main")
    assert again == text


def test_json_output_matches_the_schema_and_exit_codes_are_validates(tmp_path: Path) -> None:
    root = make_repository(tmp_path)
    bump(root, "alpha")
    done = reconciler(root, "plan", "--against", "main", "--format", "json")
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)
    Draft202012Validator(SCHEMA).validate(output)
    assert [c["cluster"] for c in output["clusters"]] == ["alpha"]
    assert set(output["clusters"][0]) >= {
        "cluster", "change", "from_version", "to_version", "nodes", "steps",
        "predicted_seconds", "predicted_end", "held_until", "findings"}
    git(root, "checkout", "-q", "--", ".")
    several(root)
    done = reconciler(root, "plan", "--against", "main", "--format", "json")
    assert done.returncode == 1  # beta is held: an error, as validate says
    Draft202012Validator(SCHEMA).validate(json.loads(done.stdout))
    text = reconciler(root, "plan", "--against", "main")
    assert text.returncode == 1 and "beta: is held by the promotion gate" in text.stdout
    assert reconciler(root, "plan", "--against", "no-such-ref").returncode == 2
    assert reconciler(root, "plan").returncode == 2  # --against is required
    git(root, "commit", "-q", "-am", "the change")
    done = reconciler(root, "plan", "--against", "HEAD", "--format", "markdown")
    assert done.returncode == 0 and "merging changes nothing" in done.stdout


def long_plan(index: int) -> ClusterPlan:
    message = "a finding whose message is long | with a pipe\nand a newline " + "x" * 200
    finding = Finding(f"clusters/c{index:04d}/cluster-operator.yaml", 3, 5, "/spec", "rule-x",
                      "error", message)
    steps = tuple(PlanStep(i, f"{i * 10}%", 7, i * 7, None if i % 3 == 0 else 30.0)
                  for i in range(1, 11))
    return ClusterPlan(f"c{index:04d}", "refused", OLD, NEW, 70, "fleet.nodes", steps=steps,
                       findings=(finding,) * 3)


def tables_are_whole(text: str) -> None:
    """Every table has its header and separator, and each row as many cells as its header."""
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        if not lines[index].startswith("|"):
            index += 1
            continue
        header = lines[index]
        assert lines[index + 1].startswith("|---") or lines[index + 1].startswith("|--:"), \
            lines[index + 1]
        cells = header.replace("\\|", "").count("|")
        index += 1
        while index < len(lines) and lines[index].startswith("|"):
            assert lines[index].replace("\\|", "").count("|") == cells, lines[index]
            index += 1


@pytest.mark.parametrize("clusters", [3, 200, 3000])
def test_a_long_plan_is_summarised_never_cut_inside_a_table(clusters: int) -> None:
    plans = [long_plan(i) for i in range(clusters)]
    text = render_markdown(plans, against="main")
    assert len(text) <= COMMENT_LIMIT
    tables_are_whole(text)
    if clusters == 3:
        assert text.count("### c0") == 3 and "left out" not in text
    elif clusters == 200:
        # every cluster in the summary table, the sections that fit, and the count of the rest
        assert all(f"| c{i:04d} |" in text for i in range(clusters))
        shown = text.count("### c")
        assert 0 < shown < clusters
        assert f"_{clusters - shown} cluster section(s) left out" in text
    else:
        listed = sum(f"| c{i:04d} |" in text for i in range(clusters))
        assert 0 < listed < clusters and "### c" not in text
        assert f"_{clusters - listed} more cluster(s) not listed" in text


def test_markdown_keeps_what_files_say_inert() -> None:
    message = "msg <img src=x> | `code` [link](http://x.example)\n## a heading\x1b[2J"
    plan = ClusterPlan("c|1", "refused", "<b>1</b>", "`2`", None, None,
                       findings=(Finding("f|.yaml", 1, 1, "", "r", "error", message),))
    text = render_markdown([plan], against="main")
    tables_are_whole(text)
    assert re.search(r"(?<!\\)[<>]", text) is None  # every angle bracket escaped
    for raw in ("[link](", "\n## a heading", "\x1b", "`2`"):
        assert raw not in text, raw
    assert "\\<img src=x\\> \\| \\`code\\`" in text


@pytest.mark.parametrize("clusters", [0, 3, 200])
def test_thousands_of_other_findings_still_fit_a_comment(clusters: int) -> None:
    """Findings outside the clusters' sections (a reconciler.yaml with 3,000 sinks) are
    counted once the comment is full; with clusters they take at most a quarter of it."""
    others = [Finding("reconciler.yaml", i, 3, "", "notify-url", "warning", "m" * 120)
              for i in range(1, 3001)]
    text = render_markdown([long_plan(i) for i in range(clusters)], against="main",
                           other_findings=others)
    assert len(text) <= COMMENT_LIMIT
    tables_are_whole(text)
    listed = text.count("| reconciler.yaml:")
    assert 0 < listed < 3000
    assert f"_{3000 - listed} more finding(s) not listed to fit a comment" in text
    if clusters:
        assert all(f"| c{i:04d} |" in text for i in range(clusters))
    few = render_markdown([], against="main", other_findings=others[:2])
    assert few.count("| reconciler.yaml:") == 2 and "not listed" not in few
