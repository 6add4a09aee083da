"""Fetch, status pushes and refused pushes against Git servers as people run them: OpenSSH with a
deploy key and an enforced known_hosts, and smart HTTP (``git http-backend`` behind lighttpd)
with basic authentication. Credentials never show in logs, errors, snapshots or the mirror."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from reconciler.gitops.credentials import GitCredentials
from reconciler.gitops.errors import RemoteAccessDenied, StatusNotFound
from reconciler.gitops.mirror import Mirror
from reconciler.gitops.publisher import Publisher
from reconciler.gitops.source import CommitSource, NewCommit
from reconciler.gitops.status_reader import status_from_git
from tests.gitops.conftest import Person, Remote, git
from tests.gitops.servers import (
    HOOK_MESSAGE,
    HttpGitServer,
    SshGitServer,
    keygen,
    missing_server_programs,
)
from tests.gitops.test_publisher import status_change, status_states

#: characters a URL must escape, so both spellings are looked for
PASSWORD = "s3cr3t:p@ss/w0rd%x-7f3a9c"
WRONG_PASSWORD = "not-the-password:4d1e"


def _need_servers() -> None:
    missing = missing_server_programs()
    assert not missing, f"run scripts/install: missing {', '.join(missing)}"


@pytest.fixture
def ssh_server(remote: Remote, tmp_path: Path) -> Iterator[SshGitServer]:
    _need_servers()
    server = SshGitServer(remote.root, tmp_path / "sshd")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def http_server(remote: Remote, tmp_path: Path) -> Iterator[HttpGitServer]:
    _need_servers()
    server = HttpGitServer(remote.root, tmp_path / "httpd", {"reconciler": PASSWORD})
    server.start()
    yield server
    server.stop()


@pytest.fixture
def ssh_credentials(ssh_server: SshGitServer, tmp_path: Path) -> GitCredentials:
    return GitCredentials(ssh_key=ssh_server.deploy_key,
                          known_hosts=ssh_server.known_hosts(tmp_path / "known_hosts"))


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "git-password"
    path.write_text(PASSWORD + "\n")
    path.chmod(0o600)
    return path


def assert_secret_nowhere(secret: str, *, state: Path, remote: Remote, mirror: Mirror,
                          caplog: pytest.LogCaptureFixture, texts: list[str]) -> None:
    """Neither spelling of ``secret`` in the logs, the texts (errors), any file of the state
    directory (mirror config, FETCH_HEAD, queue), ``git remote -v``, or anything in the remote
    (commit messages, snapshot files)."""
    forms = {secret, quote(secret, safe="")}
    places = {"logs": caplog.text, "remote -v": git(mirror.path, "remote", "-v"),
              "mirror url": mirror.url,
              "remote history": git(remote.path, "log", "--all", "-p", "--format=%an %ae%n%B")}
    places.update({f"text {n}": text for n, text in enumerate(texts)})
    for path in state.rglob("*"):
        if path.is_file():
            places[str(path)] = path.read_bytes().decode("utf-8", errors="replace")
    leaks = [where for where, text in places.items() if any(form in text for form in forms)]
    assert leaks == []
    assert (mirror.path / "config").is_file()


def _poll_sees_new_commit(mirror: Mirror, alice: Person) -> None:
    seen: list[NewCommit] = []
    source = CommitSource(mirror, ["main"], seen.append)
    [first] = source.poll()
    sha = alice.commit_and_push("Bump driver to 2.34.0.1", {"README.md": "bump\n"})
    [new] = source.poll()
    assert (new.sha, new.previous) == (sha, first.sha)
    assert [c.subject for c in new.commits] == ["Bump driver to 2.34.0.1"]


def _declined_push_is_kept_then_lands(publisher: Publisher, server: SshGitServer | HttpGitServer,
                                      remote: Remote, caplog: pytest.LogCaptureFixture) -> str:
    before = remote.head()
    server.refuse_pushes()
    publisher.enqueue(status_change(1, "StepUpgrade"))
    refused = publisher.flush()
    assert refused.error is not None and refused.remaining == 1
    assert "pre-receive hook declined" in refused.error and HOOK_MESSAGE in refused.error
    assert remote.head() == before
    assert len(publisher.pending()) == 1
    assert "1 change(s) wait for" in caplog.text and HOOK_MESSAGE in caplog.text
    server.allow_pushes()
    publisher.enqueue(status_change(1, "StepPaused"))
    landed = publisher.flush()
    assert landed.ok and len(landed.landed) == 2
    assert status_states(remote) == ["1:StepUpgrade", "1:StepPaused"]
    assert publisher.pending() == []
    return refused.error


# -- SSH ------------------------------------------------------------------------------------

def test_ssh_deploy_key_fetches_new_commits_with_known_hosts_enforced(
        ssh_server: SshGitServer, ssh_credentials: GitCredentials, alice: Person,
        tmp_path: Path) -> None:
    mirror = Mirror(ssh_server.url(), tmp_path / "state", credentials=ssh_credentials)
    _poll_sees_new_commit(mirror, alice)
    assert "git-shell" in ssh_server.log.read_text()  # through the deploy key's forced command


def test_ssh_status_push_lands_and_a_hook_refusal_is_queued_until_allowed(
        ssh_server: SshGitServer, ssh_credentials: GitCredentials, remote: Remote,
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    state = tmp_path / "state"
    publisher = Publisher(Mirror(ssh_server.url(), state, credentials=ssh_credentials), "main",
                          state_dir=state, sleep=lambda _: None)
    _declined_push_is_kept_then_lands(publisher, ssh_server, remote, caplog)
    assert git(remote.path, "log", "-1", "--format=%an") == "gpu-gitops-reconciler"


def test_ssh_changed_host_key_is_refused_and_nothing_is_fetched_or_pushed(
        ssh_server: SshGitServer, remote: Remote, tmp_path: Path) -> None:
    impostor = keygen(tmp_path / "other_host_key", "another-host")
    known_hosts = ssh_server.known_hosts(tmp_path / "known_hosts", impostor)
    written = known_hosts.read_text()
    state = tmp_path / "state"
    mirror = Mirror(ssh_server.url(), state,
                    credentials=GitCredentials(ssh_key=ssh_server.deploy_key,
                                               known_hosts=known_hosts))
    with pytest.raises(RemoteAccessDenied, match=r"refused: Host key for \[127\.0\.0\.1\]:\d+ "
                                                 r"has changed"):
        mirror.fetch()
    assert mirror.branches() == {}
    publisher = Publisher(mirror, "main", state_dir=state, sleep=lambda _: None)
    before = remote.head()
    publisher.enqueue(status_change(1, "StepUpgrade"))
    result = publisher.flush()
    assert result.error is not None and "has changed" in result.error
    assert remote.head() == before and len(publisher.pending()) == 1
    assert known_hosts.read_text() == written
    assert "Accepted publickey" not in ssh_server.log.read_text()


def test_ssh_unknown_host_is_refused_not_added_to_known_hosts(
        ssh_server: SshGitServer, tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    mirror = Mirror(ssh_server.url(), tmp_path / "state",
                    credentials=GitCredentials(ssh_key=ssh_server.deploy_key,
                                               known_hosts=known_hosts))
    with pytest.raises(RemoteAccessDenied, match=r"No ED25519 host key is known for "
                                                 r"\[127\.0\.0\.1\]:\d+"):
        mirror.fetch()
    assert known_hosts.read_text() == ""  # strict checking, never accept-new
    assert mirror.branches() == {}


def test_ssh_key_without_access_is_refused_with_the_reason(
        ssh_server: SshGitServer, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger_key"
    keygen(stranger, "not-authorized")
    mirror = Mirror(ssh_server.url(), tmp_path / "state",
                    credentials=GitCredentials(ssh_key=stranger,
                                               known_hosts=ssh_server.known_hosts(
                                                   tmp_path / "known_hosts")))
    with pytest.raises(RemoteAccessDenied, match=r"Permission denied \(publickey\)"):
        mirror.fetch()


def test_ssh_deploy_key_readable_by_others_is_refused_naming_the_file(
        ssh_server: SshGitServer, tmp_path: Path) -> None:
    lax = tmp_path / "mounted_key"
    lax.write_bytes(ssh_server.deploy_key.read_bytes())
    lax.chmod(0o644)  # a Secret volume without defaultMode 0400
    mirror = Mirror(ssh_server.url(), tmp_path / "state",
                    credentials=GitCredentials(ssh_key=lax, known_hosts=ssh_server.known_hosts(
                        tmp_path / "known_hosts")))
    with pytest.raises(RemoteAccessDenied, match=f"Permissions 0644 for '{lax}' are too open"):
        mirror.fetch()


def test_ssh_settings_from_the_environment_are_used(
        ssh_server: SshGitServer, alice: Person, remote: Remote, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    known_hosts = ssh_server.known_hosts(tmp_path / "known_hosts")
    # the Deployment's way (deploy/deployment.yaml): a GIT_SSH_COMMAND of the process
    monkeypatch.setenv("GIT_SSH_COMMAND", f"ssh -i {ssh_server.deploy_key} -o IdentitiesOnly=yes "
                                          f"-o UserKnownHostsFile={known_hosts}")
    _poll_sees_new_commit(Mirror(ssh_server.url(), tmp_path / "state-a"), alice)
    # and the reconciler's own variables, which win over it
    monkeypatch.setenv("GIT_SSH_COMMAND", "ssh -i /nonexistent-key")
    monkeypatch.setenv("RECONCILER_GIT_SSH_KEY", str(ssh_server.deploy_key))
    monkeypatch.setenv("RECONCILER_GIT_KNOWN_HOSTS", str(known_hosts))
    assert Mirror(ssh_server.url(), tmp_path / "state-b").fetch() == {"main": remote.head()}


def test_ssh_strict_host_checking_holds_under_a_lax_ssh_command(
        ssh_server: SshGitServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    monkeypatch.setenv("GIT_SSH_COMMAND", f"ssh -i {ssh_server.deploy_key} "
                                          f"-o UserKnownHostsFile={empty}")
    with pytest.raises(RemoteAccessDenied, match="host key is known"):
        Mirror(ssh_server.url(), tmp_path / "state").fetch()
    assert empty.read_text() == ""


# -- smart HTTP -----------------------------------------------------------------------------

def test_http_basic_auth_fetches_new_commits_with_a_password_file(
        http_server: HttpGitServer, password_file: Path, alice: Person, remote: Remote,
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    state = tmp_path / "state"
    mirror = Mirror(http_server.url(), state,
                    credentials=GitCredentials(username="reconciler", password_file=password_file))
    _poll_sees_new_commit(mirror, alice)
    assert_secret_nowhere(PASSWORD, state=state, remote=remote, mirror=mirror, caplog=caplog,
                          texts=[])


def test_http_status_push_lands_and_a_hook_refusal_is_queued_until_allowed(
        http_server: HttpGitServer, password_file: Path, remote: Remote, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    state = tmp_path / "state"
    mirror = Mirror(http_server.url(), state,
                    credentials=GitCredentials(username="reconciler", password_file=password_file))
    publisher = Publisher(mirror, "main", state_dir=state, sleep=lambda _: None)
    error = _declined_push_is_kept_then_lands(publisher, http_server, remote, caplog)
    assert_secret_nowhere(PASSWORD, state=state, remote=remote, mirror=mirror, caplog=caplog,
                          texts=[error])


def test_http_password_in_the_url_is_used_but_never_stored_or_shown(
        http_server: HttpGitServer, remote: Remote, alice: Person, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    state = tmp_path / "state"
    url = http_server.url(userinfo=f"reconciler:{quote(PASSWORD, safe='')}")
    mirror = Mirror(url, state, credentials=GitCredentials())
    assert mirror.url == http_server.url()
    _poll_sees_new_commit(mirror, alice)
    publisher = Publisher(mirror, "main", state_dir=state, sleep=lambda _: None)
    publisher.enqueue(status_change(2, "StepUpgrade"))
    assert publisher.flush().ok
    assert status_states(remote) == ["2:StepUpgrade"]
    # the same mirror after a restart, found again under the URL without the password
    assert Mirror(url, state, credentials=GitCredentials()).path == mirror.path
    assert_secret_nowhere(PASSWORD, state=state, remote=remote, mirror=mirror, caplog=caplog,
                          texts=[])


@pytest.mark.parametrize("where", ["url", "file"])
def test_http_wrong_password_is_refused_without_showing_it(
        where: str, http_server: HttpGitServer, remote: Remote, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    state = tmp_path / "state"
    if where == "url":
        url = http_server.url(userinfo=f"reconciler:{quote(WRONG_PASSWORD, safe='')}")
        credentials = GitCredentials()
    else:
        url = http_server.url()
        wrong = tmp_path / "wrong-password"
        wrong.write_text(WRONG_PASSWORD)
        credentials = GitCredentials(username="reconciler", password_file=wrong)
    mirror = Mirror(url, state, credentials=credentials)
    with pytest.raises(RemoteAccessDenied, match="Authentication failed") as refused:
        mirror.fetch()
    publisher = Publisher(mirror, "main", state_dir=state, sleep=lambda _: None)
    before = remote.head()
    publisher.enqueue(status_change(1, "StepUpgrade"))
    result = publisher.flush()
    assert result.error is not None and "Authentication failed" in result.error
    assert remote.head() == before and len(publisher.pending()) == 1
    assert mirror.branches() == {}
    assert_secret_nowhere(WRONG_PASSWORD, state=state, remote=remote, mirror=mirror,
                          caplog=caplog, texts=[str(refused.value), result.error])


def test_http_without_credentials_fails_at_once_instead_of_prompting(
        http_server: HttpGitServer, tmp_path: Path) -> None:
    mirror = Mirror(http_server.url(), tmp_path / "state", credentials=GitCredentials())
    # GIT_ASKPASS answers nothing: git gives up at once, no terminal prompt can hang the daemon
    with pytest.raises(RemoteAccessDenied, match="Authentication failed"):
        mirror.fetch()


def test_http_missing_password_file_is_named_and_nothing_is_fetched(
        http_server: HttpGitServer, tmp_path: Path) -> None:
    missing = tmp_path / "secret" / "password"
    mirror = Mirror(http_server.url(), tmp_path / "state",
                    credentials=GitCredentials(username="reconciler", password_file=missing))
    with pytest.raises(RemoteAccessDenied, match=f"Git password file {missing}"):
        mirror.fetch()
    assert mirror.branches() == {}


def test_http_rotated_password_file_is_read_at_the_next_fetch(
        http_server: HttpGitServer, remote: Remote, tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text(WRONG_PASSWORD)
    mirror = Mirror(http_server.url(), tmp_path / "state",
                    credentials=GitCredentials(username="reconciler", password_file=secret))
    with pytest.raises(RemoteAccessDenied):
        mirror.fetch()
    secret.write_text(PASSWORD + "\n")  # the mounted Secret was updated
    assert mirror.fetch() == {"main": remote.head()}


def test_status_from_git_over_https_uses_the_environments_credentials_and_hides_the_url_password(
        http_server: HttpGitServer, password_file: Path, remote: Remote, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    publisher = Publisher(Mirror(http_server.url(), state, credentials=GitCredentials(
        username="reconciler", password_file=password_file)), "main", state_dir=state)
    publisher.enqueue(status_change(1, "StepPaused"))
    assert publisher.flush().ok
    # `reconciler status --from git` builds its mirror from RECONCILER_GIT_* (docs/gitops.md)
    monkeypatch.setenv("RECONCILER_GIT_USERNAME", "reconciler")
    monkeypatch.setenv("RECONCILER_GIT_PASSWORD_FILE", str(password_file))
    snapshot = status_from_git(http_server.url(), "prod-a", state_dir=tmp_path / "reader")
    assert snapshot["upgradeStatus"]["status"]["currentStepState"] == "StepPaused"
    monkeypatch.delenv("RECONCILER_GIT_PASSWORD_FILE")
    url = http_server.url(userinfo=f"reconciler:{quote(PASSWORD, safe='')}")
    with pytest.raises(StatusNotFound, match="has no branch 'nope'") as missing:
        status_from_git(url, "prod-a", branch="nope", state_dir=tmp_path / "reader")
    assert PASSWORD not in str(missing.value)
    assert quote(PASSWORD, safe="") not in str(missing.value)
