"""Credentials at the Git seam: URLs lose their secrets, texts are redacted, ssh is strict, and
git's credential helper hands the password over without it reaching an argument list."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.gitops.credentials import (
    REDACTED,
    GitAuth,
    GitCredentials,
    redact,
    split_userinfo,
    ssh_command,
)
from reconciler.gitops.mirror import mirror_dir


@pytest.mark.parametrize(("url", "clean", "user", "password"), [
    ("https://alice:pw@git.example.com/fleet/policy.git",
     "https://git.example.com/fleet/policy.git", "alice", "pw"),
    # a token as the user name (GitHub accepts it): an HTTP URL keeps no userinfo at all
    ("https://ghp_token123@github.com/o/r.git", "https://github.com/o/r.git", "ghp_token123", None),
    ("http://u:p%40ss%3Aw%2Fd@127.0.0.1:8080/git/r.git", "http://127.0.0.1:8080/git/r.git", "u",
     "p@ss:w/d"),
    ("https://u:pw@[::1]:8443/r.git", "https://[::1]:8443/r.git", "u", "pw"),
    # an ssh login is not a secret; a password in an ssh URL is
    ("ssh://git:pw@git.example.com:2222/policy.git", "ssh://git@git.example.com:2222/policy.git",
     "git", "pw"),
    ("ssh://git@git.example.com/policy.git", "ssh://git@git.example.com/policy.git", "git", None),
    ("git@github.com:o/r.git", "git@github.com:o/r.git", None, None),
    ("https://git.example.com/r.git", "https://git.example.com/r.git", None, None),
    ("file:///srv/git/policy.git", "file:///srv/git/policy.git", None, None),
])
def test_split_userinfo_keeps_no_secret_in_the_url(url: str, clean: str, user: str | None,
                                                   password: str | None) -> None:
    assert split_userinfo(url) == (clean, user, password)


def test_mirror_of_a_url_is_the_same_whatever_the_password() -> None:
    state = Path("/state")
    assert (mirror_dir(state, split_userinfo("https://u:old@h/r.git")[0])
            == mirror_dir(state, split_userinfo("https://u:rotated@h/r.git")[0])
            == mirror_dir(state, "https://h/r.git"))


def test_redact_removes_known_secrets_and_every_urls_userinfo() -> None:
    text = ("fatal: unable to access 'https://bob:hunter2@h/r.git/': 401; retried "
            "http://tok3n@h/x and ssh://git:pw@h/y; the password was hunter2 "
            f"(encoded {quote('a/b:c', safe='')}) and a/b:c")
    out = redact(text, ["hunter2", "a/b:c", ""])
    assert "hunter2" not in out and "tok3n" not in out and ":pw@" not in out
    assert "a/b:c" not in out and quote("a/b:c", safe="") not in out
    assert "https://***@h/r.git/" in out and "http://***@h/x" in out
    assert "ssh://git:***@h/y" in out
    assert out.count(REDACTED) == 6


# a password made of the marker's own characters ("*") cannot be told apart from the marker
@given(st.text(min_size=1, max_size=40).filter(
           lambda s: s.strip() == s and "\n" not in s and s not in REDACTED),
       st.text(alphabet=st.characters(whitelist_categories=("Ll", "Nd")), min_size=1,
               max_size=12))
def test_any_password_in_a_url_is_recovered_exactly_and_redacted(password: str,
                                                                 user: str) -> None:
    url = f"https://{user}:{quote(password, safe='')}@git.example.com/fleet/policy.git"
    clean, got_user, got_password = split_userinfo(url)
    assert (clean, got_user, got_password) == (
        "https://git.example.com/fleet/policy.git", user, password)
    said = redact(f"fatal: Authentication failed for '{url}' using {password}", [password])
    assert password not in said and quote(password, safe="") not in said


def test_ssh_command_with_a_deploy_key_offers_only_it_and_checks_the_host_strictly() -> None:
    command = ssh_command(GitCredentials(ssh_key=Path("/etc/git creds/key"),
                                         known_hosts=Path("/etc/git creds/known_hosts")),
                          configured="ssh -o StrictHostKeyChecking=no")
    words = shlex.split(command)
    assert words[:3] == ["ssh", "-i", "/etc/git creds/key"]
    for option in ("IdentitiesOnly=yes", "UserKnownHostsFile=/etc/git creds/known_hosts",
                   "GlobalKnownHostsFile=/dev/null", "BatchMode=yes",
                   "StrictHostKeyChecking=yes", "UpdateHostKeys=no"):
        assert option in words
    assert "StrictHostKeyChecking=no" not in words  # the process's own command is not used


def test_ssh_command_of_the_process_gets_batch_mode_and_strict_checking_appended() -> None:
    always = "-o BatchMode=yes -o StrictHostKeyChecking=yes -o UpdateHostKeys=no"
    assert ssh_command(GitCredentials(), "ssh -i /k") == f"ssh -i /k {always}"
    assert ssh_command(GitCredentials(), None) == f"ssh {always}"


def test_credentials_from_the_environment() -> None:
    creds = GitCredentials.from_environment({
        "RECONCILER_GIT_SSH_KEY": "/k", "RECONCILER_GIT_KNOWN_HOSTS": "/kh",
        "RECONCILER_GIT_USERNAME": "bot", "RECONCILER_GIT_PASSWORD_FILE": "/pw"})
    assert creds == GitCredentials(Path("/k"), Path("/kh"), "bot", Path("/pw"))
    assert GitCredentials.from_environment({}) == GitCredentials()


def _fill(env: dict[str, str], tmp_path: Path) -> str:
    """What git's credential machinery answers for an HTTPS URL with ``env``."""
    config = tmp_path / "gitconfig"
    # a helper of the machine's own config must not answer: ours resets the list
    config.write_text("[credential]\n\thelper = !echo password=from-the-machine-config\n")
    result = subprocess.run(
        ["git", "credential", "fill"], input="protocol=https\nhost=git.example.com\n\n",
        capture_output=True, text=True, timeout=30,
        env={"PATH": "/usr/bin:/bin", "GIT_CONFIG_GLOBAL": str(config), "GIT_CONFIG_NOSYSTEM": "1",
             "GIT_TERMINAL_PROMPT": "0", **env},
    )
    return result.stdout


