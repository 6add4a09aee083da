from __future__ import annotations

import pytest

from reconciler.gitops.commits import (
    format_message,
    is_own_message,
    own_trailers,
    parse_trailers,
)
from reconciler.gitops.config import RepoConfig, parse_duration
from reconciler.gitops.errors import RepoConfigError


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
    config = RepoConfig.from_yaml(None)
    assert config == RepoConfig()
    assert config.status_file("prod-a") == "status/prod-a.yaml"
    assert config.cluster_dir("prod-a") == "clusters/prod-a"
    assert (config.fetch_interval, config.status_min_interval) == (30.0, 5.0)


def test_config_values_are_read() -> None:
    config = RepoConfig.from_yaml(
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
    assert parse_duration(raw, key="k") == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sync: {fetchInterval: soon}", "sync.fetchInterval: expected a duration"),
        ("sync: {statusMinInterval: true}", "got boolean"),
        ("status: [a]", "status: expected a mapping"),
        ("status: {path: ../outside}", "must be a path inside the repository"),
        ("clustersDir: 3", "clustersDir: expected a non-empty relative path"),
        ("sync: {fetchInterval: 30s", "not valid YAML"),
    ],
)
def test_config_errors_name_the_key(text: str, message: str) -> None:
    with pytest.raises(RepoConfigError, match=message.replace("[", r"\[")):
        RepoConfig.from_yaml(text)
