"""The daemon's typed settings below the CLI: ``reconciler run``'s flags become one frozen
``DaemonSettings`` (``cli/run.py``), and what cannot run together is refused by the daemon's own
checks, without click, with the message the CLI shows."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

import pytest

from reconciler.cli.run import daemon_settings, run
from reconciler.config.document import ConfigDocument
from reconciler.daemon.assembly import _start_forge_statuses
from reconciler.daemon.settings import (
    DaemonSettings,
    Forge,
    RepoConfigArg,
    SettingRefused,
    UsageRefused,
    check_forge_url,
    check_roles,
)
from reconciler.settings.live import LiveSettings


def _flags(*args: str) -> dict[str, object]:
    """The values click resolves for ``reconciler run ARGS`` (no environment)."""
    context = run.make_context("run", list(args), resilient_parsing=False)
    return dict(context.params)


def test_the_flags_become_typed_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("RECONCILER_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    settings = daemon_settings(_flags(
        "--repo", "https://git.example.com/policy.git", "--cluster", "prod-a",
        "--fetch-interval", "1m", "--ready-timeout", "90s", "--ops-listen", "off",
        "--state-dir", "~/state", "--leader-elect", "--lease-duration", "20s",
        "--trusted-gpg-key", __file__, "--admission-host", "a.example", "--admission-host",
        "b.example"))
    assert isinstance(settings, DaemonSettings)
    assert (settings.role, settings.mode, settings.runs_sync, settings.runs_controller) == (
        "all", "builtin", True, True)
    assert (settings.fetch_interval, settings.ready_timeout, settings.status_min_interval) == (
        60.0, 90.0, None)
    assert settings.ops_listen is None, "off: no ops server"
    assert settings.state_dir == Path("~/state").expanduser()
    assert settings.election.enabled and settings.election.duration == 20.0
    assert settings.election.deadline == 10.0 and settings.election.retry == 2.0
    assert settings.signatures.trusted_gpg_keys == (Path(__file__),)
    assert settings.admission.hosts == ("a.example", "b.example")
    assert settings.admission.cert_interval == 30.0
    with pytest.raises(AttributeError):
        settings.role = "sync"  # type: ignore[misc]


def test_roles_that_cannot_run_are_refused_without_the_cli() -> None:
    with pytest.raises(UsageRefused, match="--role sync needs --repo and --cluster"):
        check_roles("sync", "builtin", repo=None, cluster=None)
    with pytest.raises(UsageRefused, match="--role all needs --cluster"):
        check_roles("all", "builtin", repo="https://h/r.git", cluster=None)
    with pytest.raises(UsageRefused, match="in operator mode the vendor operator is the"):
        check_roles("controller", "operator", repo=None, cluster=None)
    check_roles("controller", "builtin", repo=None, cluster=None)
    operator = DaemonSettings(role="all", mode="operator", repo="r", cluster="c")
    assert operator.runs_sync and not operator.runs_controller
    with pytest.raises(UsageRefused, match=r"http:// is refused for gitea\.example\.com"):
        check_forge_url("http://gitea.example.com/api/v1")
    check_forge_url(None)


def test_a_missing_kubeconfig_names_its_flag() -> None:
    from reconciler.daemon.assembly import kube_api

    with pytest.raises(SettingRefused, match="does not exist") as refused:
        kube_api("/nonexistent/kubeconfig")
    assert refused.value.flag == "--kubeconfig"


def _forge_statuses(forge: Forge, section: dict[str, object]) -> None:
    """The daemon's forge wiring with reconciler.yaml's ``forge:`` section in force; without a
    token file nothing else is used (no sync role needed)."""
    settings = DaemonSettings(repo="git@github.com:fleet/policy.git", cluster="prod",
                              repo_config=RepoConfigArg("reconciler.yaml", {"forge": section},
                                                        b""), forge=forge)
    live = LiveSettings("prod")
    live.offer(ConfigDocument.from_data({"forge": section}), source="reconciler.yaml")
    _start_forge_statuses(settings, cast(Any, None), live, cast(Any, None), lambda: True,
                          cast(Any, None))


def test_a_bad_forge_section_in_git_turns_statuses_off_but_a_bad_flag_refuses_the_start(
        caplog: pytest.LogCaptureFixture) -> None:
    """A merged change must not keep the daemon (and every rollout) from starting."""
    off_host = {"type": "github", "url": "https://collector.example.net"}
    with caplog.at_level("ERROR", logger="reconciler.daemon.assembly"):
        _forge_statuses(Forge(), off_host)
    assert ("reconciler.yaml forge: forge.url: collector.example.net is not the remote's host "
            "github.com") in caplog.text
    assert "commit statuses are off until it is fixed" in caplog.text
    with pytest.raises(UsageRefused, match="--forge-url: http:// is refused"):
        _forge_statuses(Forge(kind="gitea", url="http://gitea.example.com/api/v1"), {})
