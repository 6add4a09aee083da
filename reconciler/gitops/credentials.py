"""How the reconciler authenticates to its Git remote, and keeping the secrets out of text.

SSH: a deploy key and a ``known_hosts`` file; the host key is always checked strictly (an unknown
or changed host key is refused, never accepted and remembered). HTTPS: a user name and a password
or token, from the URL's userinfo or a file; git receives them from a credential helper that reads
them from the git process's environment, so the URL git stores (``.git/config``, ``FETCH_HEAD``)
and every argument list carry none. Every text the Git adapter hands on (errors, logs) passes
``redact`` first.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

#: what replaces a secret in any text
REDACTED = "***"

_PASSWORD_ENV = "RECONCILER_GIT_HELPER_PASSWORD"
_USERNAME_ENV = "RECONCILER_GIT_HELPER_USERNAME"
# The helper answers ``get`` only (git also calls it with ``store``/``erase``); it reads the
# values from its environment, which only this uid (and root) can read.
_HELPER = (
    f'!f() {{ test "$1" = get || exit 0; printf "username=%s\\npassword=%s\\n" '
    f'"${_USERNAME_ENV}" "${_PASSWORD_ENV}"; }}; f'
)
#: userinfo of any URL in a text (``scheme://userinfo@``)
_USERINFO_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s'\"]+)@")
_HTTP_SCHEMES = ("http", "https")


class CredentialsError(ValueError):
    """A credential file is missing or unreadable; the message names the file, never its
    content."""


@dataclass(frozen=True, slots=True)
class GitCredentials:
    """What the daemon was configured with (``reconciler run --git-*``, docs/gitops.md)."""

    #: SSH private key (a deploy key); with it, only this key is offered
    ssh_key: Path | None = None
    #: the hosts' public keys; with it, no other known_hosts file is consulted
    known_hosts: Path | None = None
    #: HTTPS user name (the URL's wins when it has one)
    username: str | None = None
    #: HTTPS password or token, read at each Git operation (a rotated Secret is picked up)
    password_file: Path | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> GitCredentials:
        """From ``RECONCILER_GIT_SSH_KEY``, ``RECONCILER_GIT_KNOWN_HOSTS``,
        ``RECONCILER_GIT_USERNAME`` and ``RECONCILER_GIT_PASSWORD_FILE``."""
        env = os.environ if environ is None else environ

        def path(name: str) -> Path | None:
            value = env.get(name)
            return Path(value) if value else None

        return cls(
            ssh_key=path("RECONCILER_GIT_SSH_KEY"),
            known_hosts=path("RECONCILER_GIT_KNOWN_HOSTS"),
            username=env.get("RECONCILER_GIT_USERNAME") or None,
            password_file=path("RECONCILER_GIT_PASSWORD_FILE"),
        )


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``(url without secrets, user name, password)``.

    An HTTP(S) URL loses its whole userinfo (a token is often the user name); another URL keeps
    its user name (``ssh://git@host``: the login, not a secret) and loses only a password.
    """
    match = _USERINFO_RE.match(url)
    if match is None:
        return url, None, None
    parts = urlsplit(url)
    user, _, password = match["userinfo"].partition(":")
    username = unquote(user) or None
    secret = unquote(password) if ":" in match["userinfo"] else None
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port is not None else "")
    if parts.scheme.lower() not in _HTTP_SCHEMES and username:
        netloc = f"{quote(username, safe='')}@{netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)), (
        username
    ), secret


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every known secret value and every URL's password replaced by ``***``;
    an HTTP(S) URL's user name goes too."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        for form in {secret, quote(secret, safe="")}:
            text = text.replace(form, REDACTED)

    def userinfo(match: re.Match[str]) -> str:
        scheme, info = match["scheme"], match["userinfo"]
        if scheme.lower().rstrip(":/") in _HTTP_SCHEMES:
            return f"{scheme}{REDACTED}@"
        user, colon, _ = info.partition(":")
        return f"{scheme}{user}{':' + REDACTED if colon else ''}@"

    return _USERINFO_RE.sub(userinfo, text)


@dataclass(frozen=True, slots=True)
class GitAuth:
    """The git environment of one remote: how ssh runs, and the HTTPS credentials."""

    ssh_command: str
    username: str | None = None
    password: str | None = None
    password_file: Path | None = None

    @classmethod
    def build(cls, credentials: GitCredentials, url_username: str | None,
              url_password: str | None, environ: Mapping[str, str] | None = None) -> GitAuth:
        env = os.environ if environ is None else environ
        return cls(
            ssh_command=ssh_command(credentials, env.get("GIT_SSH_COMMAND")),
            username=url_username or credentials.username,
            password=url_password,
            password_file=credentials.password_file,
        )

    def current_password(self) -> str | None:
        if self.password_file is None:
            return self.password
        try:
            return self.password_file.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise CredentialsError(
                f"Git password file {self.password_file}: {exc.strerror or exc}") from None

    def secrets(self) -> list[str]:
        """The secret values to cut out of any text (the password as it is now)."""
        values = [self.password or ""]
        if self.password_file is not None:
            with contextlib.suppress(CredentialsError):  # nothing to cut out then
                values.append(self.current_password() or "")
        return [v for v in values if v]

    def environment(self) -> dict[str, str]:
        """Variables for a git process talking to the remote."""
        env = {"GIT_SSH_COMMAND": self.ssh_command}
        password = self.current_password()
        if password is not None:
            # an empty helper first: only ours answers, whatever the machine's config says
            env.update({
                "GIT_CONFIG_COUNT": "2",
                "GIT_CONFIG_KEY_0": "credential.helper", "GIT_CONFIG_VALUE_0": "",
                "GIT_CONFIG_KEY_1": "credential.helper", "GIT_CONFIG_VALUE_1": _HELPER,
                _USERNAME_ENV: self.username or "git",
                _PASSWORD_ENV: password,
            })
        return env


#: never a prompt; an unknown or changed host key refused; known_hosts never written
_ALWAYS = "-o BatchMode=yes -o StrictHostKeyChecking=yes -o UpdateHostKeys=no"


def ssh_command(credentials: GitCredentials, configured: str | None) -> str:
    """The ``GIT_SSH_COMMAND``: the deploy key and known_hosts given, else the process's own
    ``GIT_SSH_COMMAND`` (or plain ``ssh``); then ``_ALWAYS`` (ssh takes an option's first value,
    so these fill only what an explicit command left unset)."""
    if credentials.ssh_key is not None or credentials.known_hosts is not None:
        parts = ["ssh"]
        if credentials.ssh_key is not None:
            parts += ["-i", shlex.quote(str(credentials.ssh_key)), "-o", "IdentitiesOnly=yes"]
        if credentials.known_hosts is not None:
            parts += ["-o", f"UserKnownHostsFile={shlex.quote(str(credentials.known_hosts))}",
                      "-o", "GlobalKnownHostsFile=/dev/null"]
        base = " ".join(parts)
    else:
        base = configured or "ssh"
    return f"{base} {_ALWAYS}"
