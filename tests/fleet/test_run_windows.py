"""The live view hands the controller the cluster's windows: ``clusters.<name>.windows`` when
the cluster has its own, else the repository-wide ``windows``, from the commit the sync applied
last (or --repo-config with --role controller)."""

from __future__ import annotations

from collections.abc import Callable

from reconciler.config.document import ConfigDocument
from reconciler.fleet.windows import WindowCalendar
from reconciler.settings.live import LiveSettings

CONFIG = {
    "windows": {"allow": [{"schedule": "0 1 * * *", "duration": "1h"}]},
    "clusters": {"prod-100": {"windows": {"timezone": "Asia/Shanghai",
                                          "allow": [{"schedule": "0 22 * * *",
                                                     "duration": "8h"}]}}},
}


def _windows(cluster: str | None, live: LiveSettings | None = None
             ) -> Callable[[], WindowCalendar | None]:
    """The controller's windows as the daemon wires them (``config=live.current``); by
    default from --repo-config."""
    view = live or LiveSettings(cluster)
    if live is None:
        view.offer(ConfigDocument.from_data(CONFIG), source="x.yaml")
    return lambda: view.current().windows


def test_the_controller_gets_the_clusters_own_windows_from_repo_config() -> None:
    calendar = _windows("prod-100")()
    assert calendar is not None and calendar.timezone == "Asia/Shanghai"
    other = _windows("lab-10")()
    assert other is not None and other.timezone == "UTC" and other.allow[0].schedule == "0 1 * * *"


def test_the_windows_follow_the_commit_the_sync_read_last() -> None:
    live = LiveSettings("prod-100")
    live.offer(ConfigDocument.from_data(CONFIG), source="commit 1")
    current = _windows("prod-100", live)
    assert current() is current()  # built once per file
    first = current()
    assert first is not None and first.timezone == "Asia/Shanghai"
    live.offer(ConfigDocument.from_data({}), source="commit 2")  # a commit removed the windows
    assert current() is None
