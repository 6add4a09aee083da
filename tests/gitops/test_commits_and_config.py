from __future__ import annotations

import pytest
from ruamel.yaml import YAML

from reconciler.config.document import load
from reconciler.config.settings import SettingsRefused, resolve
from reconciler.config.sync import SyncSettings, read_sync_settings
from reconciler.durations import parse_duration_setting
from reconciler.errors import RepoConfigError
from reconciler.gitops.commits import (
    format_message,
    is_own_message,
    own_trailers,
    parse_trailers,
)
from reconciler.gitops.errors import GitOpsError
from reconciler.gitops.errors import RepoConfigError as GitRepoConfigError
from reconciler.gitops.publisher import PendingChange
from reconciler.gitops.spec_writeback import SpecWriteBack


def test_message_round_trips_its_trailers() -> None:
    message = format_message(
        "status(prod-a): step 1/3 paused", "body text",
        own_trailers("abc", [("Phase", "Progressing")]),
    )
    assert message.splitlines()[0] == "status(prod-a): step 1/3 paused"
    assert parse_trailers(message) == {
        "Phase": "Progressing", "Reconciler-Commit": "true", "Reconciler-Change-Id": "abc",
    }
    assert is_own_message(message)



def test_an_auto_promotion_commit_is_not_an_own_commit_and_keeps_one_change_id_per_promotion(
) -> None:
    class Queue:
        def enqueue(self, change: PendingChange) -> None:
            pass

    queue = Queue()
    writer = SpecWriteBack(queue, clock=lambda: 5.0)  # type: ignore[arg-type]
    options = {"version": "2.33.0.9", "replaces": "2.32.0.6", "upstream": "lab-10",
               "finished_at": "2026-11-30T02:00:00Z", "soak": "24h"}
    first = writer.promote("prod-100", **options)
    again = writer.promote("prod-100", **options)  # e.g. after a restart
    later = writer.promote("prod-100", **{**options, "finished_at": "2026-12-03T02:00:00Z"})
    message = first.message()
    # applied like a person's commit (docs/configuration.md#promotion)
    assert not is_own_message(message)
    trailers = parse_trailers(message)
    assert trailers["Reconciler-Promotion"] == "prod-100"
    assert trailers["Reconciler-Change-Id"] == first.change_id == again.change_id
    assert later.change_id != first.change_id  # a new completion upstream is a new promotion
    assert first.kind == "promotion" and first.path == "clusters/prod-100"
    assert first.edits[0].expected == "2.32.0.6"  # a person's newer version wins
    assert PendingChange.from_json(first.to_json()).message() == message


@pytest.mark.parametrize(
    ("message", "own"),
    [
        ("Bump driver to 2.33.0.9\n", False),
        ("Reconciler-Commit: true\n", False),  # a subject is not a trailer
        ("Bump\n\nReconciler-Commit: true\n", True),
        ("Bump\n\nSigned-off-by: A <a@x>\nReconciler-Commit: TRUE\n", True),
        ("Bump\n\nReconciler-Commit: true\nnot a trailer line\n", False),
        ("Bump\n\nReconciler-Commit: false\n", False),
        ("Bump\n\nReconciler-Commit: true\n\nSigned-off-by: A <a@x>\n", False),
    ],
)
def test_own_commits_are_recognised_by_their_trailer(message: str, own: bool) -> None:
    assert is_own_message(message) is own


def test_config_defaults_when_absent() -> None:
    config = read_sync_settings(None)
    assert config == SyncSettings()
    assert config.status_file("prod-a") == "status/prod-a.yaml"
    assert config.cluster_dir("prod-a") == "clusters/prod-a"
    assert (config.fetch_interval, config.status_min_interval) == (30.0, 5.0)