def test_credential_helper_answers_with_the_password_kept_out_of_git_config(
        tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("t0k3n value\n")
    env = GitAuth.build(GitCredentials(username="bot", password_file=secret), None, None,
                        environ={}).environment()
    assert "username=bot\npassword=t0k3n value\n" in _fill(env, tmp_path)
    # the helper's definition (an argument of git's) names the variable, never the value
    assert all("t0k3n" not in value for key, value in env.items() if key.startswith("GIT_"))


def test_the_urls_password_wins_no_password_means_no_helper(tmp_path: Path) -> None:
    auth = GitAuth.build(GitCredentials(username="ignored"), "alice", "from-url", environ={})
    assert "username=alice\npassword=from-url\n" in _fill(auth.environment(), tmp_path)
    assert auth.secrets() == ["from-url"]
    plain = GitAuth.build(GitCredentials(), None, None, environ={}).environment()
    assert set(plain) == {"GIT_SSH_COMMAND"}


@pytest.mark.parametrize("flag", ["--git-ssh-key", "--git-known-hosts", "--git-password-file"])
def test_run_refuses_a_missing_credential_file_naming_the_flag(flag: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from reconciler.cli.main import cli

    missing = tmp_path / "not-mounted"
    result = CliRunner().invoke(cli, ["run", "--repo", "https://h/r.git", "--cluster", "a",
                                      flag, str(missing)])
    assert result.exit_code == 2
    assert flag in result.output and "does not exist" in result.output
