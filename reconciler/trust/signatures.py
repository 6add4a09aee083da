"""Commit signature verification (OpenPGP through gpg, SSH through ssh-keygen) and signing.

Git does the cryptography: ``git verify-commit`` and the ``%G?`` placeholders run gpg or
``ssh-keygen -Y verify`` on the commit object. What we add is the trust anchor and the verdict:

- OpenPGP keys are trusted when they are in a dedicated ``GNUPGHOME`` that this module builds
  from the configured public key files, each imported with ultimate owner trust. The user's own
  keyring is never consulted, so a key the operator did not list is unknown here.
- SSH keys are trusted when they are in the configured allowed-signers file
  (``gpg.ssh.allowedSignersFile``). Without one, an empty file is used, so every SSH
  signature is "untrusted key" rather than an error.

Trusted keys must come from the daemon's own configuration (flags, a mounted Secret), never from
the repository being verified: a key in the repository could be added by the very commit it is
supposed to vouch for.
"""

from __future__ import annotations

import enum
import logging
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from reconciler.ops.metrics import Metrics

log = logging.getLogger(__name__)

GIT_TIMEOUT_SECONDS = 60.0


class SignatureConfigError(ValueError):
    """Verification or signing cannot work as configured (named file missing, key unusable)."""


class Method(enum.StrEnum):
    OPENPGP = "openpgp"
    SSH = "ssh"


class Verdict(enum.StrEnum):
    TRUSTED = "trusted"
    UNSIGNED = "unsigned"
    UNTRUSTED_KEY = "untrusted_key"
    BAD_SIGNATURE = "bad_signature"
    ERROR = "error"  # verification could not run (gpg missing, unreadable commit)


# Reasons for conditions and events (CamelCase, as Kubernetes reasons are).
REASONS: Mapping[Verdict, str] = {
    Verdict.TRUSTED: "CommitSignatureTrusted",
    Verdict.UNSIGNED: "CommitUnsigned",
    Verdict.UNTRUSTED_KEY: "CommitSignerUntrusted",
    Verdict.BAD_SIGNATURE: "CommitSignatureBad",
    Verdict.ERROR: "CommitSignatureCheckFailed",
}


@dataclass(frozen=True)
class SignatureCheck:
    """The verdict on one commit, with what a person needs to act on it."""

    commit: str
    verdict: Verdict
    message: str
    method: Method | None = None
    signer: str = ""  # "Name <email>" (OpenPGP user id) or the allowed-signers principal
    key: str = ""  # OpenPGP fingerprint or SSH key fingerprint (SHA256:...)

    @property
    def trusted(self) -> bool:
        return self.verdict is Verdict.TRUSTED

    @property
    def reason(self) -> str:
        return REASONS[self.verdict]

    def to_dict(self) -> dict[str, str]:
        """For the Git status snapshot and structured logs (no secrets: keys are public)."""
        return {
            "commit": self.commit,
            "verdict": self.verdict.value,
            "method": self.method.value if self.method else "",
            "signer": self.signer,
            "key": self.key,
            "reason": self.reason,
            "message": self.message,
        }

    def condition(self, now: datetime) -> dict[str, str]:
        """A ``CommitVerified`` status condition (True only for a trusted signature)."""
        return {
            "type": "CommitVerified",
            "status": "True" if self.trusted else "False",
            "lastTransitionTime": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "reason": self.reason,
            "message": self.message,
        }


@dataclass(frozen=True)
class TrustedKeys:
    """The trust anchor, from the daemon's configuration.

    ``openpgp_key_files``: ASCII-armoured or binary public key files; every key in them is
    trusted. ``allowed_signers_file``: an ssh-keygen ALLOWED SIGNERS file
    (``principal [options] key``, one per line). ``methods``: which signature kinds are accepted.
    """

    openpgp_key_files: tuple[Path, ...] = ()
    allowed_signers_file: Path | None = None
    methods: frozenset[Method] = field(default_factory=lambda: frozenset(Method))

    def __post_init__(self) -> None:
        if not self.methods:
            raise SignatureConfigError("signature verification needs at least one method")
        if self.methods == {Method.OPENPGP} and not self.openpgp_key_files:
            raise SignatureConfigError(
                "OpenPGP verification is on but no trusted public key file is configured"
            )
        if self.methods == {Method.SSH} and self.allowed_signers_file is None:
            raise SignatureConfigError(
                "SSH verification is on but no allowed signers file is configured"
            )
        if not self.openpgp_key_files and self.allowed_signers_file is None:
            raise SignatureConfigError(
                "signature verification is on but no trusted key is configured: give OpenPGP "
                "public key files and/or an SSH allowed signers file"
            )


