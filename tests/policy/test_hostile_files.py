"""Files a pull request can carry (issue 15, item 4): a symbolic link (to /dev/zero, to a FIFO,
out of the repository, inside it), a FIFO, a huge file, a folder that is a link. Every command
that reads a policy, config or faults file reads what the daemon reads from a commit: never a
link's target, never more than the size limit, never a silent skip. Each case runs the real
command as a child process bounded in time and memory, and asserts the exit code, the located
message, and that it ended."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.policy.commands import git, reconciler, reported
from tests.policy.texts import EXAMPLES, SEED_10

pytestmark = pytest.mark.slow  # CLI runs as child processes: minutes on a loaded machine

LAB = "clusters/lab-10/cluster-operator.yaml"
LINK_REASON = "not followed: the reconciler reads a link's text from the commit"
#: a sparse file far over the 1 MiB limit (and over the child's address space): reading it
#: before checking its size would fail with a MemoryError, not the located refusal
HUGE = 8 * 1024**3


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "policy"
    shutil.copytree(EXAMPLES, root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial policy")
    return root


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _huge(path: Path) -> Path:
    with path.open("wb") as handle:
        handle.truncate(HUGE)
    return path


def _outside(tmp_path: Path) -> Path:
    """A valid policy outside the repository: validating the link's target would pass."""
    path = tmp_path / "outside.yaml"
    path.write_text(SEED_10)
    return path


LinkTarget = Callable[[Path, Path], str]

#: what a link in the repository points at: (name, make(tmp_path, repo) -> target text)
LINK_TARGETS: list[tuple[str, LinkTarget]] = [
    ("dev-zero", lambda tmp, repo: "/dev/zero"),
    ("fifo", lambda tmp, repo: str(_fifo(tmp / "pipe"))),
    ("file-outside", lambda tmp, repo: str(_outside(tmp))),
    ("file-inside", lambda tmp, repo: "../prod-100/cluster-operator.yaml"),
    ("huge-file", lambda tmp, repo: str(_huge(tmp / "huge.yaml"))),
    ("dangling", lambda tmp, repo: str(tmp / "nowhere.yaml")),
]


@pytest.mark.parametrize(("name", "target"), LINK_TARGETS, ids=[n for n, _ in LINK_TARGETS])
@pytest.mark.parametrize("mode", ["repository", "path"])
def test_validate_reports_a_policy_link_by_name_never_reading_its_target(
    repo: Path, tmp_path: Path, name: str, target: LinkTarget, mode: str
) -> None:
    policy = repo / LAB
    policy.unlink()
    text = target(tmp_path, repo)
    policy.symlink_to(text)
    result = reconciler(repo, "validate", *([] if mode == "repository" else [LAB]))
    assert result.returncode == 1, result.stdout + result.stderr
    assert reported(result.stdout) == [
        f"{LAB}:1:1: error: a symbolic link (to '{text}'), {LINK_REASON}, not the file it "
        "points to; commit the file itself [symlink]"]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("mode", ["repository", "path", "folder"])
def test_validate_reports_a_fifo_without_waiting_for_a_writer(repo: Path, mode: str) -> None:
    _fifo(repo / "clusters/lab-10/pipe.yaml")
    args = {"repository": [], "path": ["clusters/lab-10/pipe.yaml"], "folder": ["clusters"]}
    result = reconciler(repo, "validate", *args[mode])
    assert result.returncode == 1, result.stdout + result.stderr
    assert reported(result.stdout) == [
        "clusters/lab-10/pipe.yaml:1:1: error: a FIFO (named pipe), not a regular file; only "
        "regular files are read [not-regular-file]"]


def test_validate_refuses_an_oversized_file_before_reading_it(repo: Path) -> None:
    _huge(repo / "clusters/lab-10/huge.yaml")
    result = reconciler(repo, "validate", "--format", "json")
    assert result.returncode == 1, result.stderr
    assert f'"message": "file is {HUGE} bytes, more than the limit of 1048576 bytes' \
        in result.stdout
    assert '"rule": "file-too-large"' in result.stdout


def test_validate_refuses_a_device_named_on_the_command_line(repo: Path) -> None:
    result = reconciler(repo, "validate", "/dev/zero")
    assert result.returncode == 1, result.stderr
    text = "\n".join(reported(result.stdout))
    assert text.startswith("/dev/zero:1:1: error: a character device, not a regular "
                           "file")


