"""Where commit statuses go (docs/forges.md): the forge's kind, API base URL and repository, from
``run --forge ...`` or ``forge:`` in reconciler.yaml (never the token: that is a file the
daemon reads at each post). Pure: checked here, posted by ``reconciler.gitops.forge_status``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from reconciler.errors import RepoConfigError
from reconciler.files import printable, unsafe

#: the forges commit statuses go to
FORGES: Final = ("github", "gitlab", "gitea")
#: ``git@host:owner/name.git``
_SCP_LIKE = re.compile(r"^(?:[^@/]+@)?(?P<host>[^:/]+):(?P<path>(?!//).+)\Z")


class ForgeConfigError(RepoConfigError):
    """A forge setting that cannot work; the message names the key or flag."""


class ForgeOffHostError(ForgeConfigError):
    """``forge.url`` of reconciler.yaml is not on the remote's host."""


@dataclass(frozen=True, slots=True)
class ForgeSection:
    """``forge:`` of reconciler.yaml as written (its keys checked when it is used: ``forge_config``;
    ``reconciler validate`` locates what is wrong). Part of the live settings, so a commit that
    changes it changes where the statuses go."""

    type: object = None
    url: object = None
    repository: object = None

    @classmethod
    def read(cls, raw: object) -> ForgeSection | None:
        """The section of a parsed file (None: no section, or not a mapping)."""
        if not isinstance(raw, Mapping):
            return None
        return cls(raw.get("type"), raw.get("url"), raw.get("repository"))

    def as_mapping(self) -> dict[str, Any]:
        """The keys given (``forge_config``'s ``file_section``)."""
        keys = {"type": self.type, "url": self.url, "repository": self.repository}
        return {key: value for key, value in keys.items() if value is not None}


@dataclass(frozen=True, slots=True)
class ForgeConfig:
    kind: str  # github | gitlab | gitea
    url: str  # the API base URL, without a trailing slash
    repository: str  # owner/name (GitLab: group/subgroup/name)


def is_loopback_host(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_api_url(url: str, *, key: str) -> str:
    """The API base URL, refused unless ``https://`` (``http://`` only to a loopback
    address: the token would travel in clear)."""
    shown = printable(url if len(url) <= 80 else url[:60] + "...")
    if any(unsafe(char) or char.isspace() for char in url.strip()):
        raise ForgeConfigError(f"{key}: a URL cannot hold spaces or control characters, got "
                               f"{shown!r}")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:  # a bracket that is not an IPv6 address, a port that is no number
        port = 0
        parts = urlsplit("")
    if parts.scheme not in ("https", "http") or not parts.hostname or port == 0:
        raise ForgeConfigError(f"{key}: expected an https:// API URL, got {shown!r}")
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise ForgeConfigError(f"{key}: http:// is refused for {parts.hostname} (the token "
                               "would travel in clear); use https://")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ForgeConfigError(f"{key}: give the API base URL alone (no credentials, query or "
                               "fragment)")
    return url.strip().rstrip("/")


def repository_problem(repository: str) -> str | None:
    """Why ``repository`` (owner/name) cannot name one on the forge: a ``.`` or ``..`` part
    would move the status call to another API path (the token goes with it)."""
    if any(unsafe(char) or char.isspace() for char in repository):
        return "cannot hold spaces or control characters"
    if any(part in (".", "..") for part in repository.strip("/").split("/")):
        return "cannot have a '.' or '..' part (it would leave the repository's API path)"
    return None


def _split_remote(remote: str) -> tuple[str, str] | None:
    """``(host, path)`` of a remote URL: https, ssh (``ssh://git@host/o/n.git``) or scp-like
    (``git@host:o/n.git``); None for a local path."""
    text = remote.strip()
    if "://" in text:
        parts = urlsplit(text)
        if parts.scheme == "file" or not parts.hostname:
            return None
        return parts.hostname.lower(), parts.path
    if text.startswith(("/", ".", "~")):
        return None
    if m := _SCP_LIKE.match(text):
        return m.group("host").lower(), m.group("path")
    return None


def repository_from_remote(remote: str) -> str | None:
    """``owner/name`` of a remote URL (a GitLab group path is kept whole); None for a local
    path."""
    split = _split_remote(remote)
    if split is None:
        return None
    path = split[1].strip("/").removesuffix(".git").strip("/")
    return path if path.count("/") >= 1 else None


def check_on_remote_host(api: str, remote: str) -> None:
    """``forge.url`` from reconciler.yaml is what a merged change sets, and the token goes where
    it points: it must be on the remote's host (or ``api.`` before it, as GitHub's); any
    other API URL must come from the command line, which only the operator sets."""
    host = (urlsplit(api).hostname or "").lower()
    home = (_split_remote(remote) or (None, ""))[0]
    if home is not None and host in (home, f"api.{home}"):
        return
    where = f"the remote's host {home}" if home else "a host (the remote is a local path)"
    raise ForgeOffHostError(
        f"forge.url: {host} is not {where}; the token goes where this URL points and "
        "reconciler.yaml is what a merged change sets, so an API URL elsewhere is given with "
        "--forge-url")


def forge_config(*, kind: str | None, url: str | None, repository: str | None,
                 remote: str, file_section: Mapping[str, Any] | ForgeSection | None = None,
                 flag: str = "--forge") -> ForgeConfig | None:
    """The forge from the flags, each missing one from reconciler.yaml's ``forge:``
    (``file_section``); None when neither names a forge. Raises ForgeConfigError."""
    section = (file_section.as_mapping() if isinstance(file_section, ForgeSection)
               else file_section or {})
    kind = kind or section.get("type")
    if not kind:
        return None
    if kind not in FORGES:
        raise ForgeConfigError(f"{flag}: expected one of {', '.join(FORGES)}, got {kind!r}")
    where = "--forge-url" if url else "forge.url"
    url = url or section.get("url")
    if not isinstance(url, str) or not url:
        raise ForgeConfigError(f"{flag} {kind} needs --forge-url (or forge.url in "
                               "reconciler.yaml): the API base URL")
    api = check_api_url(url, key=where)
    if where == "forge.url":
        check_on_remote_host(api, remote)
    repository = repository or section.get("repository") or repository_from_remote(remote)
    if not isinstance(repository, str) or "/" not in repository.strip("/"):
        raise ForgeConfigError(f"{flag}: the repository cannot be derived from {remote!r}; "
                               "give --forge-repository OWNER/NAME")
    problem = repository_problem(repository)
    if problem is not None:
        raise ForgeConfigError(f"{flag}: the repository {problem}")
    return ForgeConfig(kind, api, repository.strip("/"))