def methods_for_mode(mode: str) -> frozenset[Method]:
    """Map ``signatures.mode`` of reconciler.yaml or the flag to the accepted methods."""
    table = {
        "none": frozenset[Method](),
        "gpg": frozenset({Method.OPENPGP}),
        "openpgp": frozenset({Method.OPENPGP}),
        "ssh": frozenset({Method.SSH}),
        "any": frozenset(Method),
    }
    try:
        return table[mode]
    except KeyError:
        raise SignatureConfigError(
            f"signature mode {mode!r} is not one of: none, gpg, ssh, any"
        ) from None


def effective_mode(flag_mode: str | None, repo_mode: str | None) -> str:
    """The daemon's flag is the floor; the repository may only tighten it.

    A commit that sets ``signatures.mode: none`` in reconciler.yaml is itself unverified when it
    arrives, so letting it switch verification off would let anyone with push rights do so.
    """
    flag = flag_mode or "none"
    repo = repo_mode or "none"
    methods_for_mode(flag)
    methods_for_mode(repo)
    if flag == "none":
        return repo
    if repo in ("none", flag):
        return flag
    if flag == "any":
        return repo  # the repository narrows "any" to one method
    # flag and repository name different single methods: both cannot hold; keep the flag's
    log.warning(
        "signatures.mode %r in the repository conflicts with the flag %r; using the flag",
        repo,
        flag,
    )
    return flag