def test_a_link_inside_a_named_folder_is_an_error_and_not_followed(
    repo: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "broken.yaml").write_text("kind: [\n")  # would be a syntax error if walked
    (repo / "clusters/lab-10/more").symlink_to(elsewhere)
    (repo / "clusters/lab-10/pipe-link.yaml").symlink_to("/dev/zero")
    result = reconciler(repo, "validate", "clusters")
    assert result.returncode == 1, result.stdout + result.stderr
    lines = reported(result.stdout)
    assert [line.rsplit(" [", 1)[1] for line in lines] == ["symlink]", "symlink]"]
    assert {line.split(":", 1)[0] for line in lines} == {
        "clusters/lab-10/more", "clusters/lab-10/pipe-link.yaml"}
    assert "broken.yaml" not in result.stdout


def test_a_named_file_below_a_linked_folder_names_the_link(repo: Path, tmp_path: Path) -> None:
    shutil.copytree(repo / "clusters/lab-10", tmp_path / "lab-copy")
    (repo / "clusters/lab-link").symlink_to(tmp_path / "lab-copy")
    result = reconciler(repo, "validate", "clusters/lab-link/cluster-operator.yaml")
    assert result.returncode == 1, result.stdout + result.stderr
    text = "\n".join(reported(result.stdout))
    assert text.startswith(
        f"clusters/lab-link:1:1: error: a symbolic link (to '{tmp_path / 'lab-copy'}'), "
        f"{LINK_REASON}")


def test_repository_mode_never_skips_a_cluster_silently(repo: Path, tmp_path: Path) -> None:
    (repo / "clusters/linked").symlink_to(repo / "clusters/lab-10")
    (repo / "clusters/empty-policy").mkdir()
    (repo / "clusters/empty-policy/README.md").write_text("policy goes here\n")
    result = reconciler(repo, "validate")
    assert result.returncode == 1, result.stdout + result.stderr
    assert reported(result.stdout) == [
        "clusters/empty-policy:1:1: error: cluster folder 'empty-policy' holds no policy file "
        "(*.yaml, *.yml): the reconciler would apply nothing there; add its ClusterOperator or "
        "remove the folder [no-policy]",
        f"clusters/linked:1:1: error: a symbolic link (to '{repo / 'clusters/lab-10'}'), "
        f"{LINK_REASON}, not the file it points to; commit the file itself [symlink]",
    ]


def test_a_linked_config_is_reported_and_its_target_not_used(repo: Path, tmp_path: Path) -> None:
    config = repo / "reconciler.yaml"
    config.unlink()
    config.symlink_to("/dev/zero")
    result = reconciler(repo, "validate")
    assert result.returncode == 1, result.stdout + result.stderr
    text = "\n".join(reported(result.stdout))
    assert text.startswith("reconciler.yaml:1:1: error: a symbolic link (to "
                           "'/dev/zero')")


def test_against_a_linked_status_snapshot_is_a_located_error(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "pr")
    shutil.copytree(repo / "clusters/prod-100", repo / "clusters/new-one")
    (repo / "status/new-one.yaml").symlink_to("/dev/zero")
    result = reconciler(repo, "validate", "--against", "main", "clusters/new-one")
    assert result.returncode == 1, result.stdout + result.stderr
    text = "\n".join(reported(result.stdout))
    assert text.startswith("status/new-one.yaml:1:1: error: a symbolic link (to "
                           "'/dev/zero')")


# -- simulate, dev-cluster, run, firmware ----------------------------------------------------

SIM = ["--nodes", "10", "--from-version", "2.32.0.6"]


def _sim_cases(tmp_path: Path) -> list[tuple[Path, str]]:
    """(file, the reason's start) for every kind of file that must not be read."""
    link_zero = tmp_path / "zero.yaml"
    link_zero.symlink_to("/dev/zero")
    link_fifo = tmp_path / "fifo-link.yaml"
    link_fifo.symlink_to(_fifo(tmp_path / "pipe"))
    link_file = tmp_path / "file-link.yaml"
    link_file.symlink_to(_outside(tmp_path))
    return [
        (link_zero, "a symbolic link (to '/dev/zero'), not followed"),
        (link_fifo, f"a symbolic link (to '{tmp_path / 'pipe'}'), not followed"),
        (link_file, f"a symbolic link (to '{tmp_path / 'outside.yaml'}'), not followed"),
        (tmp_path / "pipe", "a FIFO (named pipe), not a regular file"),
        (_huge(tmp_path / "huge.yaml"), f"file is {HUGE} bytes, more than the limit"),
    ]


def test_simulate_policy_file_is_read_like_validate_reads_it(tmp_path: Path) -> None:
    for path, reason in _sim_cases(tmp_path):
        result = reconciler(tmp_path, "simulate", str(path), *SIM)
        assert result.returncode == 2, (path, result.stderr)
        assert f"cannot read policy file {path}: {reason}" in result.stderr, result.stderr


