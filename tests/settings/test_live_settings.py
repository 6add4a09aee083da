"""The live view of reconciler.yaml (``reconciler.settings``): resolved per cluster, published
whole, a refused file keeps the last good settings and is reported; ``--repo-config F`` is read
again when F changes."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from reconciler.config.document import load
from reconciler.config.settings import ClusterSettings, SettingsRefused, resolve
from reconciler.policy.rollout_settings import RolloutSettings
from reconciler.settings.live import LiveSettings, RepoConfigWatch
from reconciler.sim.waiting import wait_for

FLEET = """\
rollout: {readyTimeout: 20m}
firmware: {timeouts: {reboot: 5m}}
windows: {allow: [{schedule: '0 1 * * *', duration: 2h}]}
clusters:
  prod-100:
    windows: {timezone: Asia/Shanghai, allow: [{schedule: '0 22 * * *', duration: 8h}]}
    rollout: {readyTimeout: 30s}
"""


def test_a_file_resolves_per_cluster_with_the_clusters_own_sections_in_place() -> None:
    file = load(FLEET)
    prod = resolve(file, "prod-100", source="c1")
    lab = resolve(file, "lab-10", source="c1")
    assert prod.rollout == RolloutSettings(ready_timeout=30.0)
    assert lab.rollout == RolloutSettings(ready_timeout=1200.0)
    assert prod.windows is not None and prod.windows.timezone == "Asia/Shanghai"
    assert lab.windows is not None and lab.windows.allow[0].schedule == "0 1 * * *"
    assert prod.firmware.timeouts.reboot == lab.firmware.timeouts.reboot == 300.0
    assert not prod.health.present and prod.source == "c1"
    assert resolve(load(""), None, source="c0") == ClusterSettings()


@pytest.mark.parametrize(("text", "says"), [
    ("rollout:\n  readyTimeout: 10 minutes\n", "reconciler.yaml:2:17: "),
    ("clusters:\n  prod-100:\n    rollout: {readyTimeout: -1s}\n", "reconciler.yaml:3:29: "),
    ("rollout: {readyTimout: 5m}\n", "reconciler.yaml:1:"),
    ("rollout: [\n", "reconciler.yaml:"),
    ("firmware: {reboot: {mode: sometimes}}\n", "firmware"),
])
def test_a_file_that_does_not_validate_is_refused_with_its_place(text: str, says: str) -> None:
    with pytest.raises(SettingsRefused) as refused:
        resolve(load(text), "prod-100", source="c2")
    assert says in str(refused.value)


def test_a_refused_file_keeps_the_last_good_settings_and_is_reported() -> None:
    live = LiveSettings("prod-100")
    changes: list[float] = []
    live.subscribe(lambda: changes.append(live.current().rollout.ready_timeout))
    assert live.offer(load(FLEET), source="c1") is None
    good = live.current()
    assert good.rollout.ready_timeout == 30.0 and changes == [30.0]

    refused = live.offer(load("rollout: {readyTimeout: soon}\n"), source="c2")
    assert refused is not None and live.refused == str(refused)
    assert live.current() is good  # the last good one stays, whole
    assert changes == [30.0]

    # the same settings again: nothing to tell the loops
    live.offer(load(FLEET + "# a comment\n"), source="c3")
    assert live.refused is None and changes == [30.0]
    live.offer(load("rollout: {readyTimeout: 2m}\n"), source="c4")
    assert live.current().rollout.ready_timeout == 120.0 and changes == [30.0, 120.0]
    assert live.current().windows is None and live.current().source == "c4"


def test_a_health_or_windows_section_that_does_not_validate_fails_closed_not_refused() -> None:
    """docs/health.md and docs/configuration.md#maintenance-windows: a section of theirs that does
    not validate starts no node; it never brings back the previous gates or windows."""
    live = LiveSettings(None)
    text = ("rollout: {readyTimeout: 1m}\nwindows: {allow: [{schedule: '61 * * * *', "
            "duration: 1h}]}\nhealth: {prometheus: {url: http://127.0.0.1:1}, nodeChecks: "
            "[{name: a, query: 'up', expect: '= 1'}]}\n")
    assert live.offer(load(text), source="c1") is None
    current = live.current()
    assert current.rollout.ready_timeout == 60.0
    assert current.windows is not None and current.windows.error is not None
    assert current.health.config is None and current.health.error is not None
    assert "[health-expect]" in current.health.error


def test_a_flag_pins_its_setting_over_every_file() -> None:
    def pin(settings: ClusterSettings) -> ClusterSettings:
        return ClusterSettings(RolloutSettings(ready_timeout=5.0), settings.health,
                               settings.windows, settings.firmware, settings.source)

    live = LiveSettings(None, pin=pin)
    assert live.current().rollout.ready_timeout == 5.0
    live.offer(load("rollout: {readyTimeout: 2m}\n"), source="c1")
    assert live.current().rollout.ready_timeout == 5.0 and live.current().source == "c1"


def _replace(path: Path, text: str) -> None:
    """As an editor or a ConfigMap update does: a new file renamed over the old one."""
    new = path.with_name(path.name + ".new")
    new.write_text(text, encoding="utf-8")
    os.replace(new, path)


def test_repo_config_is_read_again_when_it_changes_and_a_bad_one_keeps_the_last_good(
    tmp_path: Path,
) -> None:
    path = tmp_path / "reconciler.yaml"
    path.write_text("rollout: {readyTimeout: 1h}\n", encoding="utf-8")
    live = LiveSettings(None)
    changed = threading.Event()
    live.subscribe(changed.set)
    watch = RepoConfigWatch(path, live).start()
    try:
        assert live.current().rollout.ready_timeout == 3600.0
        assert live.current().source == str(path)
        changed.clear()
        _replace(path, "rollout: {readyTimeout: 3s}\n")
        assert changed.wait(10), "the rewrite was not noticed"
        assert live.current().rollout.ready_timeout == 3.0

        _replace(path, "rollout: {readyTimeout: 10 minutes}\n")
        wait_for(lambda: live.refused is not None, timeout=10, what="the bad file refused")
        assert f"{path}:1:" in (live.refused or "") and "readyTimeout" in (live.refused or "")
        assert live.current().rollout.ready_timeout == 3.0

        os.remove(path)
        os.symlink(tmp_path / "elsewhere.yaml", path)  # never followed
        wait_for(lambda: "link" in (live.refused or ""), timeout=10, what="the link refused")
        assert live.current().rollout.ready_timeout == 3.0
    finally:
        watch.stop()
