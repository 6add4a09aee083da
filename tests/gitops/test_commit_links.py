"""The daemon's side of issue 15 item 4: a commit carrying a symbolic link (a blob of mode
120000), a folder or a submodule where a policy file should be, or an oversized blob, is a
refusal naming the file, with the same reasons ``reconciler validate`` gives; never the link's
text parsed as a policy, never a silent skip, never an unbounded read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reconciler.gitops.errors import RepoConfigError
from reconciler.gitops.mirror import Mirror
from reconciler.gitops.reader import CommitReader, PolicyFileRefused
from tests.gitops.conftest import POLICY, Person, Remote, git

POLICY_PATH = "clusters/prod-a/cluster-operator.yaml"


def _reader(remote: Remote, tmp_path: Path) -> CommitReader:
    mirror = Mirror(remote.url, tmp_path / "state")
    mirror.fetch()
    return CommitReader(mirror)


def _commit_link(person: Person, path: str, target: str) -> str:
    link = person.dir / path
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_dir() and not link.is_symlink():
        git(person.dir, "rm", "-q", "-r", path)
    elif os.path.lexists(link):
        link.unlink()
    link.symlink_to(target)
    git(person.dir, "add", "-A")
    git(person.dir, "commit", "-q", "-m", f"link {path}")
    person.push()
    return git(person.dir, "rev-parse", "HEAD")


@pytest.mark.parametrize("target", ["/dev/zero", "../../README.md", "/etc/passwd",
                                    "prod-b.yaml"])
def test_a_policy_file_that_is_a_link_is_refused_by_name(
    remote: Remote, alice: Person, tmp_path: Path, target: str
) -> None:
    sha = _commit_link(alice, POLICY_PATH, target)
    reader = _reader(remote, tmp_path)
    with pytest.raises(PolicyFileRefused) as error:
        reader.cluster_files(sha, "prod-a")
    refused = error.value.refused
    assert (refused.path, refused.problem) == (POLICY_PATH, "symlink")
    assert refused.reason.startswith(f"a symbolic link (to '{target}'), not followed: the "
                                     "reconciler reads a link's text from the commit")


def test_a_cluster_folder_that_is_a_link_is_refused_not_empty(
    remote: Remote, alice: Person, tmp_path: Path
) -> None:
    alice.commit("another cluster", {"clusters/prod-b/cluster-operator.yaml": POLICY})
    sha = _commit_link(alice, "clusters/prod-a", "prod-b")
    reader = _reader(remote, tmp_path)
    with pytest.raises(PolicyFileRefused) as error:
        reader.cluster_files(sha, "prod-a")
    assert (error.value.refused.path, error.value.refused.problem) == (
        "clusters/prod-a", "symlink")
    assert [f.path for f in reader.cluster_files(sha, "prod-b")] == [
        "clusters/prod-b/cluster-operator.yaml"]


def test_a_folder_named_like_a_policy_file_is_refused(
    remote: Remote, alice: Person, tmp_path: Path
) -> None:
    sha = alice.commit_and_push("a folder", {"clusters/prod-a/extra.yaml/inner.yaml": POLICY})
    with pytest.raises(PolicyFileRefused) as error:
        _reader(remote, tmp_path).cluster_files(sha, "prod-a")
    assert (error.value.refused.path, error.value.refused.problem) == (
        "clusters/prod-a/extra.yaml", "not-regular-file")
    assert error.value.refused.reason.startswith("a folder, not a regular file")


def test_an_oversized_blob_is_refused_from_its_size(
    remote: Remote, alice: Person, tmp_path: Path
) -> None:
    sha = alice.commit_and_push("huge", {POLICY_PATH: POLICY + "#" * (2 * 1024 * 1024) + "\n"})
    with pytest.raises(PolicyFileRefused) as error:
        _reader(remote, tmp_path).cluster_files(sha, "prod-a")
    assert error.value.refused.problem == "file-too-large"
    assert error.value.refused.reason.startswith(
        f"file is {len(POLICY) + 2 * 1024 * 1024 + 1} bytes, more than the limit of 1048576")


def test_a_linked_or_deeply_nested_config_is_a_config_error_not_a_crash(
    remote: Remote, alice: Person, tmp_path: Path
) -> None:
    linked = _commit_link(alice, "reconciler.yaml", "/dev/zero")
    reader = _reader(remote, tmp_path)
    with pytest.raises(RepoConfigError, match=r"reconciler.yaml: a symbolic link \(to "
                                              "'/dev/zero'\\)"):
        reader.sync_settings(linked)
    (alice.dir / "reconciler.yaml").unlink()
    # libyaml's composer recurses on the C stack: this would kill the daemon with SIGSEGV
    deep = alice.commit_and_push("deep", {
        "reconciler.yaml": "sync: " + "[" * 100_000 + "]" * 100_000 + "\n"})
    reader.mirror.fetch()
    with pytest.raises(RepoConfigError, match="collections nested more than 100 levels deep"):
        reader.sync_settings(deep)


def test_regular_files_still_read_and_other_suffixes_ignored(
    remote: Remote, alice: Person, tmp_path: Path
) -> None:
    alice.commit("notes", {"clusters/prod-a/notes.txt": "not policy\n"})
    sha = _commit_link(alice, "clusters/prod-a/notes.md", "/dev/zero")
    files = _reader(remote, tmp_path).cluster_files(sha, "prod-a")
    assert [(f.path, f.data) for f in files] == [(POLICY_PATH, POLICY.encode())]


def test_yaml_from_a_commit_nested_deep_never_reaches_the_c_parser_unbounded() -> None:
    """libyaml's composer recurses on the C stack: 100,000 levels would kill the daemon with
    SIGSEGV (status snapshots, write-back edits, the signature mode in reconciler.yaml)."""
    from reconciler.config.document import load
    from reconciler.gitops.edits import edit_policy_text, parse_status

    deep = "signatures: " + "[" * 100_000 + "]" * 100_000 + "\n"
    assert parse_status(deep) is None
    assert load(deep.encode()).signature_mode is None
    result = edit_policy_text(deep, [])
    assert result.text is None
    assert result.detail == ("policy file is not usable: collections nested more than 100 "
                             "levels deep")