def test_simulate_faults_file_is_read_like_a_policy_file(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(SEED_10)
    for path, reason in _sim_cases(tmp_path):
        result = reconciler(tmp_path, "simulate", str(policy), *SIM, "--faults", str(path))
        assert result.returncode == 2, (path, result.stderr)
        assert f"cannot read faults file {path}: {reason}" in result.stderr, result.stderr


@pytest.mark.parametrize("style", ["flow", "block"])
def test_faults_and_policy_nested_ten_thousand_deep_are_located_errors(
    tmp_path: Path, style: str
) -> None:
    deep = tmp_path / "deep.yaml"
    if style == "flow":
        deep.write_text("faults: " + "[" * 10_000 + "]" * 10_000 + "\n")
    else:
        deep.write_text("faults:\n" + "- " * 10_000 + "x\n")  # block sequences, one line
    policy = tmp_path / "policy.yaml"
    policy.write_text(SEED_10)
    result = reconciler(tmp_path, "simulate", str(policy), *SIM, "--faults", str(deep))
    assert result.returncode == 2, result.stderr
    assert f"{deep}:{1 if style == 'flow' else 2}:" in result.stderr
    assert "collections nested more than 100 levels deep" in result.stderr
    result = reconciler(tmp_path, "simulate", str(deep), *SIM)
    assert result.returncode == 2, result.stderr
    assert "collections nested more than 100 levels deep" in result.stderr
    result = reconciler(tmp_path, "dev-cluster", "up", "--nodes", "3", "--faults", str(deep),
                        "--dir", str(tmp_path / "state"))
    assert result.returncode == 2, result.stderr
    assert "collections nested more than 100 levels deep" in result.stderr
    assert not (tmp_path / "state").exists(), "nothing was started"


def test_dev_cluster_faults_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    for path, reason in _sim_cases(tmp_path):
        state = tmp_path / "state"
        result = reconciler(tmp_path, "dev-cluster", "up", "--nodes", "3", "--faults",
                            str(path), "--dir", str(state))
        assert result.returncode == 2, (path, result.stderr)
        assert f"{path}: cannot read: {reason}" in result.stderr, result.stderr
        assert not state.exists(), "no control plane was started"


def test_run_repo_config_and_firmware_config_are_refused_as_usage_errors(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    deep = tmp_path / "deep.yaml"
    deep.write_text("rollout: " + "[" * 10_000 + "]" * 10_000 + "\n")
    cases = [*_sim_cases(tmp_path),
             (deep, "collections nested more than 100 levels deep")]
    for path, reason in cases:
        result = reconciler(tmp_path, "run", "--role", "controller", "--repo-config", str(path),
                            "--ops-listen", "off", "--kubeconfig", str(kubeconfig))
        assert result.returncode == 2, (path, result.stderr)
        assert "--repo-config" in result.stderr and reason in result.stderr, result.stderr
        result = reconciler(tmp_path, "firmware", "--kubeconfig", str(kubeconfig), "--config",
                            str(path))
        assert result.returncode == 2, (path, result.stderr)
        assert reason in result.stderr, result.stderr


def test_links_and_fifos_among_many_files_are_reported_by_the_worker_pool(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(70):
        (folder / f"c{i:03}.yaml").write_text(SEED_10)
    (folder / "c010.yaml").unlink()
    (folder / "c010.yaml").symlink_to("/dev/zero")
    (folder / "c020.yaml").unlink()
    _fifo(folder / "c020.yaml")
    result = reconciler(tmp_path, "validate", "many", env={"RECONCILER_JOBS": "2"})
    assert result.returncode == 1, result.stderr
    assert [line.split(" [")[-1] for line in reported(result.stdout)] == [
        "symlink]", "not-regular-file]"]
    text = "\n".join(reported(result.stdout))
    assert text.startswith("many/c010.yaml:1:1: error: a symbolic link (to "
                           "'/dev/zero')")


def test_status_from_git_refuses_a_linked_snapshot_by_name(repo: Path, tmp_path: Path) -> None:
    snapshot = repo / "status/lab-10.yaml"
    snapshot.unlink()
    snapshot.symlink_to("/dev/zero")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "snapshot as a link")
    for args in (["--cluster", "lab-10"], []):
        result = reconciler(repo, "status", "--repo", str(repo), *args,
                            "--state-dir", str(tmp_path / "state"))
        assert result.returncode == 1, result.stdout + result.stderr
        assert "error: status/lab-10.yaml: a symbolic link (to '/dev/zero'), not followed" \
            in result.stderr
