"""Commit signature verification with real gpg, ssh-keygen and git."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.ops.metrics import Metrics
from reconciler.trust.signatures import (
    CommitVerifier,
    Method,
    SignatureConfigError,
    SigningConfig,
    TrustedKeys,
    Verdict,
    effective_mode,
    methods_for_mode,
    signing_config,
)


def run(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, input: str | None = None
) -> str:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        args, cwd=cwd, env=full_env, input=input, capture_output=True, text=True, check=True
    ).stdout


@dataclass
class Keys:
    gnupg_home: Path  # the signers' own keyring (holds every secret key)
    alice_fpr: str  # trusted OpenPGP key
    mallory_fpr: str  # untrusted OpenPGP key (valid, in the signers' keyring, never configured)
    alice_asc: Path
    alice_ssh: Path  # trusted SSH key
    mallory_ssh: Path  # untrusted SSH key
    allowed_signers: Path


def _gen_gpg_key(home: Path, uid: str) -> str:
    run(
        "gpg",
        "--homedir",
        str(home),
        "--batch",
        "--passphrase",
        "",
        "--quick-gen-key",
        uid,
        "ed25519",
        "sign",
        "never",
    )
    out = run("gpg", "--homedir", str(home), "--with-colons", "--list-secret-keys", uid)
    return next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keys]:
    base = tmp_path_factory.mktemp("keys")
    home = base / "g"
    home.mkdir(mode=0o700)
    alice = _gen_gpg_key(home, "Alice Admin <alice@example.org>")
    mallory = _gen_gpg_key(home, "Mallory <mallory@example.org>")
    asc = base / "alice.asc"
    asc.write_text(run("gpg", "--homedir", str(home), "--armor", "--export", alice))
    for name in ("alice_ed25519", "mallory_ed25519"):
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(base / name))
    allowed = base / "allowed_signers"
    pub = (base / "alice_ed25519.pub").read_text().strip()
    allowed.write_text(f'alice@example.org namespaces="git" {pub}\n')
    yield Keys(home, alice, mallory, asc, base / "alice_ed25519", base / "mallory_ed25519", allowed)
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> Path:
    path = tmp_path_factory.mktemp("repo")
    run("git", "init", "-q", "-b", "main", str(path))
    run("git", "config", "user.name", "Alice Admin", cwd=path)
    run("git", "config", "user.email", "alice@example.org", cwd=path)
    return path


def commit(repo: Path, message: str, signing: SigningConfig | None = None) -> str:
    (repo / "policy.yaml").write_text(f"# {message}\n")
    run("git", "add", "policy.yaml", cwd=repo)
    args = signing.git_args() if signing else ["-c", "commit.gpgsign=false"]
    env = dict(signing.env) if signing else {}
    run("git", *args, "commit", "-q", "-m", message, cwd=repo, env=env)
    return run("git", "rev-parse", "HEAD", cwd=repo).strip()


def tamper(repo: Path, sha: str) -> str:
    """The same signed commit object with its message changed (signature header kept)."""
    original = run("git", "cat-file", "commit", sha, cwd=repo)
    assert "gpgsig" in original
    altered = original.replace("maxParallel", "maxParallel: 100%")
    assert altered != original
    return run(
        "git", "hash-object", "-t", "commit", "-w", "--stdin", cwd=repo, input=altered
    ).strip()


@pytest.fixture(scope="module")
def verifier(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> CommitVerifier:
    trusted = TrustedKeys(
        openpgp_key_files=(keys.alice_asc,), allowed_signers_file=keys.allowed_signers
    )
    return CommitVerifier(trusted, tmp_path_factory.mktemp("state"))


def gpg_signing(keys: Keys, fpr: str) -> SigningConfig:
    return signing_config(openpgp_key=fpr, gnupg_home=keys.gnupg_home)


def test_openpgp_commit_by_trusted_key_is_trusted(
    repo: Path, keys: Keys, verifier: CommitVerifier
) -> None:
    sha = commit(repo, "raise maxParallel", gpg_signing(keys, keys.alice_fpr))
    check = verifier.verify(repo, sha)
    assert check.verdict is Verdict.TRUSTED, check.message
    assert check.trusted
    assert check.method is Method.OPENPGP
    assert check.signer == "Alice Admin <alice@example.org>"
    assert check.key == keys.alice_fpr
    assert check.commit == sha
    assert "signed by trusted Alice Admin" in check.message
    assert check.reason == "CommitSignatureTrusted"


def test_ssh_commit_by_allowed_signer_is_trusted(
    repo: Path, keys: Keys, verifier: CommitVerifier
) -> None:
    sha = commit(repo, "ssh signed", signing_config(ssh_key_file=keys.alice_ssh))
    check = verifier.verify(repo, sha)
    assert check.verdict is Verdict.TRUSTED, check.message
    assert check.method is Method.SSH
    assert check.signer == "alice@example.org"
    assert check.key.startswith("SHA256:")


def test_unsigned_commit_is_refused(repo: Path, verifier: CommitVerifier) -> None:
    sha = commit(repo, "unsigned change")
    check = verifier.verify(repo, sha)
    assert check.verdict is Verdict.UNSIGNED
    assert not check.trusted
    assert check.message == f"commit {sha[:12]} is not signed; only signed commits are applied"
    assert check.reason == "CommitUnsigned"


def test_openpgp_commit_by_untrusted_key_is_refused(
    repo: Path, keys: Keys, verifier: CommitVerifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Mallory's key is valid and ultimately trusted in the signers' own keyring: that keyring
    # must not count, only the configured trusted keys do.
    monkeypatch.setenv("GNUPGHOME", str(keys.gnupg_home))
    sha = commit(repo, "mallory's change", gpg_signing(keys, keys.mallory_fpr))
    check = verifier.verify(repo, sha)
    assert check.verdict is Verdict.UNTRUSTED_KEY, check.message
    assert keys.mallory_fpr[-16:] in check.key
    assert "not among the trusted keys" in check.message
    assert check.reason == "CommitSignerUntrusted"


def test_ssh_commit_by_key_not_in_allowed_signers_is_refused(
    repo: Path, keys: Keys, verifier: CommitVerifier
) -> None:
    sha = commit(repo, "mallory over ssh", signing_config(ssh_key_file=keys.mallory_ssh))
    check = verifier.verify(repo, sha)
    assert check.verdict is Verdict.UNTRUSTED_KEY, check.message
    assert "not in the allowed signers file" in check.message
    assert check.key.startswith("SHA256:")


@pytest.mark.parametrize("method", ["openpgp", "ssh"])
def test_tampered_commit_is_refused(
    repo: Path, keys: Keys, verifier: CommitVerifier, method: str
) -> None:
    signing = (
        gpg_signing(keys, keys.alice_fpr)
        if method == "openpgp"
        else signing_config(ssh_key_file=keys.alice_ssh)
    )
    good = commit(repo, f"set maxParallel ({method})", signing)
    assert verifier.verify(repo, good).trusted
    forged = tamper(repo, good)
    check = verifier.verify(repo, forged)
    assert check.verdict is Verdict.BAD_SIGNATURE, check.message
    assert "does not match the commit's content" in check.message
    assert check.reason == "CommitSignatureBad"


def test_accepted_methods_are_enforced(repo: Path, keys: Keys, tmp_path: Path) -> None:
    ssh_only = CommitVerifier(
        TrustedKeys(
            openpgp_key_files=(keys.alice_asc,),
            allowed_signers_file=keys.allowed_signers,
            methods=methods_for_mode("ssh"),
        ),
        tmp_path,
    )
    sha = commit(repo, "gpg signed, ssh required", gpg_signing(keys, keys.alice_fpr))
    check = ssh_only.verify(repo, sha)
    assert check.verdict is Verdict.UNTRUSTED_KEY
    assert "only ssh signatures are accepted" in check.message


def test_removing_a_key_from_the_configuration_revokes_it(
    repo: Path, keys: Keys, tmp_path: Path
) -> None:
    sha = commit(repo, "signed by alice", gpg_signing(keys, keys.alice_fpr))
    state = tmp_path / "state"
    assert (
        CommitVerifier(TrustedKeys(openpgp_key_files=(keys.alice_asc,)), state)
        .verify(repo, sha)
        .trusted
    )
    # same state dir, alice no longer configured: the rebuilt keyring forgets her
    only_ssh = TrustedKeys(allowed_signers_file=keys.allowed_signers)
    check = CommitVerifier(only_ssh, state).verify(repo, sha)
    assert check.verdict is Verdict.UNTRUSTED_KEY


def test_unknown_revision_is_an_error_not_a_crash(repo: Path, verifier: CommitVerifier) -> None:
    check = verifier.verify(repo, "does-not-exist")
    assert check.verdict is Verdict.ERROR
    assert "cannot read commit does-not-exist" in check.message


def test_configuration_errors_are_clear(tmp_path: Path, keys: Keys) -> None:
    with pytest.raises(SignatureConfigError, match="no trusted public key file"):
        TrustedKeys(methods=frozenset({Method.OPENPGP}))
    with pytest.raises(SignatureConfigError, match="no allowed signers file"):
        TrustedKeys(methods=frozenset({Method.SSH}))
    with pytest.raises(SignatureConfigError, match="no trusted key is configured"):
        TrustedKeys()
    with pytest.raises(SignatureConfigError, match="does not exist"):
        CommitVerifier(TrustedKeys(openpgp_key_files=(tmp_path / "nope.asc",)), tmp_path / "s")
    junk = tmp_path / "junk.asc"
    junk.write_text("not a key\n")
    with pytest.raises(SignatureConfigError, match=r"junk\.asc"):
        CommitVerifier(TrustedKeys(openpgp_key_files=(junk,)), tmp_path / "s")
    with pytest.raises(SignatureConfigError, match="does not exist"):
        CommitVerifier(TrustedKeys(allowed_signers_file=tmp_path / "none"), tmp_path / "s")
    with pytest.raises(SignatureConfigError, match="exactly one signing key"):
        signing_config()
    loose = tmp_path / "loose_key"
    loose.write_text("x")
    loose.chmod(0o644)
    with pytest.raises(SignatureConfigError, match="chmod 600"):
        signing_config(ssh_key_file=loose)
    with pytest.raises(SignatureConfigError, match="not one of"):
        methods_for_mode("pgp")


def test_signing_config_shapes() -> None:
    cfg = signing_config(openpgp_key="ABCDEF", gnupg_home=Path("/keys"))
    assert cfg.git_args()[:2] == ["-c", "commit.gpgsign=true"]
    assert "user.signingkey=ABCDEF" in cfg.config_pairs()
    assert cfg.env == {"GNUPGHOME": "/keys"}


@pytest.mark.parametrize(
    ("flag", "repo_mode", "expected"),
    [
        (None, None, "none"),
        (None, "ssh", "ssh"),  # the repository may turn verification on
        ("gpg", "none", "gpg"),  # but never off
        ("gpg", None, "gpg"),
        ("any", "ssh", "ssh"),  # it may narrow "any"
        ("ssh", "any", "ssh"),  # not widen
        ("ssh", "gpg", "ssh"),  # conflicting: the flag wins
    ],
)
def test_effective_mode(flag: str | None, repo_mode: str | None, expected: str) -> None:
    assert effective_mode(flag, repo_mode) == expected


@pytest.mark.parametrize("method", ["openpgp", "ssh"])
def test_commit_tree_signed_with_the_reconcilers_key_is_trusted(
    repo: Path, keys: Keys, verifier: CommitVerifier, method: str
) -> None:
    """The Git side builds status commits with commit-tree, which needs -S to sign."""
    signing = (
        gpg_signing(keys, keys.alice_fpr)
        if method == "openpgp"
        else signing_config(ssh_key_file=keys.alice_ssh)
    )
    tree = run("git", "write-tree", cwd=repo).strip()
    parent = run("git", "rev-parse", "HEAD", cwd=repo).strip()
    sha = run(
        "git", *signing.git_args(), "commit-tree", tree, "-p", parent,
        *signing.commit_tree_args(), "-m", "status: prod-a Progressing step 2",
        cwd=repo, env=dict(signing.env),
    ).strip()  # fmt: skip
    check = verifier.verify(repo, sha)
    assert check.verdict is Verdict.TRUSTED, check.message
    assert check.method is Method(method)


def test_refusal_renders_for_status_events_and_snapshot(
    repo: Path, verifier: CommitVerifier
) -> None:
    sha = commit(repo, "unsigned again")
    check = verifier.verify(repo, sha)
    cond = check.condition(datetime(2026, 11, 30, 3, 0, tzinfo=UTC))
    assert cond == {
        "type": "CommitVerified",
        "status": "False",
        "lastTransitionTime": "2026-11-30T03:00:00Z",
        "reason": "CommitUnsigned",
        "message": f"commit {sha[:12]} is not signed; only signed commits are applied",
    }
    snapshot = check.to_dict()
    assert snapshot["commit"] == sha
    assert snapshot["verdict"] == "unsigned"


def test_checks_are_counted_by_verdict(repo: Path, keys: Keys, tmp_path: Path) -> None:
    metrics = Metrics()
    v = CommitVerifier(TrustedKeys(openpgp_key_files=(keys.alice_asc,)), tmp_path, metrics=metrics)
    v.verify(repo, commit(repo, "unsigned for metrics"))
    v.verify(repo, commit(repo, "signed for metrics", gpg_signing(keys, keys.alice_fpr)))
    v.verify(repo, "no-such-commit")
    text = metrics.exposition().decode()
    for verdict in ("unsigned", "trusted", "error"):
        assert f'gpu_reconciler_commit_verifications_total{{verdict="{verdict}"}} 1.0' in text
