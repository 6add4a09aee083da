"""Real Git for the Git-side tests: bare remotes over file://, a ``git daemon`` on 127.0.0.1
with receive-pack enabled, and people who clone, commit and push."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.sim.waiting import wait_for

POLICY = """\
# Policy for the prod-a cluster: canary first.
apiVersion: gpu.metax-tech.com/v1alpha1
kind: ClusterOperator
metadata:
  name: cluster-operator
spec:
  driver:
    payload:
      name: driver-image
      registry: "registry.example.com/metax"   # mirrored registry
      version: 2.33.0.9
      pullPolicy: IfNotPresent
    fwUpgradePolicy: PreferCloud
    upgradePolicy:
      enableRollout: true
      # one canary, then half, then the rest
      upgradeSteps:
        - replicas: 1
        - replicas: "50%"
          pauseDuration: 600000
        - replicas: "100%"
          pauseDuration: 0
      maxParallel: 2     # two at a time
      fallback: pause

  devicePlugin:
    deploy: true
"""

REPO_CONFIG = """\
# reconciler settings for this repository
sync:
  fetchInterval: 30s
  statusMinInterval: 5s
"""


def git(cwd: Path, *args: str, check: bool = True) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr}")
    return result.stdout.strip()


@pytest.fixture(autouse=True)
def git_identity(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A private global config: no dependence on the machine's ~/.gitconfig."""
    config = tmp_path_factory.mktemp("gitconfig") / "config"
    config.write_text(
        "[user]\n\tname = Alice Operator\n\temail = alice@example.com\n"
        "[init]\n\tdefaultBranch = main\n[protocol \"file\"]\n\tallow = always\n"
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


class Person:
    """Someone with a clone who commits and pushes like a person does (never forcing)."""

    def __init__(self, url: str, workdir: Path, name: str = "Alice Operator") -> None:
        self.dir = workdir
        subprocess.run(["git", "clone", "-q", url, str(workdir)], check=True, capture_output=True)
        email = name.split()[0].lower() + "@example.com"
        git(workdir, "config", "user.name", name)
        git(workdir, "config", "user.email", email)

    def write(self, path: str, text: str) -> None:
        target = self.dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def read(self, path: str) -> str:
        return (self.dir / path).read_text()

    def commit(self, message: str, files: dict[str, str] | None = None) -> str:
        for path, text in (files or {}).items():
            self.write(path, text)
        git(self.dir, "add", "-A")
        git(self.dir, "commit", "-q", "-m", message)
        return git(self.dir, "rev-parse", "HEAD")

    def pull(self) -> None:
        git(self.dir, "pull", "-q", "--rebase")

    def push(self) -> None:
        git(self.dir, "push", "-q", "origin", "HEAD:main")

    def commit_and_push(self, message: str, files: dict[str, str]) -> str:
        """Commit, then push; on a race pull --rebase and push again, as people do."""
        sha = self.commit(message, files)
        for _ in range(20):
            result = subprocess.run(["git", "push", "-q", "origin", "HEAD:main"], cwd=self.dir,
                                    capture_output=True, text=True)
            if result.returncode == 0:
                return git(self.dir, "rev-parse", "HEAD")
            self.pull()
        raise AssertionError(f"could not push {sha}")


class Remote:
    """A bare repository seeded with a policy repo; ``url`` is file://."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "policy.git"
        subprocess.run(["git", "init", "-q", "--bare", str(self.path)], check=True)
        # no force push can ever land, whoever tries
        git(self.path, "config", "receive.denyNonFastForwards", "true")
        git(self.path, "config", "receive.denyDeletes", "true")
        self._hidden = root / "policy.git.down"

    @property
    def url(self) -> str:
        return self.path.as_uri()

    def log(self, *args: str) -> str:
        return git(self.path, "log", "--format=%H %an%x09%s", *args)

    def show(self, rev_path: str) -> str:
        return git(self.path, "show", rev_path)

    def head(self) -> str:
        return git(self.path, "rev-parse", "main")

    def go_down(self) -> None:
        self.path.rename(self._hidden)

    def come_back(self) -> None:
        self._hidden.rename(self.path)


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    remote = Remote(tmp_path / "server")
    seeder = Person(remote.url, tmp_path / "seed")
    seeder.commit("Add prod-a policy", {
        "reconciler.yaml": REPO_CONFIG,
        "clusters/prod-a/cluster-operator.yaml": POLICY,
        "README.md": "policy repo\n",
    })
    seeder.push()
    return remote


@pytest.fixture
def alice(remote: Remote, tmp_path: Path) -> Person:
    return Person(remote.url, tmp_path / "alice")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listens(port: int) -> bool:
    """Whether something accepts connections on the loopback ``port``."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


class GitDaemon:
    """``git daemon`` serving ``base`` on 127.0.0.1 with push enabled; can go down and back."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack",
             f"--base-path={self.base}", "--listen=127.0.0.1", f"--port={self.port}",
             str(self.base)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_for(lambda: listens(self.port), timeout=10, what="git daemon listening")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


@pytest.fixture
def git_daemon(remote: Remote) -> Iterator[GitDaemon]:
    daemon = GitDaemon(remote.root)
    daemon.start()
    yield daemon
    daemon.stop()
