"""A bare mirror of the policy repository in the reconciler's state directory.

Every Git read and write of the reconciler goes through this mirror, never through a person's
working copy: commits are built with plumbing (a private index file, ``commit-tree``) on top of
the remote branch head, and pushed without force. A push that loses a race raises
``PushRejected``; an unreachable remote raises ``RemoteUnavailable`` (``RemoteAccessDenied``
when credentials or the SSH host key were refused). Credentials: ``reconciler.gitops.credentials``;
no password reaches ``.git/config``, an argument list, an error or a log line.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import git
from git.exc import BadName, GitCommandError

from reconciler.files import MAX_FILE_BYTES
from reconciler.gitops.commits import CommitInfo, Identity, Person
from reconciler.gitops.credentials import (
    CredentialsError,
    GitAuth,
    GitCredentials,
    redact,
    split_userinfo,
)
from reconciler.gitops.errors import (
    GitOpsError,
    NotARepository,
    PushDeclined,
    PushRejected,
    RemoteAccessDenied,
    RemoteUnavailable,
)

# A SIGKILLed process does not take its git child with it: an orphaned fetch can still hold a
# ref's lock for a moment while the next process fetches into the same mirror. The mirror's
# refs only cache the remote's, so waiting and fetching again is safe.
REF_LOCK_RETRY_DELAYS = (0.1, 0.2, 0.4, 0.8, 1.6)
_REF_LOCKED = ("unable to update local ref", "cannot lock ref")

#: never ask for a password on a terminal: a daemon must fail, not hang
_GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "true",
}
#: a local working copy's checked-out branch is updated only when its tree is clean
_UPDATE_INSTEAD = "--receive-pack=git -c receive.denyCurrentBranch=updateInstead receive-pack"
_LOCK_RACE = re.compile(r"failed to update ref|cannot lock ref|failed to lock|incorrect old value")
_SCHEME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://|^[^/]+@[^/]+:")
_PROGRESS = re.compile(r"(Resolving deltas|Counting objects|Compressing objects|Total \d)")
#: what ssh and git say when the remote refused us or we refused the remote's host key, most
#: telling first; a matching line is the reason given (git's own last lines are generic)
_DENIED = tuple(re.compile(p) for p in (
    r"Host key for .* has changed", r"No \S+ host key is known for",
    r"Permissions \S+ for .* are too open", r"Permission denied",
    r"Authentication failed", r"returned error: 40[13]", r"could not read (Username|Password)",
    r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed",
))


def open_local_repository(path: Path) -> git.Repo:
    """A person's repository at ``path`` (the folder itself, not a parent's), read in place."""
    try:
        return git.Repo(path.expanduser(), search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise NotARepository(f"{path} is not a Git repository") from exc


def is_local_path(url: str) -> bool:
    return _SCHEME_RE.match(url) is None


def normalize_url(url: str) -> str:
    """Absolute path for a local repository, the URL without its password otherwise (an
    HTTP(S) URL without its userinfo: ``credentials.split_userinfo``)."""
    if is_local_path(url):
        return str(Path(url).expanduser().resolve())
    return split_userinfo(url)[0]


def mirror_dir(state_dir: Path, url: str) -> Path:
    url = normalize_url(url)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").rsplit("/", 1)[-1]).strip("-.")
    digest = hashlib.sha1(url.encode()).hexdigest()[:10]
    return state_dir / "mirrors" / f"{name.removesuffix('.git') or 'repo'}-{digest}.git"


_LOCKS: dict[Path, tuple[threading.RLock, threading.RLock]] = {}
_LOCKS_GUARD = threading.Lock()


def _locks_for(path: Path) -> tuple[threading.RLock, threading.RLock]:
    """One pair of locks per mirror directory, shared by every ``Mirror`` object on it."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(path, (threading.RLock(), threading.RLock()))


