"""``reconciler validate`` end to end: real files, real git repositories, the installed command."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.policy.commands import git
from tests.policy.commands import validate as run
from tests.policy.texts import EXAMPLES, SEED_10, replace_line

RECONCILER = [sys.executable, "-m", "reconciler.cli.main"]
LAB = "clusters/lab-10/cluster-operator.yaml"
#: the infos every example policy gets (docs/validation.md#severities)
INFO_RULES = {"crd-required-field", "not-acted-on"}


def lines(stdout: str) -> list[str]:
    """The text or github output's errors and warnings (infos left out)."""
    return [line for line in stdout.splitlines()
            if ": info: " not in line and not line.startswith("::notice ")]


def reported(stdout: str) -> list[dict[str, object]]:
    """The json output's errors and warnings (infos left out)."""
    return [f for f in json.loads(stdout) if f["severity"] != "info"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of examples-repo as its own git repository, on branch main."""
    root = tmp_path / "policy"
    shutil.copytree(EXAMPLES, root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial policy")
    return root


def test_examples_repo_is_valid(repo: Path) -> None:
    result = run(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert lines(result.stdout) == []
    assert {line.rsplit("[", 1)[1].rstrip("]") for line in result.stdout.splitlines()
            } <= INFO_RULES
    assert "file(s) valid" in result.stderr


def test_text_format_is_like_a_compiler(repo: Path) -> None:
    path = repo / LAB
    path.write_text(replace_line(path.read_text(), 31, '      maxParallel: "50 %"'))
    result = run(repo, LAB)
    assert result.returncode == 1
    assert lines(result.stdout) == [
        f"{LAB}:31:20: error: upgradePolicy.maxParallel: expected an integer >= 1 or a percentage "
        "like '50%' (digits followed by '%'), got string '50 %'; remove the spaces: '50%' "
        "[percent-format]"]


def test_json_format_has_exactly_the_contract_keys(repo: Path) -> None:
    path = repo / LAB
    path.write_text(path.read_text().replace("pause: false", 'pause: "false"')
                    + "status: {}\n")
    result = run(repo, "--format", "json")
    assert result.returncode == 1
    assert {tuple(sorted(f)) for f in json.loads(result.stdout)} == {
        ("column", "file", "line", "message", "pointer", "rule", "severity")}
    findings = reported(result.stdout)
    assert [(f["rule"], f["severity"], f["line"]) for f in findings] == [
        ("schema-type", "error", 30),
        ("server-populated-field", "warning", len(path.read_text().splitlines()))]  # the last
    assert findings[0]["pointer"] == "/spec/driver/upgradePolicy/pause"
    assert findings[0]["file"] == LAB


def test_github_format_escapes_annotations(repo: Path) -> None:
    path = repo / LAB
    path.write_text(path.read_text().replace("maxParallel: 100%", "maxParallel: 101%"))
    result = run(repo, "--format", "github", "clusters")
    assert result.returncode == 1
    assert lines(result.stdout) == [
        f"::error file={LAB},line=31,col=20,title=percent-range::upgradePolicy.maxParallel: "
        "expected a percentage from 1%25 to 100%25, got '101%25'"]


def test_warnings_alone_exit_zero(repo: Path) -> None:
    path = repo / LAB
    path.write_text(path.read_text().replace(
        "  name: cluster-operator", "  name: cluster-operator\n  uid: 7c1e-ab"))
    result = run(repo)
    assert result.returncode == 0
    assert "warning: metadata.uid is set by the API server" in result.stdout


def test_usage_errors_exit_two(repo: Path) -> None:
    assert run(repo, "does-not-exist.yaml").returncode == 2
    assert run(repo, "--format", "xml").returncode == 2
    missing_ref = run(repo, "--against", "no-such-branch")
    assert missing_ref.returncode == 2
    assert "unknown git ref 'no-such-branch'" in missing_ref.stderr
    (repo / "empty").mkdir()
    assert run(repo, "empty").returncode == 2


def test_folder_and_file_paths(repo: Path) -> None:
    (repo / "clusters/lab-10/extra.yaml").write_text("kind: [\n")
    assert run(repo, "clusters/prod-100").returncode == 0
    result = run(repo, "clusters")
    assert result.returncode == 1
    assert lines(result.stdout)[0].startswith("clusters/lab-10/extra.yaml:2:1: error: invalid YAML")


def test_status_snapshots_and_config_use_their_schemas(repo: Path) -> None:
    assert run(repo, "status", "reconciler.yaml").returncode == 0
    (repo / "reconciler.yaml").write_text("clustersDir: clusters\nsync: {fetchInterval: 30}\n"
                                          "polling: true\n")
    result = run(repo, "reconciler.yaml")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("reconciler.yaml:2:23: error: sync.fetchInterval: expected a "
                               "duration like '30s'")
    assert lines[1].startswith("reconciler.yaml:3:1: error: unknown field 'polling' at the top")
    (repo / "status/lab-10.yaml").write_text("cluster: lab-10\nobservedAt: yesterday\n"
                                             "upgradeStatus: {phase: Running}\n")
    rules = [line.rsplit("[", 1)[1] for line in run(repo, "status").stdout.splitlines()]
    assert rules == ["schema-pattern]", "schema-enum]"]


def test_one_object_per_cluster_folder(repo: Path) -> None:
    shutil.copy(repo / LAB, repo / "clusters/lab-10/copy.yaml")
    result = run(repo)
    assert result.returncode == 1
    assert "cluster 'lab-10' already has a ClusterOperator" in result.stdout


def test_pull_request_editing_max_parallel_during_rollout_fails(repo: Path) -> None:
    """docs/gitops.md: previous spec from the target branch, phase from the status snapshot."""
    git(repo, "checkout", "-q", "-b", "pr")
    path = repo / LAB
    path.write_text(path.read_text().replace("maxParallel: 100%", "maxParallel: 50% "))
    git(repo, "commit", "-qam", "faster rollout")
    result = run(repo, "--against", "main")
    assert result.returncode == 1
    (line,) = lines(result.stdout)
    assert line.startswith(f"{LAB}:31:20: error: driver.upgradePolicy.maxParallel cannot "
                           "change while the rollout is Progressing")
    assert line.endswith("[transition-locked-field]")
    # prod-100 is Idling: the same change there is fine
    prod = repo / "clusters/prod-100/cluster-operator.yaml"
    prod.write_text(prod.read_text().replace("maxParallel: 50%", "maxParallel: 20%"))
    assert run(repo, "--against", "main", "clusters/prod-100").returncode == 0


def test_pull_request_releasing_the_gate_passes(repo: Path) -> None:
    # The snapshot says the controller set pause: true at the gate; the file still says false.
    # A person's PR that only flips pause is allowed, and so is one that changes nothing.
    assert run(repo, "--against", "main").returncode == 0
    path = repo / LAB
    path.write_text(path.read_text().replace("pause: false ", "pause: true  "))
    assert run(repo, "--against", "main").returncode == 0


def test_snapshot_read_from_the_target_ref_not_the_work_tree(repo: Path) -> None:
    # main moved on: the rollout ended (Idling). A stale PR branch still has the Progressing
    # snapshot, but the check reads the target branch's.
    git(repo, "checkout", "-q", "-b", "pr")
    git(repo, "checkout", "-q", "main")
    snapshot = repo / "status/lab-10.yaml"
    snapshot.write_text(snapshot.read_text().replace("phase: Progressing", "phase: Idling"))
    git(repo, "commit", "-qam", "status: lab-10 Idling")
    git(repo, "checkout", "-q", "pr")
    path = repo / LAB
    path.write_text(path.read_text().replace("maxParallel: 100%", "maxParallel: 50% "))
    assert run(repo, "--against", "main").returncode == 0
    assert run(repo, "--against", "main~1").returncode == 1


def test_firmware_change_during_firmware_upgrade_fails(repo: Path) -> None:
    path = repo / "clusters/fw-lab-4/cluster-operator.yaml"
    path.write_text(path.read_text().replace("fwEnableVirt: false", "fwEnableVirt: true "))
    result = run(repo, "--against", "HEAD", "--format", "json")
    assert result.returncode == 1
    (finding,) = reported(result.stdout)
    assert finding["rule"] == "firmware-locked-field"
    assert finding["pointer"] == "/spec/driver/fwEnableVirt"
    assert "phase AwaitingReboot" in finding["message"]


def test_status_on_another_branch(repo: Path) -> None:
    config = repo / "reconciler.yaml"
    config.write_text(config.read_text().replace("branch: null", "branch: status"))
    git(repo, "commit", "-qam", "status on its own branch")
    git(repo, "branch", "status")
    # on main the snapshot is now Idling, on the status branch it stays Progressing
    snapshot = repo / "status/lab-10.yaml"
    snapshot.write_text(snapshot.read_text().replace("phase: Progressing", "phase: Idling"))
    git(repo, "commit", "-qam", "stale snapshot on main")
    path = repo / LAB
    path.write_text(path.read_text().replace("maxUnavailable: 0 ", "maxUnavailable: 1 "))
    result = run(repo, "--against", "main")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[transition-locked-field]" in result.stdout


def test_many_files_in_parallel_report_the_same(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(80):
        text = SEED_10 if i % 2 else replace_line(SEED_10, 25, "      maxFailureThreshold: 0")
        (folder / f"c{i:03}.yaml").write_text(text)
    result = run(tmp_path, "many", "--format", "json")
    assert result.returncode == 1
    findings = reported(result.stdout)
    assert [f["file"] for f in findings] == [f"many/c{i:03}.yaml" for i in range(0, 80, 2)]
    assert {(f["rule"], f["line"]) for f in findings} == {("schema-minimum", 25)}


def test_module_entry_point_exists() -> None:
    result = subprocess.run([*RECONCILER[:1], "-c",
                             "from reconciler.cli.main import cli; print(cli.get_command(None, "
                             "'validate').name)"], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "validate"
