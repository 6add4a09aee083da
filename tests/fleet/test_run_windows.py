"""``reconciler run`` hands the controller the cluster's windows: ``clusters.<name>.windows``
when the cluster has its own, else the repository-wide ``windows``, from the commit the sync
read last (or --repo-config with --role controller)."""

from __future__ import annotations

from typing import Any

from reconciler.cli.run import _windows
from reconciler.policy.repo_config import RepoConfigFile

CONFIG = {
    "windows": {"allow": [{"schedule": "0 1 * * *", "duration": "1h"}]},
    "clusters": {"prod-100": {"windows": {"timezone": "Asia/Shanghai",
                                          "allow": [{"schedule": "0 22 * * *",
                                                     "duration": "8h"}]}}},
}


class FakeSync:
    def __init__(self, config: RepoConfigFile | None) -> None:
        self.config_file = config


def options(cluster: str | None) -> dict[str, Any]:
    return {"cluster": cluster, "repo_config": "x.yaml", "repo_config_data": CONFIG}


def test_the_controller_gets_the_clusters_own_windows_from_repo_config() -> None:
    calendar = _windows(options("prod-100"), None)()
    assert calendar is not None and calendar.timezone == "Asia/Shanghai"
    other = _windows(options("lab-10"), None)()
    assert other is not None and other.timezone == "UTC" and other.allow[0].schedule == "0 1 * * *"


def test_the_windows_follow_the_commit_the_sync_read_last() -> None:
    sync = FakeSync(RepoConfigFile.from_data(CONFIG))
    current = _windows(options("prod-100"), sync)
    assert current() is current()  # built once per file
    first = current()
    assert first is not None and first.timezone == "Asia/Shanghai"
    sync.config_file = RepoConfigFile.from_data({})  # a commit removed the windows
    assert current() is None