class Mirror:
    """One bare mirror per remote, thread-safe.

    Two locks: ``_lock`` serialises fetches and pushes (they update refs); ``_read_lock`` guards
    GitPython's object reads, which share one long-running ``git cat-file`` process per repo.
    """

    def __init__(
        self,
        url: str,
        state_dir: Path | str,
        *,
        update_checked_out: bool | None = None,
        network_timeout: float = 60.0,
        credentials: GitCredentials | None = None,
    ) -> None:
        """``credentials``: default ``GitCredentials.from_environment()``. A password in the
        URL is used, never stored: ``url`` and ``.git/config`` hold the URL without it."""
        _, url_username, url_password = (
            (None, None, None) if is_local_path(url) else split_userinfo(url))
        self._auth = GitAuth.build(credentials or GitCredentials.from_environment(),
                                   url_username, url_password)
        self.url = normalize_url(url)
        self.path = mirror_dir(Path(state_dir), self.url)
        # Pushing to a person's local working copy: update its checked-out branch only when its
        # working tree is clean (git's updateInstead); a dirty tree declines and we retry later.
        self.update_checked_out = is_local_path(url) if update_checked_out is None else (
            update_checked_out
        )
        self.network_timeout = network_timeout
        #: how the reconciler signs its own commits: (git options before the subcommand,
        #: commit-tree flags, environment); see reconciler.trust.signatures.signing_config
        self.signing: tuple[Sequence[str], Sequence[str], Mapping[str, str]] | None = None
        self._lock, self._read_lock = _locks_for(self.path)
        with self._lock:
            self._repo = self._open()

    # -- setup -------------------------------------------------------------------------------
    def _open(self) -> git.Repo:
        if (self.path / "HEAD").exists():
            # A process killed mid-fetch or mid-push leaves its ref locks behind, and every later
            # fetch would fail on them; the state dir is this replica's alone, so they are stale.
            for stale in [self.path / "packed-refs.lock", *(self.path / "refs").rglob("*.lock")]:
                stale.unlink(missing_ok=True)
            repo = git.Repo(self.path)
            if repo.remotes.origin.url != self.url:
                repo.git.remote("set-url", "origin", self.url)
            return repo
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repo = git.Repo.init(self.path, bare=True)
        repo.git.remote("add", "origin", self.url)
        repo.git.config("gc.autoDetach", "false")
        return repo

    @property
    def repo(self) -> git.Repo:
        return self._repo

    @property
    def read_lock(self) -> threading.RLock:
        """Held around object reads through ``repo`` (one shared ``git cat-file``)."""
        return self._read_lock

    def _git(
        self, *args: str, env: Mapping[str, str] | None = None, timeout: float | None = None,
        remote: bool = False,
    ) -> tuple[int, str, str]:
        """Run git in the mirror; with ``remote``, with the remote's credentials. Its error
        output comes back redacted."""
        auth = {}
        if remote:
            try:
                auth = self._auth.environment()
            except CredentialsError as exc:
                raise RemoteAccessDenied(f"{self.url}: {exc}") from None
        status, stdout, stderr = self._repo.git.execute(
            ["git", *args],
            with_extended_output=True,
            with_exceptions=False,
            env={**_GIT_ENV, "GIT_SSH_COMMAND": self._auth.ssh_command, **auth, **(env or {})},
            kill_after_timeout=timeout,
        )
        return int(status), str(stdout), self.redact(str(stderr))

    def redact(self, text: str) -> str:
        """``text`` without this remote's secrets (the password, any URL's userinfo)."""
        return redact(text, self._auth.secrets())

    def _remote_failure(self, what: str, stderr: str) -> RemoteUnavailable:
        lines = stderr.splitlines()
        denied = next((line.strip() for pattern in _DENIED for line in lines
                       if pattern.search(line)), None)
        if denied is not None:
            return RemoteAccessDenied(f"{what} {self.url} refused: {denied}")
        return RemoteUnavailable(f"{what} {self.url} failed: {_reason(stderr)}")

    # -- remote ------------------------------------------------------------------------------
    def fetch(self) -> dict[str, str]:
        """Fetch every branch of the remote; returns branch -> head sha."""
        with self._lock:
            for delay in (*REF_LOCK_RETRY_DELAYS, None):
                status, _, stderr = self._git(
                    "fetch", "--prune", "--no-tags", "origin", timeout=self.network_timeout,
                    remote=True,
                )
                if status == 0:
                    return self.branches()
                if delay is None or not any(m in stderr for m in _REF_LOCKED):
                    break
                time.sleep(delay)
            raise self._remote_failure("fetch from", stderr)

    def branches(self) -> dict[str, str]:
        status, stdout, _ = self._git(
            "for-each-ref", "--format=%(refname:lstrip=3) %(objectname)", "refs/remotes/origin/"
        )
        if status != 0:
            return {}
        result: dict[str, str] = {}
        for line in stdout.splitlines():
            name, _, sha = line.partition(" ")
            if name and name != "HEAD":
                result[name] = sha
        return result

    def head(self, branch: str) -> str | None:
        """The remote branch's head as of the last fetch or push, None if it does not exist."""
        return self.branches().get(branch)

    def push(self, commit: str, branch: str) -> None:
        """Fast-forward ``branch`` on the remote to ``commit``. Never forces."""
        args = ["push", "--porcelain", "--no-verify"]
        if self.update_checked_out:
            args.append(_UPDATE_INSTEAD)
        args += ["origin", f"{commit}:refs/heads/{branch}"]
        with self._lock:
            status, stdout, stderr = self._git(*args, timeout=self.network_timeout, remote=True)
            if status == 0:
                # keep the remote-tracking ref in step, so the next build starts from our commit
                self._git("update-ref", f"refs/remotes/origin/{branch}", commit)
                return
        rejected = [line for line in self.redact(stdout).splitlines() if line.startswith("!")]
        if not rejected:
            raise self._remote_failure("push to", stderr)
        detail = rejected[0].split("\t")[-1]
        # a concurrent push holding the ref lock shows as "[remote rejected] (failed to update
        # ref)" or "cannot lock ref": that is a race too, not a refusal
        if any("[rejected]" in line or _LOCK_RACE.search(line) for line in rejected):
            raise PushRejected(f"push to {self.url} {branch} lost a race: {detail}")
        if any("[remote rejected]" in line for line in rejected):
            said = _remote_message(stderr)
            raise PushDeclined(f"{self.url} refused the push to {branch}: {detail}"
                               + (f"; the server said: {said}" if said else ""))
        raise RemoteUnavailable(f"push to {self.url} failed: {detail}")

    # -- reading -----------------------------------------------------------------------------
    def resolve(self, rev: str) -> str | None:
        with self._read_lock:
            try:
                return str(self._repo.rev_parse(rev).hexsha)
            except (BadName, ValueError, GitCommandError):
                return None

    def read_file(self, commit: str, path: str) -> bytes | None:
        """The file's bytes at ``commit``, None when the path is not a file there."""
        with self._read_lock:
            return read_blob(self._repo, commit, path)

    def list_dir(self, commit: str, directory: str) -> list[str]:
        """Names of the entries of ``directory`` at ``commit`` (``[]`` if absent), sorted."""
        with self._read_lock:
            return list_tree(self._repo, commit, directory)

    def is_dir(self, commit: str, directory: str) -> bool:
        with self._read_lock:
            try:
                return bool((self._repo.commit(commit).tree / directory).type == "tree")
            except KeyError:
                return False

    def commit_info(self, sha: str) -> CommitInfo:
        with self._read_lock:
            return self._commit_info(sha)

    def _commit_info(self, sha: str) -> CommitInfo:
        commit = self._repo.commit(sha)
        return CommitInfo(
            sha=commit.hexsha,
            author=Person(str(commit.author.name), str(commit.author.email)),
            committer=Person(str(commit.committer.name), str(commit.committer.email)),
            authored_at=int(commit.authored_date),
            committed_at=int(commit.committed_date),
            message=str(commit.message),
        )

    def commits_between(self, old: str | None, new: str, *, limit: int = 1000) -> list[CommitInfo]:
        """Commits reachable from ``new`` but not from ``old``, newest first."""
        rev = new if old is None else f"{old}..{new}"
        with self._read_lock:
            return [self._commit_info(c.hexsha)
                    for c in self._repo.iter_commits(rev, max_count=limit)]

    def last_commit_touching(self, rev: str, path: str) -> CommitInfo | None:
        """The newest commit reachable from ``rev`` that changed ``path`` (None: none)."""
        with self._read_lock:
            found = next(iter(self._repo.iter_commits(rev, paths=path, max_count=1)), None)
            return self._commit_info(found.hexsha) if found is not None else None

    def commits_touching(self, rev: str, path: str, *, limit: int = 200) -> list[CommitInfo]:
        """The newest ``limit`` commits on ``rev``'s first-parent line that changed ``path``
        (a merged pull request: its merge commit), ours included, newest first."""
        with self._read_lock:
            return [self._commit_info(c.hexsha) for c in
                    self._repo.iter_commits(rev, paths=path, max_count=limit,
                                            first_parent=True)]

    def person_commits_touching(self, rev: str, path: str, *,
                                limit: int = 200) -> list[CommitInfo]:
        """``commits_touching`` without ours."""
        return [info for info in self.commits_touching(rev, path, limit=limit)
                if not info.is_own]

    def trailer_values(self, rev: str, key: str, *, limit: int = 200) -> list[str]:
        """Values of trailer ``key`` in the last ``limit`` commits reachable from ``rev``."""
        status, stdout, stderr = self._git(
            "log", f"--max-count={limit}",
            f"--format=%(trailers:key={key},valueonly,separator=%x00)", rev,
        )
        if status != 0:
            raise GitOpsError(f"git log {rev} failed: {_last_line(stderr)}")
        return [value.strip() for value in stdout.replace("\x00", "\n").splitlines()
                if value.strip()]

    # -- writing -----------------------------------------------------------------------------
    def create_commit(
        self,
        parent: str | None,
        changes: Mapping[str, bytes | None],
        message: str,
        identity: Identity,
        *,
        authored_at: float | None = None,
    ) -> str:
        """A commit with ``changes`` (path -> bytes, None deletes) on top of ``parent``.

        Built in a private index, so nothing else in the mirror changes until it is pushed.
        """
        # git CLI only (a private index, loose objects): safe next to fetches and reads
        with tempfile.TemporaryDirectory(prefix="reconciler-index-") as tmp:
            env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            self._check(self._git("read-tree", parent or "--empty", env=env))
            for number, (path, data) in enumerate(changes.items()):
                if data is None:
                    self._check(self._git("update-index", "--force-remove", "--", path, env=env))
                    continue
                content = Path(tmp) / f"blob-{number}"
                content.write_bytes(data)
                blob = self._check(self._git("hash-object", "-w", "--", str(content))).strip()
                self._check(
                    self._git("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}",
                              env=env)
                )
            tree = self._check(self._git("write-tree", env=env)).strip()
            message_file = os.path.join(tmp, "message")
            Path(message_file).write_text(message, encoding="utf-8")
            ident = {
                "GIT_AUTHOR_NAME": identity.name,
                "GIT_AUTHOR_EMAIL": identity.email,
                "GIT_COMMITTER_NAME": identity.name,
                "GIT_COMMITTER_EMAIL": identity.email,
            }
            if authored_at is not None:
                ident["GIT_AUTHOR_DATE"] = f"@{int(authored_at)} +0000"
            args = ["commit-tree", tree, "-F", message_file]
            if parent:
                args += ["-p", parent]
            if self.signing is not None:
                options, flags, signing_env = self.signing
                args = [*options, *args, *flags]
                ident.update(signing_env)
            return self._check(self._git(*args, env=ident)).strip()

    @staticmethod
    def _check(result: tuple[int, str, str]) -> str:
        status, stdout, stderr = result
        if status != 0:
            raise GitOpsError(f"git failed: {_last_line(stderr)}")
        return stdout


