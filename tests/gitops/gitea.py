"""A real Gitea on 127.0.0.1 for the tests and benchmarks that host the policy repository on a
forge: built once by scripts/install-gitea, started here with SQLite in a temporary folder.

The instance is offline (no avatars, no update checks), mails nothing, has no SSH, runners or
indexer, and delivers webhooks to loopback addresses (its default allows only external ones).
Its admin and the admin's token are made with Gitea's own CLI before the server starts
(``gitea admin user create --admin``, ``gitea admin user generate-access-token``); everything
else (organisations, repositories, webhooks, commit statuses) goes through its REST API with
that token. Git over HTTP takes the token as the password.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from reconciler.sim.control_plane import free_ports
from reconciler.sim.waiting import wait_for

#: the admin the CLI makes; the token is this user's
ADMIN = "gitea-admin"


class GiteaNotFound(AssertionError):
    """No built Gitea: scripts/install-gitea builds one."""


def gitea_home() -> Path:
    """The folder of the newest Gitea build in the cache (``bin/gitea`` and ``static/``)."""
    cache = Path(os.environ.get("RECONCILER_CACHE", "/var/cache/gpu-reconciler"))
    built = sorted(cache.glob("gitea-*/bin/gitea"),
                   key=lambda p: tuple(int(x) for x in p.parents[1].name[6:].split(".")
                                       if x.isdigit()))
    if not built:
        raise GiteaNotFound(f"no Gitea in {cache}/gitea-*/bin: run scripts/install-gitea")
    return built[-1].parents[1]


def _app_ini(root: Path, static: Path, port: int) -> str:
    return f"""\
APP_NAME = gpu-reconciler tests
RUN_MODE = prod
RUN_USER = {getpass.getuser()}
WORK_PATH = {root}

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = {port}
DOMAIN = 127.0.0.1
ROOT_URL = http://127.0.0.1:{port}/
LOCAL_ROOT_URL = http://127.0.0.1:{port}/
APP_DATA_PATH = {root}/data
STATIC_ROOT_PATH = {static}
OFFLINE_MODE = true
DISABLE_SSH = true
START_SSH_SERVER = false
LFS_START_SERVER = false

[database]
DB_TYPE = sqlite3
PATH = {root}/data/gitea.db
SQLITE_JOURNAL_MODE = WAL

[repository]
ROOT = {root}/repositories
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true
SECRET_KEY = {secrets.token_hex(32)}
INTERNAL_TOKEN = {secrets.token_hex(48)}
# webhooks to the daemon on this machine (Gitea allows only external hosts by default)
ALLOWED_HOST_LIST = loopback

[webhook]
DELIVER_TIMEOUT = 10

[service]
DISABLE_REGISTRATION = true
REQUIRE_SIGNIN_VIEW = false
ENABLE_NOTIFY_MAIL = false

[mailer]
ENABLED = false

[oauth2]
ENABLED = false

[actions]
ENABLED = false

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[session]
PROVIDER = memory

[queue]
# in memory: Gitea's default persistent queues poll when idle (up to 2 s, twice between a push
# and its webhook delivery)
TYPE = channel

[cron]
ENABLED = false

[cron.update_checker]
ENABLED = false