def test_config_values_are_read() -> None:
    config = read_sync_settings(
        "clustersDir: fleet/\nstatus: {path: state, branch: reconciler-status}\n"
        "sync: {fetchInterval: 1m, statusMinInterval: 500ms}\nrollout: {readyTimeout: 10m}\n"
    )
    assert config.clusters_dir == "fleet"
    assert config.status_path == "state"
    assert config.status_branch == "reconciler-status"
    assert config.fetch_interval == 60.0
    assert config.status_min_interval == 0.5


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("30s", 30.0), ("500ms", 0.5), ("2m", 120.0), ("1h30m", 5400.0), (7, 7.0), (0.5, 0.5)],
)
def test_durations(raw: object, seconds: float) -> None:
    assert parse_duration_setting(raw, key="k") == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sync: {fetchInterval: soon}", "sync.fetchInterval: expected a duration"),
        ("sync: {statusMinInterval: true}", "got boolean"),
        ("status: [a]", "status: expected a mapping"),
        ("status: {path: ../outside}", "must be a path inside the repository"),
        ("clustersDir: 3", "clustersDir: expected a non-empty relative path"),
        ("sync: {fetchInterval: 30s", "reconciler.yaml:1:26: invalid YAML"),
    ],
)
def test_config_errors_name_the_key(text: str, message: str) -> None:
    with pytest.raises(RepoConfigError, match=message.replace("[", r"\[")):
        read_sync_settings(text)
    with pytest.raises(SettingsRefused, match=message.replace("[", r"\[")):
        resolve(load(text), "prod-a", source="test")


def test_the_git_side_raises_a_gitops_error_naming_the_key() -> None:
    with pytest.raises(GitRepoConfigError, match=r"sync\.fetchInterval: expected a") as info:
        read_sync_settings(b"sync: {fetchInterval: soon}\n")
    assert isinstance(info.value, GitOpsError) and isinstance(info.value, RepoConfigError)
    assert read_sync_settings(None) == SyncSettings()


def test_both_ways_in_give_the_same_settings() -> None:
    """The Git side's keys alone (any commit, not validated) and the whole file resolved for a
    cluster (the commit applied) read them alike; the controllers' setting never fails the Git
    side."""
    text = ("clustersDir: fleet\nstatus: {path: state, branch: reconciler-status}\n"
            "sync: {fetchInterval: 1m, statusMinInterval: 500ms}\nrollout: {readyTimeout: 5m}\n"
            "firmware: {reboot: {mode: manual}}\n")
    obj = YAML(typ="safe").load(text)
    parsed = read_sync_settings(text)
    assert parsed == SyncSettings.from_obj(obj) == resolve(load(text), "p", source="t").sync
    assert read_sync_settings("rollout: {readyTimeout: 10 minutes}") == SyncSettings()


def test_one_load_of_reconciler_yaml_serves_every_reader() -> None:
    """The sync, the Git side and the daemon's controller settings read one load: a refused key
    refuses the settings, while the signature mode and the sections as written stay readable;
    a file that is not YAML is refused with its place."""
    parsed = load(
        "clustersDir: 5\nsignatures: {mode: ssh}\nrollout: {readyTimeout: 10 minutes}\n"
        "firmware: {reboot: {mode: manual}}\n")
    with pytest.raises(SettingsRefused, match="clustersDir"):
        resolve(parsed, "prod-a", source="test")
    assert parsed.signature_mode == "ssh"
    assert [f.pointer for f in parsed.errors] == ["/clustersDir", "/rollout/readyTimeout"]
    assert parsed.obj["firmware"] == {"reboot": {"mode": "manual"}}
    good = load("rollout: {readyTimeout: 5m}\n")
    assert resolve(good, "prod-a", source="test").rollout.ready_timeout == 300.0
    assert good.refused is None and good.errors == ()
    broken = load("status: [1\n")
    assert broken.refused is not None and broken.refused.startswith("reconciler.yaml:2:1:")
    with pytest.raises(SettingsRefused, match=r"reconciler\.yaml:2:1:"):
        resolve(broken, "prod-a", source="test")
