"""New commits from a remote (interval, trigger) and from a watched local working copy."""

from __future__ import annotations

import queue
import time
from pathlib import Path

import pytest

from reconciler.config.sync import SyncSettings
from reconciler.gitops.mirror import Mirror
from reconciler.gitops.publisher import Publisher
from reconciler.gitops.reader import CommitReader
from reconciler.gitops.source import CommitSource, NewCommit
from reconciler.gitops.spec_writeback import SpecWriteBack
from tests.gitops.conftest import POLICY, GitDaemon, Person, Remote, git


def test_first_look_reports_the_head_then_only_new_commits(remote: Remote, alice: Person,
                                                          tmp_path: Path) -> None:
    seen: list[NewCommit] = []
    source = CommitSource(Mirror(remote.url, tmp_path / "state"), ["main"], seen.append)
    first = source.poll()
    assert [(c.branch, c.sha, c.previous) for c in first] == [("main", remote.head(), None)]
    assert source.poll() == []
    sha = alice.commit_and_push("Bump driver", {"README.md": "bump\n"})
    [new] = source.poll()
    assert (new.sha, new.previous) == (sha, first[0].sha)
    assert [c.subject for c in new.commits] == ["Bump driver"]
    assert new.commits[0].author.email == "alice@example.com"
    assert seen == [*first, new]


def test_own_commits_never_retrigger(remote: Remote, alice: Person, tmp_path: Path) -> None:
    state = tmp_path / "state"
    mirror = Mirror(remote.url, state)
    source = CommitSource(mirror, ["main"], lambda _: None)
    source.poll()
    publisher = Publisher(mirror, "main", state_dir=state)
    SpecWriteBack(publisher).pause("prod-a", reason="manual gate")
    assert publisher.flush().ok
    assert source.poll() == []
    # a person's commit on top of ours is reported, with only their commit listed
    alice.pull()
    sha = alice.commit_and_push("Release the gate", {"notes.md": "go\n"})
    [new] = source.poll()
    assert new.sha == sha
    assert [c.subject for c in new.commits] == ["Release the gate"]


def test_trigger_fetches_at_once(remote: Remote, git_daemon: GitDaemon, alice: Person,
                                 tmp_path: Path) -> None:
    events: queue.Queue[NewCommit] = queue.Queue()
    source = CommitSource(Mirror(git_daemon.url("policy.git"), tmp_path / "state"), ["main"],
                          events.put, interval=3600)
    source.start()
    try:
        events.get(timeout=10)  # the first look
        sha = alice.commit_and_push("Bump", {"README.md": "b\n"})
        started = time.monotonic()
        source.trigger()
        assert events.get(timeout=10).sha == sha
        assert time.monotonic() - started < 5  # the interval is an hour
    finally:
        source.stop()


def test_interval_fetch_finds_commits_without_a_trigger(remote: Remote, alice: Person,
                                                        tmp_path: Path) -> None:
    events: queue.Queue[NewCommit] = queue.Queue()
    source = CommitSource(Mirror(remote.url, tmp_path / "state"), ["main"], events.put,
                          interval=0.2)
    source.start()
    try:
        events.get(timeout=10)
        sha = alice.commit_and_push("Bump", {"README.md": "b\n"})
        assert events.get(timeout=10).sha == sha
    finally:
        source.stop()


def test_an_unreachable_remote_is_survived(remote: Remote, alice: Person,
                                           tmp_path: Path) -> None:
    source = CommitSource(Mirror(remote.url, tmp_path / "state"), ["main"], lambda _: None)
    source.poll()
    remote.go_down()
    assert source.poll() == []
    remote.come_back()
    sha = alice.commit_and_push("Bump", {"README.md": "b\n"})
    assert [c.sha for c in source.poll()] == [sha]


def test_local_working_copy_commits_are_seen_without_fetch_interval(remote: Remote,
                                                                   tmp_path: Path) -> None:
    work = Person(remote.url, tmp_path / "work")
    events: queue.Queue[NewCommit] = queue.Queue()
    source = CommitSource(Mirror(str(work.dir), tmp_path / "state"), ["main"], events.put,
                          interval=3600, watch=work.dir)
    source.start()
    try:
        events.get(timeout=10)
        fetches = source.fetches
        work.write("README.md", "an edit that is not committed\n")
        time.sleep(0.5)
        assert source.fetches == fetches, "a working-tree edit must not cause a fetch"
        sha = work.commit("Bump driver", {
            "clusters/prod-a/cluster-operator.yaml": POLICY.replace("2.33.0.9", "2.34.0.1")})
        assert events.get(timeout=10).sha == sha
        # one commit is a burst of file events; they coalesce into few fetches
        time.sleep(0.5)
        assert source.fetches - fetches <= 3
        assert events.empty()
    finally:
        source.stop()


def test_watch_rejects_a_folder_that_is_not_a_repository(tmp_path: Path) -> None:
    from reconciler.gitops.errors import GitOpsError

    remote = Remote(tmp_path / "srv")
    with pytest.raises(GitOpsError, match="not a Git working copy"):
        CommitSource(Mirror(remote.url, tmp_path / "state"), ["main"], lambda _: None,
                     watch=tmp_path / "nowhere")


def test_reading_a_commit(remote: Remote, alice: Person, tmp_path: Path) -> None:
    sha = alice.commit_and_push("Add prod-b, move clusters", {
        "reconciler.yaml": "clustersDir: fleet\n",
        "fleet/prod-a/cluster-operator.yaml": POLICY,
        "fleet/prod-b/cluster-operator.yaml": POLICY,
        "fleet/prod-b/notes.txt": "not policy\n",
        "fleet/README.md": "a file, not a cluster\n",
    })
    mirror = Mirror(remote.url, tmp_path / "state")
    mirror.fetch()
    reader = CommitReader(mirror)
    config = reader.sync_settings(sha)
    assert config == SyncSettings(clusters_dir="fleet")
    assert reader.clusters(sha) == ["prod-a", "prod-b"]
    files = reader.cluster_files(sha, "prod-b")
    assert [f.path for f in files] == ["fleet/prod-b/cluster-operator.yaml"]
    assert files[0].data == POLICY.encode()
    info = reader.info(sha)
    assert (info.author.name, info.committer.email) == ("Alice Operator", "alice@example.com")
    assert not info.is_own
    first = git(remote.path, "rev-list", "--max-parents=0", "main")
    assert reader.clusters(first) == ["prod-a"]  # the default layout at the first commit
    assert reader.read(first, "nope.yaml") is None