[log]
MODE = file
LEVEL = Info
ROOT_PATH = {root}/log
"""


class Gitea:
    """One Gitea process: ``start()`` makes the instance, its admin and token; ``stop()``."""

    def __init__(self, root: Path) -> None:
        self.home = gitea_home()
        self.binary = self.home / "bin" / "gitea"
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (self.port,) = free_ports(1)
        self.config = root / "app.ini"
        self.config.write_text(_app_ini(root, self.home / "static", self.port))
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_url = f"{self.url}/api/v1"
        self.token = ""
        self.log_path = root / "gitea.out"
        self.process: subprocess.Popen[bytes] | None = None
        self.env = {**os.environ, "GITEA_WORK_DIR": str(root), "HOME": str(root),
                    "USER": getpass.getuser()}
        if os.getuid() == 0:  # CI runs as root; Gitea refuses that unless told
            self.env["GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT"] = "true"
        for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM"):  # Gitea's own git config
            self.env.pop(name, None)

    def cli(self, *args: str) -> str:
        result = subprocess.run([str(self.binary), "--config", str(self.config),
                                 "--work-path", str(self.root), *args],
                                capture_output=True, text=True, env=self.env, timeout=300)
        if result.returncode != 0:
            raise AssertionError(f"gitea {' '.join(args[:3])} exited {result.returncode}:\n"
                                 f"{result.stdout}{result.stderr}")
        return result.stdout.strip()

    def start(self) -> Gitea:
        self.cli("migrate")
        self.cli("admin", "user", "create", "--admin", "--username", ADMIN, "--email",
                 f"{ADMIN}@example.com", "--password", secrets.token_urlsafe(18),
                 "--must-change-password=false")
        self.token = self.new_token("tests", "all")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(self.binary), "web", "--config", str(self.config), "--work-path",
                 str(self.root)], stdout=log, stderr=subprocess.STDOUT, env=self.env)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def new_token(self, name: str, scopes: str) -> str:
        """A new access token of the admin with ``scopes`` (Gitea's words, comma-separated)."""
        return self.cli("admin", "user", "generate-access-token", "--username", ADMIN,
                        "--token-name", name, "--scopes", scopes, "--raw")

    def _wait_ready(self, timeout: float = 120) -> None:
        def ready() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"gitea exited with {self.process.returncode}:\n"
                                     f"{self.log()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
                return bool(self.api("GET", "/version").get("version"))
            except (OSError, AssertionError):
                return False

        wait_for(ready, timeout=timeout, what="gitea answering /version",
                 observe=lambda: self.log()[-3000:], interval=0.2)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def log(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        logs = self.root / "log" / "gitea.log"
        return text + (logs.read_text(errors="replace") if logs.exists() else "")

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One call of Gitea's REST API as the admin; the decoded answer."""
        request = urllib.request.Request(
            self.api_url + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {self.token}", "Accept": "application/json",
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                text = answer.read()
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"gitea {method} {path}: {exc.code} "
                                 f"{exc.read(500).decode(errors='replace')}") from None
        return json.loads(text) if text else None

    def create_repository(self, owner: str, name: str) -> str:
        """An empty repository ``owner/name`` in organisation ``owner`` (made if missing);
        returns its clone URL (HTTP, without credentials)."""
        orgs = {o["username"] for o in self.api("GET", "/admin/orgs")}
        if owner not in orgs:
            self.api("POST", "/orgs", {"username": owner, "visibility": "public"})
        repo = self.api("POST", f"/orgs/{owner}/repos",
                        {"name": name, "private": False, "default_branch": "main"})
        return str(repo["clone_url"])

    def clone_url(self, owner: str, name: str) -> str:
        """The HTTP URL with the admin and token in it (a person's clone)."""
        return f"http://{ADMIN}:{self.token}@127.0.0.1:{self.port}/{owner}/{name}.git"

    def add_push_webhook(self, owner: str, name: str, url: str, secret: str) -> int:
        """A Gitea webhook (Gitea's own type: X-Gitea-Signature) for pushes to ``url``."""
        hook = self.api("POST", f"/repos/{owner}/{name}/hooks", {
            "type": "gitea", "active": True, "events": ["push"], "branch_filter": "*",
            "config": {"url": url, "content_type": "json", "secret": secret}})
        return int(hook["id"])

    def statuses(self, owner: str, name: str, sha: str) -> list[dict[str, Any]]:
        """The commit statuses on ``sha``, oldest first, as Gitea's API gives them."""
        found: list[dict[str, Any]] = []
        page = 1
        # "highestindex" is Gitea's name for index ascending (its "leastindex" descends)
        while batch := self.api("GET", f"/repos/{owner}/{name}/commits/{sha}/statuses"
                                       f"?sort=highestindex&limit=50&page={page}"):
            found += batch
            page += 1
        return sorted(found, key=lambda status: int(status["id"]))

