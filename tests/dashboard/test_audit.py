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
