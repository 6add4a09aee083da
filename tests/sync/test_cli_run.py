"""``reconciler run`` refuses bad usage with a message naming the flag (exit 2), never a
traceback, before it touches a cluster or a repository."""

from __future__ import annotations

from click.testing import CliRunner

from reconciler.cli.main import cli


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["run", *args], env={"RECONCILER_REPO": None})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_usage_errors_name_the_flag() -> None:
    code, out = _run("--role", "sync")
    assert code == 2 and "--role sync needs --repo and --cluster" in out
    code, out = _run("--role", "controller", "--mode", "operator")
    assert code == 2 and "in operator mode the vendor operator is the controller" in out
    code, out = _run("--repo", ".", "--cluster", "a", "--fetch-interval", "soon")
    assert code == 2 and "--fetch-interval" in out
    code, out = _run("--role", "controller", "--lease-duration", "1s", "--leader-elect",
                     "--kubeconfig", "/nonexistent/kubeconfig")
    assert code == 2 and "--kubeconfig" in out and "does not exist" in out
    code, out = _run("--role", "fleet")
    assert code == 2 and "'fleet' is not one of" in out


def test_status_from_cluster_needs_a_kubeconfig() -> None:
    result = CliRunner().invoke(cli, ["status", "--from", "cluster"], env={"KUBECONFIG": None})
    assert result.exit_code == 2 and "--from cluster needs --kubeconfig" in result.output


def test_an_http_forge_url_off_loopback_is_refused_before_anything_starts() -> None:
    code, out = _run("--repo", ".", "--cluster", "a", "--forge", "gitea", "--forge-url",
                     "http://gitea.example.com/api/v1", "--forge-token-file", "/dev/null")
    assert code == 2 and "--forge-url: http:// is refused for gitea.example.com" in out
    code, out = _run("--repo", ".", "--cluster", "a", "--forge", "bitbucket")
    assert code == 2 and "'bitbucket' is not one of" in out
