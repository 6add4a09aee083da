"""Git servers as people run them, on 127.0.0.1, each started and stopped by its fixture.

* ``SshGitServer``: Debian's OpenSSH server (``/usr/sbin/sshd -D``, its own config, host key and
  authorized_keys in a temporary directory) serving Git through ``git-shell`` as a forced command
  of one deploy key; password logins off. It logs in as the user running the tests: as root
  (CI) with ``PermitRootLogin prohibit-password`` (keys only), so no user is added to the machine;
  as root, sshd needs its privilege separation directory ``/run/sshd`` (created if missing, as
  Debian's service would).
* ``HttpGitServer``: lighttpd running ``git http-backend`` as CGI behind basic authentication
  (an htpasswd file); ``git http-backend`` enables pushes for an authenticated user.

Both serve the bare repositories under a folder; ``refuse_pushes`` installs a pre-receive hook
that declines every push until ``allow_pushes``.
"""

from __future__ import annotations

import getpass
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from reconciler.sim.waiting import wait_for
from tests.gitops.conftest import _free_port, listens

SSHD = Path("/usr/sbin/sshd")
LIGHTTPD = Path("/usr/sbin/lighttpd")
HTPASSWD = Path("/usr/bin/htpasswd")
HOOK_MESSAGE = "GH006: Protected branch update failed for refs/heads/main"


def _git_exec_path() -> Path:
    out = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def missing_server_programs() -> list[str]:
    """Programs of these servers that are not installed (``scripts/install`` installs them)."""
    needed = [SSHD, LIGHTTPD, HTPASSWD, _git_exec_path() / "git-http-backend",
              Path(shutil.which("git-shell") or "/usr/bin/git-shell")]
    return [str(p) for p in needed if not p.exists()]


def keygen(path: Path, comment: str) -> str:
    """A new ed25519 key pair at ``path``; returns the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f",
                    str(path)], check=True, capture_output=True)
    return Path(f"{path}.pub").read_text().strip()


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Returns once the server listens; stops it and fails otherwise (nothing left running)."""
    try:
        _poll_port(port, process, log)
    except BaseException:
        _stop(process)
        raise


def _poll_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    def listening() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"server exited with {process.returncode}: {log.read_text()}")
        return listens(port)

    wait_for(listening, timeout=15, what=f"the server listening on {port}",
             observe=log.read_text)


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


class _HookedRepos:
    def __init__(self, repos: Path, work: Path) -> None:
        self.repos = repos
        self._refusing = work / "refuse-pushes"

    def refuse_pushes(self, repo: str = "policy.git") -> None:
        hook = self.repos / repo / "hooks" / "pre-receive"
        hook.write_text(
            "#!/bin/sh\n"
            f"if [ -e {shlex.quote(str(self._refusing))} ]; then\n"
            f"  echo {shlex.quote('error: ' + HOOK_MESSAGE)} >&2; exit 1\nfi\n"
        )
        hook.chmod(0o755)
        self._refusing.touch()

    def allow_pushes(self) -> None:
        self._refusing.unlink(missing_ok=True)


class SshGitServer(_HookedRepos):
    def __init__(self, repos: Path, work: Path) -> None:
        super().__init__(repos, work)
        self.dir = work
        work.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.user = getpass.getuser()
        self.host_key = work / "host_ed25519"
        self.host_public_key = keygen(self.host_key, "test-host")
        #: the reconciler's deploy key, the only key sshd accepts
        self.deploy_key = work / "deploy_key"
        deploy_public = keygen(self.deploy_key, "reconciler-deploy-key")
        self.authorized_keys = work / "authorized_keys"
        # git-shell runs only git's pack commands, whatever the client asks for
        self.authorized_keys.write_text(
            f'restrict,command="git-shell -c \\"$SSH_ORIGINAL_COMMAND\\"" {deploy_public}\n'
        )
        self.log = work / "sshd.log"
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, repo: str = "policy.git") -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{self.repos / repo}"

    def known_hosts(self, path: Path, public_key: str | None = None) -> Path:
        """A known_hosts file naming this server with its key (or with ``public_key``)."""
        key_type, key = (public_key or self.host_public_key).split()[:2]
        path.write_text(f"[127.0.0.1]:{self.port} {key_type} {key}\n")
        return path

    def start(self) -> None:
        config = self.dir / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {self.host_key}",
            f"PidFile {self.dir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            f"AllowUsers {self.user}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            # the temporary directories are not owned the way StrictModes wants
            "StrictModes no",
            "UsePAM no",
            "LogLevel VERBOSE",
            "",
        ]))
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        with self.log.open("wb") as log:
            # an absolute path: sshd re-executes itself per connection
            self.process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)],
                                            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        _wait_for_port(self.port, self.process, self.log)

    def stop(self) -> None:
        _stop(self.process)
        self.process = None


class HttpGitServer(_HookedRepos):
    def __init__(self, repos: Path, work: Path, users: dict[str, str]) -> None:
        super().__init__(repos, work)
        self.dir = work
        work.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.htpasswd = work / "htpasswd"
        for number, (user, password) in enumerate(users.items()):
            subprocess.run([str(HTPASSWD), "-B", "-b", *(["-c"] if number == 0 else []),
                            str(self.htpasswd), user, password], check=True, capture_output=True)
        self.log = work / "lighttpd.log"
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, repo: str = "policy.git", userinfo: str = "") -> str:
        return f"http://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}/git/{repo}"

    def start(self) -> None:
        docroot = self.dir / "www"
        docroot.mkdir(exist_ok=True)
        backend = _git_exec_path() / "git-http-backend"
        config = self.dir / "lighttpd.conf"
        config.write_text(f"""
server.modules = ("mod_alias", "mod_setenv", "mod_auth", "mod_authn_file", "mod_cgi")
server.document-root = "{docroot}"
server.bind = "127.0.0.1"
server.port = {self.port}
server.errorlog = "{self.log}"
alias.url = ("/git/" => "{backend}/")
$HTTP["url"] =~ "^/git/" {{
  cgi.assign = ("" => "")
  setenv.set-environment = ("GIT_PROJECT_ROOT" => "{self.repos}", "GIT_HTTP_EXPORT_ALL" => "1")
}}
auth.backend = "htpasswd"
auth.backend.htpasswd.userfile = "{self.htpasswd}"
auth.require = ("/git/" => ("method" => "basic", "realm" => "policy", "require" => "valid-user"))
""")
        out = self.dir / "lighttpd.out"
        with out.open("wb") as log:
            self.process = subprocess.Popen([str(LIGHTTPD), "-D", "-f", str(config)],
                                            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        _wait_for_port(self.port, self.process, out)

    def stop(self) -> None:
        _stop(self.process)
        self.process = None