#: no file the reconciler reads or rewrites is larger
MAX_BLOB_BYTES = MAX_FILE_BYTES


def read_blob(repo: git.Repo, commit: str, path: str) -> bytes | None:
    """The file's bytes at ``commit`` of ``repo``, None when the path is not a regular file
    there (absent, a folder, a symbolic link) or is larger than MAX_BLOB_BYTES (known from the
    object header before reading). Policy and config files are read with
    ``gitops.reader.read_tree_file``, which says why instead."""
    try:
        item = repo.commit(commit).tree / path
    except KeyError:
        return None
    if item.type != "blob" or int(item.mode) & 0o170000 == 0o120000:
        return None
    if int(item.size) > MAX_BLOB_BYTES:
        return None
    data: bytes = item.data_stream.read(MAX_BLOB_BYTES + 1)
    return data if len(data) <= MAX_BLOB_BYTES else None


def list_tree(repo: git.Repo, commit: str, directory: str) -> list[str]:
    """Names of the entries of ``directory`` at ``commit`` of ``repo`` (``[]`` if absent),
    sorted; ``""`` is the root."""
    tree = repo.commit(commit).tree
    if directory.strip("/"):
        try:
            tree = tree / directory.strip("/")
        except KeyError:
            return []
    if tree.type != "tree":
        return []
    return sorted(item.name for item in tree)


def _remote_message(stderr: str, limit: int = 300) -> str:
    """What the server's hook printed (``remote:`` lines, progress left out), shortened."""
    lines = [line.removeprefix("remote:").strip() for line in stderr.splitlines()
             if line.startswith("remote:")]
    text = "; ".join(line for line in lines if line and not _PROGRESS.match(line))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reason(stderr: str) -> str:
    """git's own error line (``fatal: ...``), else its last line."""
    for line in stderr.splitlines():
        if line.startswith(("fatal:", "error:")):
            return line.strip()
    return _last_line(stderr)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def default_state_dir() -> Path:
    """``$RECONCILER_STATE_DIR``, else ``$XDG_STATE_HOME/gpu-gitops-reconciler``, else
    ``~/.local/state/gpu-gitops-reconciler``."""
    explicit = os.environ.get("RECONCILER_STATE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpu-gitops-reconciler"
