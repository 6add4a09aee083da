"""The audit trail read from a real Git repository (read in place, read-only)."""

from __future__ import annotations

from pathlib import Path

from reconciler.dashboard.audit import GitAudit
from tests.dashboard.gitrepo import git, policy_repo

STATUS = """\
cluster: lab
sourceCommit: {source}
upgradeStatus: {{phase: Progressing}}
"""
REJECTED = STATUS + """\
rejection:
  commit: {rejected}
  findings:
  - file: clusters/lab/cluster-operator.yaml
    line: 9
    message: "expected boolean, got string 'false'"
"""


def test_the_trail_names_gate_releases_write_backs_snapshots_and_rejections(
        tmp_path: Path) -> None:
    repo = policy_repo(tmp_path, "lab")
    status = repo / "status"
    status.mkdir()
    own = "gpu-gitops-reconciler <r@localhost>"
    for text, subject in [
        (STATUS.format(source="a" * 40), "status(lab): step 1/3 upgrading"),
        (REJECTED.format(source="a" * 40, rejected="b" * 40),
         "status(lab): rejected bbbbbbbbbbbb: clusters/lab/cluster-operator.yaml:9 expected"),
        (REJECTED.format(source="c" * 40, rejected="b" * 40), "status(lab): still rejected"),
    ]:
        (status / "lab.yaml").write_text(text)
        git(repo, "add", "-A", author=own)
        git(repo, "commit", "-q", "-m", f"{subject}\n\nReconciler-Commit: true", author=own)
    audit = GitAudit(str(repo), cluster="lab")
    assert audit.refresh()
    assert not audit.refresh()  # nothing moved: nothing read again
    kinds = [entry["kind"] for entry in audit.entries]
    # newest first; the same rejection again is a snapshot, not a second rejection
    assert kinds == ["status", "rejection", "status", "write-back", "gate-release",
                     "write-back", "version", "version"]
    rejection = audit.entries[1]
    assert rejection["detail"] == ("rejected bbbbbbbbbbbb: clusters/lab/cluster-operator.yaml:9 "
                                   "expected boolean, got string 'false'")
    release = audit.entries[4]
    assert release["author"] == release["mergedBy"] == "Bo Releaser <bo@example.org>"
    assert audit.entries[3]["mergedBy"] is None  # the reconciler's own commit
    assert audit.context.policy_file == "clusters/lab/cluster-operator.yaml"
    assert audit.context.pause_line == 10
    assert audit.error is None


def test_a_missing_branch_is_reported_not_raised(tmp_path: Path) -> None:
    audit = GitAudit(str(policy_repo(tmp_path, "lab")), cluster="lab", branch="release")
    assert not audit.refresh()
    assert audit.error == "no branch 'release'"
    assert audit.entries == []


def test_the_page_reads_what_only_git_knows_from_the_status_snapshot(tmp_path: Path) -> None:
    """With --repo the page lists the promotion gate's hold and a rejected commit, which only
    the status snapshot in Git records (the read model's ``promotion`` and ``rejection``)."""
    from reconciler.dashboard.model import ClusterFacts, build_view

    repo = policy_repo(tmp_path, "lab")
    (repo / "status").mkdir()
    (repo / "status" / "lab.yaml").write_text(REJECTED.format(source="a" * 40, rejected="b" * 40)
                                              + HELD)
    own = "gpu-gitops-reconciler <r@localhost>"
    git(repo, "add", "-A", author=own)
    git(repo, "commit", "-q", "-m", "status(lab): held\n\nReconciler-Commit: true", author=own)
    audit = GitAudit(str(repo), cluster="lab")
    assert audit.refresh() and audit.snapshot is not None
    co = {"metadata": {"name": "cluster-operator"}, "spec": {"driver": {}},
          "status": {"upgradeStatus": {"phase": "Idling"}}}
    view = build_view(ClusterFacts("lab", co), now=0.0, git=audit.context,
                      recorded=audit.snapshot)
    assert [w.kind for w in view.waiting] == ["rejection", "promotion"]
    assert view.waiting[1].title == "the promotion gate: 2.34.0.1 waits for lab-0"
    assert view.waiting[1].until == "2026-12-01T08:00:00Z"
    # without Git's snapshot the object alone says nothing of either
    assert build_view(ClusterFacts("lab", co), now=0.0).waiting == []


HELD = """\
promotion:
  held: {version: 2.34.0.1, upstream: lab-0, reason: soak 24h, earliest: '2026-12-01T08:00:00Z'}
"""
