"""The sync pass's pure steps, as tables: each step accepts, rejects with located findings, or
ends the pass with nothing to apply, from a ``CommitView`` built by hand (no Git, no cluster)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from reconciler import names
from reconciler.config.document import ConfigDocument, load
from reconciler.files import FileRefused
from reconciler.sync import fields
from reconciler.sync.commit_view import (
    CommitView,
    LiveObject,
    PolicyFile,
    SignatureEvidence,
    resolved,
)
from reconciler.sync.outcome import Accepted, NothingToApply, Outcome, Rejected
from reconciler.sync.steps import (
    SYNC_STEPS,
    Progress,
    pick_policy_file,
    plan_apply,
    plan_commit,
    read_config,
    validate,
    verify_signatures,
)
from reconciler.trust.signatures import Method, SignatureCheck, Verdict
from tests.gitops.conftest import POLICY

HEAD = "a" * 40
SOURCE = "b" * 40
PATH = "clusters/prod-a/operator.yaml"
NEVER = POLICY.replace("fwUpgradePolicy: PreferCloud", "fwUpgradePolicy: Never")


def view(**changes: Any) -> CommitView:
    """A commit with ``changes``; its ``config`` resolved for the cluster as ``observe`` does."""
    base = CommitView(
        head=HEAD, source=SOURCE, cluster="prod-a", cluster_operator="cluster-operator",
        controller_manager="gpu-rollout-controller", live=None, baseline=None,
        config=ConfigDocument(), config_refused=None, signatures=SignatureEvidence(),
        files=(PolicyFile(PATH, NEVER.encode()),),
    )
    commit = replace(base, **changes)
    settings, refused = resolved(commit.config, commit.cluster, commit.source)
    return replace(commit, settings=settings, settings_refused=refused)


def check(verdict: Verdict, method: Method | None = Method.OPENPGP) -> SignatureCheck:
    return SignatureCheck(commit=SOURCE, verdict=verdict, message=f"signature {verdict.value}",
                          method=method)


def signed(mode: str, *checks: SignatureCheck, verifier: bool = True) -> SignatureEvidence:
    return SignatureEvidence(mode=mode, verifier=verifier, commits=(HEAD, SOURCE),
                             checks=tuple((c.commit, c) for c in checks))


def rejected(outcome: Outcome[Any]) -> Rejected:
    assert isinstance(outcome, Rejected), outcome
    return outcome


def accepted(outcome: Outcome[Progress]) -> Progress:
    assert isinstance(outcome, Accepted), outcome
    return outcome.value


def through(step_count: int, commit: CommitView) -> Progress:
    """The progress after the first ``step_count`` steps accepted ``commit``."""
    progress = Progress()
    for step in SYNC_STEPS[:step_count]:
        progress = accepted(step(commit, progress))
    return progress


LINK = FileRefused("reconciler.yaml", "symlink", "a symbolic link; links are never followed")


@pytest.mark.parametrize(("evidence", "changes"), [
    (SignatureEvidence(), {}),
    (signed("gpg", check(Verdict.TRUSTED), check(Verdict.TRUSTED)), {}),
    (signed("any", check(Verdict.TRUSTED, Method.SSH)), {}),
], ids=["mode-none", "gpg-all-trusted", "any-accepts-ssh"])
def test_verify_signatures_accepts(evidence: SignatureEvidence, changes: dict[str, Any]) -> None:
    assert accepted(verify_signatures(view(signatures=evidence, **changes), Progress()))


@pytest.mark.parametrize(("changes", "file", "rule", "says"), [
    ({"config_refused": LINK, "config": None}, "reconciler.yaml", "symlink", "symbolic link"),
    ({"signatures": SignatureEvidence(mode=None, mode_error="signature mode 'pgp' is not one of")},
     "reconciler.yaml", "signature-config", "not one of"),
    ({"signatures": signed("gpg", verifier=False)}, f"commit {HEAD[:12]}",
     "CommitSignatureCheckFailed", "needs trusted keys"),
    ({"signatures": signed("gpg", check(Verdict.UNTRUSTED_KEY))}, f"commit {SOURCE[:12]}",
     "CommitSignerUntrusted", "untrusted"),
    ({"signatures": signed("gpg", check(Verdict.TRUSTED, Method.SSH))}, f"commit {SOURCE[:12]}",
     "CommitSignerUntrusted", "signed with ssh, but signatures.mode is gpg"),
], ids=["config-is-a-link", "bad-mode", "no-trusted-keys", "untrusted-key", "wrong-method"])
def test_verify_signatures_rejects(changes: dict[str, Any], file: str, rule: str,
                                   says: str) -> None:
    result = rejected(verify_signatures(view(**changes), Progress()))
    assert (result.findings[0].file, result.findings[0].rule) == (file, rule)
    assert says in result.reason


def test_read_config_accepts_and_carries_the_settings() -> None:
    commit = view(config=load(b"clustersDir: fleet\nsignatures: {mode: ssh}\n"))
    progress = accepted(read_config(commit, Progress()))
    settings = progress.settings
    assert settings is not None and settings.sync.cluster_dir("prod-a") == "fleet/prod-a"
    assert settings.signature_mode == "ssh"


@pytest.mark.parametrize(("text", "says"), [
    (b"clustersDir: 5\n", "clustersDir"),
    (b"sync: {fetchInterval: soon}\n", "sync.fetchInterval"),
    (b"status: [1\n", "reconciler.yaml:"),
], ids=["wrong-type", "bad-duration", "not-yaml"])
def test_read_config_rejects_naming_the_key(text: bytes, says: str) -> None:
    result = rejected(read_config(view(config=load(text)), Progress()))
    assert result.findings[0].rule == "repo-config" and says in result.reason


def test_read_config_resolves_the_clusters_settings_and_rejects_a_rollout_that_fails() -> None:
    """docs/live-clusters.md: ``rollout`` is read at every commit and validated with located errors;
    a refused one is a rejected commit (the settings in force stay), a good one rides on the plan
    to be published once the commit is applied."""
    text = b"rollout: {readyTimeout: 20m}\nclusters:\n  prod-a:\n    rollout: {readyTimeout: 30s}\n"
    commit = view(config=load(text))
    progress = accepted(read_config(commit, Progress()))
    assert progress.settings is not None and progress.settings.rollout.ready_timeout == 30.0
    plan = plan_commit(commit)
    assert isinstance(plan, Accepted) and plan.value.settings == progress.settings
    bad = view(config=load(b"rollout:\n  readyTimeout: 10 minutes\n"))
    result = rejected(read_config(bad, Progress()))
    assert result.findings[0].rule == "repo-config"
    assert result.reason.startswith("reconciler.yaml:2:17: ") and "readyTimeout" in result.reason


def test_signature_mode_is_read_even_when_another_key_is_refused() -> None:
    parsed = load(b"clustersDir: 5\nsignatures: {mode: gpg}\n")
    assert view(config=parsed).settings is None and parsed.signature_mode == "gpg"


def test_pick_policy_file_accepts_the_one_cluster_operator() -> None:
    commit = view(files=(PolicyFile("clusters/prod-a/notes.yaml", b"notes: []\n"),
                         PolicyFile(PATH, NEVER.encode())))
    progress = accepted(pick_policy_file(commit, through(2, commit)))
    assert progress.policy is not None and progress.policy.path == PATH


def test_pick_policy_file_with_an_empty_folder_applies_nothing() -> None:
    commit = view(files=(), config=load(b"clustersDir: fleet\n"))
    outcome = pick_policy_file(commit, through(2, commit))
    assert isinstance(outcome, NothingToApply)
    assert "no policy under fleet/prod-a/" in outcome.message


@pytest.mark.parametrize(("files", "refused", "file", "rule"), [
    ((PolicyFile(PATH, NEVER.encode()), PolicyFile("clusters/prod-a/b.yaml", NEVER.encode())),
     None, "clusters/prod-a/b.yaml", "duplicate-policy"),
    ((PolicyFile(PATH, b"kind: Something\n"),), None, PATH, None),
    ((), FileRefused(PATH, "file-too-large", "too large"), PATH, "file-too-large"),
], ids=["two-policies", "no-cluster-operator", "refused-file"])
def test_pick_policy_file_rejects(files: tuple[PolicyFile, ...], refused: FileRefused | None,
                                  file: str, rule: str | None) -> None:
    commit = view(files=files, files_refused=refused)
    result = rejected(pick_policy_file(commit, through(2, commit)))
    assert result.findings[0].file == file
    if rule is not None:
        assert result.findings[0].rule == rule


def test_validate_accepts_and_keeps_what_the_controller_changed() -> None:
    live = LiveObject({
        "metadata": {"name": "cluster-operator", "managedFields": [{
            "manager": "gpu-rollout-controller", "operation": "Update", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:driver": {"f:upgradePolicy": {"f:pause": {}}}}}}]},
        "spec": {"driver": {"upgradePolicy": {"pause": True}}},
    })
    commit = view(live=live)
    progress = accepted(validate(commit, through(3, commit)))
    assert progress.ownership is not None
    assert progress.ownership.kept == (fields.PAUSE,)
    assert [d.field for d in progress.ownership.write_backs] == [fields.PAUSE]


@pytest.mark.parametrize(("text", "rule", "line"), [
    (NEVER.replace("maxParallel: 2", "maxParallel: -2"), None, 23),
    (NEVER.replace("name: cluster-operator", "name: other"), "object-name", 1),
], ids=["invalid-value", "other-object"])
def test_validate_rejects_located(text: str, rule: str | None, line: int) -> None:
    commit = view(files=(PolicyFile(PATH, text.encode()),))
    result = rejected(validate(commit, through(3, commit)))
    assert (result.findings[0].file, result.findings[0].line) == (PATH, line)
    if rule is not None:
        assert result.findings[0].rule == rule


def test_plan_apply_names_the_commit_and_leaves_kept_fields_out() -> None:
    commit = view()
    progress = accepted(plan_apply(commit, through(4, commit)))
    assert progress.plan is not None
    body = progress.plan.body
    assert (body["apiVersion"], body["kind"]) == (names.API_VERSION, names.KIND)
    assert body["metadata"]["annotations"][names.SOURCE_COMMIT_ANNOTATION] == SOURCE
    assert progress.plan.firmware_request is None and progress.plan.write_backs == ()


def test_plan_apply_turns_prefer_cloud_into_a_firmware_request() -> None:
    commit = view(files=(PolicyFile(PATH, POLICY.encode()),))
    progress = accepted(plan_apply(commit, through(4, commit)))
    assert progress.plan is not None and progress.plan.firmware_request is not None
    assert progress.plan.body["spec"]["driver"]["fwUpgradePolicy"] == "Never"


def test_plan_commit_runs_the_steps_in_order_and_stops_at_the_first_rejection() -> None:
    assert isinstance(plan_commit(view()), Accepted)
    # a refused config file is the signature step's rejection, before the config is judged
    result = rejected(plan_commit(view(config=None, config_refused=LINK)))
    assert result.findings[0].rule == "symlink"
    seen: list[str] = []

    def spy(commit: CommitView, progress: Progress) -> Outcome[Progress]:
        seen.append("spy")
        return Accepted(progress)

    refusing = view(signatures=signed("gpg", check(Verdict.UNTRUSTED_KEY)))
    assert isinstance(plan_commit(refusing, (verify_signatures, spy)), Rejected)
    assert seen == []