class CommitVerifier:
    """Verifies commits of a local repository against ``TrustedKeys``.

    The dedicated GNUPGHOME is rebuilt from the key files on construction, so removing a key
    from the configuration and restarting revokes its trust.
    """

    def __init__(
        self,
        trusted: TrustedKeys,
        state_dir: Path,
        *,
        gpg_program: str = "gpg",
        metrics: Metrics | None = None,
    ) -> None:
        self.trusted = trusted
        self._gpg = gpg_program
        self._metrics = metrics
        state_dir.mkdir(parents=True, exist_ok=True)
        self.gnupg_home = state_dir / "trusted-gnupg"
        if self.gnupg_home.exists():
            shutil.rmtree(self.gnupg_home)
        self.gnupg_home.mkdir(mode=0o700)
        # Public-key work needs no agent; without this gpg would leave one running per keyring.
        (self.gnupg_home / "gpg.conf").write_text("no-autostart\n")
        self.fingerprints = self._import_openpgp_keys(trusted.openpgp_key_files)
        if trusted.allowed_signers_file is not None:
            if not trusted.allowed_signers_file.is_file():
                raise SignatureConfigError(
                    f"allowed signers file {trusted.allowed_signers_file} does not exist"
                )
            self.allowed_signers = trusted.allowed_signers_file
        else:
            self.allowed_signers = state_dir / "no-allowed-signers"
            self.allowed_signers.write_text("")

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["GNUPGHOME"] = str(self.gnupg_home)
        env["LC_ALL"] = "C"  # messages we parse are in English
        env.pop("GIT_CONFIG_PARAMETERS", None)
        return env

    def _import_openpgp_keys(self, files: Iterable[Path]) -> tuple[str, ...]:
        fingerprints: list[str] = []
        for path in files:
            if not path.is_file():
                raise SignatureConfigError(f"trusted OpenPGP key file {path} does not exist")
            before = set(self._list_fingerprints())
            result = self._run_gpg(["--import", str(path)])
            added = [f for f in self._list_fingerprints() if f not in before]
            if result.returncode != 0 and not added:
                raise SignatureConfigError(
                    f"cannot import trusted OpenPGP key file {path}: "
                    f"{result.stderr.strip() or 'gpg failed'}"
                )
            if not added and not before:
                raise SignatureConfigError(f"{path} contains no OpenPGP public key")
            fingerprints.extend(added)
        if fingerprints:
            ownertrust = "".join(f"{fpr}:6:\n" for fpr in fingerprints)
            result = self._run_gpg(["--import-ownertrust"], stdin=ownertrust)
            if result.returncode != 0:
                raise SignatureConfigError(f"cannot set owner trust: {result.stderr.strip()}")
        return tuple(fingerprints)

    def _list_fingerprints(self) -> list[str]:
        result = self._run_gpg(["--with-colons", "--list-keys"])
        fprs: list[str] = []
        expect_fpr = False
        for line in result.stdout.splitlines():
            fields = line.split(":")
            if fields[0] == "pub":
                expect_fpr = True
            elif fields[0] == "fpr" and expect_fpr:
                fprs.append(fields[9])
                expect_fpr = False
        return fprs

    def _run_gpg(
        self, args: list[str], stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self._gpg, "--batch", "--no-tty", "--homedir", str(self.gnupg_home), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            env=self._env(),
            check=False,
        )

    def _git(self, repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "git",
                "-C",
                str(repo),
                "-c",
                f"gpg.program={self._gpg}",
                "-c",
                f"gpg.ssh.allowedSignersFile={self.allowed_signers}",
                "-c",
                "gpg.minTrustLevel=fully",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            env=self._env(),
            check=False,
        )

    def verify(self, repo: Path, commit: str) -> SignatureCheck:
        """Check ``commit`` (any revision) of the repository at ``repo``."""
        raw = self._git(repo, "cat-file", "commit", commit)
        if raw.returncode != 0:
            return self._error(commit, f"cannot read commit {commit}: {raw.stderr.strip()}")
        method = _signature_method(raw.stdout)
        shown = self._git(
            repo, "show", "-s", "--format=%H%x00%G?%x00%GS%x00%GF%x00%GK%x00%GG", commit
        )
        if shown.returncode != 0:
            return self._error(commit, f"cannot check commit {commit}: {shown.stderr.strip()}")
        sha, status, signer, fingerprint, key_id, gpg_text = (
            shown.stdout.split("\x00", 5) + [""] * 6
        )[:6]
        key = fingerprint or key_id
        short = sha[:12]
        check = self._classify(short, status, method, signer, key, gpg_text.strip(), repo)
        result = SignatureCheck(
            commit=sha,
            verdict=check[0],
            message=check[1],
            method=method,
            signer=signer,
            key=key,
        )
        if self._metrics is not None:
            self._metrics.count_commit_verification(result.verdict.value)
        log.log(
            logging.INFO if result.trusted else logging.WARNING,
            "commit %s signature: %s (%s)",
            short,
            result.verdict.value,
            result.message,
        )
        return result

    def _error(self, commit: str, message: str) -> SignatureCheck:
        if self._metrics is not None:
            self._metrics.count_commit_verification(Verdict.ERROR.value)
        log.warning("commit %s signature: error (%s)", commit, message)
        return SignatureCheck(commit, Verdict.ERROR, message)

    def _classify(
        self,
        short: str,
        status: str,
        method: Method | None,
        signer: str,
        key: str,
        detail: str,
        repo: Path,
    ) -> tuple[Verdict, str]:
        kind = {Method.OPENPGP: "OpenPGP", Method.SSH: "SSH", None: "unknown"}[method]
        who = f"{signer} ({kind} key {key})" if signer else f"{kind} key {key or '?'}"
        if status == "N" or method is None:
            return (
                Verdict.UNSIGNED,
                f"commit {short} is not signed; only signed commits are applied",
            )
        if method not in self.trusted.methods:
            accepted = ", ".join(sorted(m.value for m in self.trusted.methods))
            return (
                Verdict.UNTRUSTED_KEY,
                f"commit {short} has an {kind} signature, but only {accepted} signatures are "
                "accepted",
            )
        if status == "B":
            return (
                Verdict.BAD_SIGNATURE,
                f"the signature on commit {short} by {who} does not match the commit's content: "
                "the commit was altered after signing, or the signature is corrupt",
            )
        if status == "E":
            if method is Method.OPENPGP and ("No public key" in detail or not detail):
                return (
                    Verdict.UNTRUSTED_KEY,
                    f"commit {short} is signed with {kind} key {key or '?'}, which is not among "
                    "the trusted keys",
                )
            return Verdict.ERROR, f"cannot check the signature of commit {short}: {detail}"
        if status == "U":
            where = "the allowed signers file" if method is Method.SSH else "the trusted keys"
            return Verdict.UNTRUSTED_KEY, f"commit {short} is signed by {who}, not in {where}"
        if status in ("X", "Y", "R"):
            why = {
                "X": "the signature has expired",
                "Y": "the key has expired",
                "R": "the key is revoked",
            }[status]
            return Verdict.UNTRUSTED_KEY, f"commit {short} is signed by {who}, but {why}"
        if status == "G":
            # %G? says the signature is good; git verify-commit with minTrustLevel=fully also
            # says the key is trusted (an SSH key without a principal is good but untrusted).
            confirmed = self._git(repo, "verify-commit", short)
            if confirmed.returncode == 0:
                return Verdict.TRUSTED, f"commit {short} is signed by trusted {who}"
            return Verdict.UNTRUSTED_KEY, f"commit {short} is signed by {who}, which is not trusted"
        return Verdict.ERROR, f"unexpected verification status {status!r} for commit {short}"


def _signature_method(commit_object: str) -> Method | None:
    headers = commit_object.split("\n\n", 1)[0]
    for line in headers.splitlines():
        if line.startswith(("gpgsig ", "gpgsig-sha256 ")):
            if "BEGIN SSH SIGNATURE" in line:
                return Method.SSH
            return Method.OPENPGP  # PGP SIGNATURE; X.509 (gpgsm) is not supported and fails
    return None


@dataclass(frozen=True)
class SigningConfig:
    """How the reconciler signs its own commits: ``git -c k=v ...`` plus environment.

    Use ``git_args()`` on the command line (``git *args commit ...``) or ``config_pairs()`` with
    GitPython (``repo.git(c=pairs).commit(...)``); pass ``env`` to the process either way.
    ``git commit-tree`` also needs ``commit_tree_args()``.
    """

    config: Mapping[str, str]
    env: Mapping[str, str] = field(default_factory=dict)

    def config_pairs(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.config.items()]

    def git_args(self) -> list[str]:
        return [arg for pair in self.config_pairs() for arg in ("-c", pair)]

    def commit_tree_args(self) -> list[str]:
        """Flags for ``git commit-tree``, which ignores ``commit.gpgsign`` and signs only with
        ``-S`` (the key comes from ``user.signingkey`` in ``git_args()``)."""
        return ["-S"]


def signing_config(
    *,
    openpgp_key: str | None = None,
    gnupg_home: Path | None = None,
    ssh_key_file: Path | None = None,
    gpg_program: str = "gpg",
) -> SigningConfig:
    """Git settings that sign every commit with the configured key.

    ``openpgp_key``: key id or fingerprint of a secret key in ``gnupg_home`` (default: the
    process's GNUPGHOME). ``ssh_key_file``: a private key file (or its ``.pub`` when the private
    key is in an ssh-agent). Exactly one must be given.
    """
    if (openpgp_key is None) == (ssh_key_file is None):
        raise SignatureConfigError(
            "give exactly one signing key: an OpenPGP key id or an SSH key file"
        )
    if ssh_key_file is not None:
        if not ssh_key_file.is_file():
            raise SignatureConfigError(f"SSH signing key file {ssh_key_file} does not exist")
        if ssh_key_file.suffix != ".pub" and ssh_key_file.stat().st_mode & 0o077:
            # ssh-keygen refuses such a key with a message that does not say which file
            raise SignatureConfigError(
                f"SSH signing key file {ssh_key_file} is readable by others; chmod 600 it"
            )
        return SigningConfig(
            {
                "commit.gpgsign": "true",
                "tag.gpgsign": "false",
                "gpg.format": "ssh",
                "user.signingkey": str(ssh_key_file.resolve()),
            }
        )
    assert openpgp_key is not None
    env = {"GNUPGHOME": str(gnupg_home)} if gnupg_home is not None else {}
    return SigningConfig(
        {
            "commit.gpgsign": "true",
            "tag.gpgsign": "false",
            "gpg.format": "openpgp",
            "gpg.program": gpg_program,
            "user.signingkey": openpgp_key,
        },
        env,
    )
