"""Commit statuses posted to a real HTTP server on 127.0.0.1 that plays each forge's API
(docs/forges.md): the path, headers and JSON body of GitHub, GitLab and Gitea; a forge answering 500
(retries bounded) or hanging (the offer returns at once); the token in no log line at DEBUG; the
forge settings (http:// refused off loopback, the repository from the remote URL)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.gitops.forge_status import (
    CommitStatuses,
    ForgePostError,
    ForgeTarget,
    post_status,
    read_token,
)
from reconciler.ops.metrics import Metrics
from reconciler.policy.forge_config import (
    ForgeConfig,
    ForgeConfigError,
    ForgeSection,
    forge_config,
    repository_from_remote,
)
from reconciler.sim.waiting import wait_for
from reconciler.views.commit_status import CommitStatus, PostGate
from tests.gitops.forge_stub import ForgeStub, serve_forge

TOKEN = "tok-3f9c2a7d1e5b"
SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def forge() -> Iterator[ForgeStub]:
    with serve_forge() as stub:
        yield stub


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def _status(description: str = "step 1/3, 2/10 nodes on the new driver",
            state: str = "running") -> CommitStatus:
    return CommitStatus(SHA, "gpu-reconciler/prod-a", state, description,
                        "https://dash.example.com/")


@pytest.mark.parametrize(("kind", "api", "path", "auth", "state", "name_key"), [
    ("github", "/api/v3", f"/api/v3/repos/fleet/policy/statuses/{SHA}",
     ("Authorization", f"Bearer {TOKEN}"), "pending", "context"),
    ("gitea", "/api/v1", f"/api/v1/repos/fleet/policy/statuses/{SHA}",
     ("Authorization", f"token {TOKEN}"), "pending", "context"),
    ("gitlab", "/api/v4", f"/api/v4/projects/fleet%2Fpolicy/statuses/{SHA}",
     ("PRIVATE-TOKEN", TOKEN), "running", "name"),
])
def test_each_forge_gets_its_own_call(forge: ForgeStub, token_file: Path, kind: str, api: str,
                                      path: str, auth: tuple[str, str], state: str,
                                      name_key: str) -> None:
    config = ForgeConfig(kind, forge.url + api, "fleet/policy")
    assert post_status(config, _status(), token_file) == 201
    [request] = forge.wait_for(1)
    assert request["path"] == path
    assert request["headers"][auth[0].lower()] == auth[1]
    assert request["headers"]["content-type"] == "application/json"
    assert request["body"] == {"state": state, name_key: "gpu-reconciler/prod-a",
                               "description": "step 1/3, 2/10 nodes on the new driver",
                               "target_url": "https://dash.example.com/"}


def test_the_token_file_is_read_again_at_each_post(forge: ForgeStub, token_file: Path) -> None:
    config = ForgeConfig("gitea", forge.url, "fleet/policy")
    post_status(config, _status(), token_file)
    token_file.write_text("rotated-token\n")
    post_status(config, _status(), token_file)
    first, second = forge.wait_for(2)
    assert first["headers"]["authorization"] == f"token {TOKEN}"
    assert second["headers"]["authorization"] == "token rotated-token"


def _count(metrics: Metrics, outcome: str, forge: str = "gitea") -> float:
    value = metrics.registry.get_sample_value(
        "gpu_reconciler_forge_status_posts_total", {"forge": forge, "outcome": outcome})
    return value or 0.0


def test_a_forge_answering_500_is_retried_a_bounded_number_of_times_and_the_token_is_in_no_log(
    forge: ForgeStub, token_file: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    forge.code = 500
    metrics = Metrics()
    poster = CommitStatuses(ForgeConfig("gitea", forge.url, "fleet/policy"), token_file,
                            metrics=metrics, first_retry=0.01, retries=2,
                            gate=PostGate(interval=0.0)).start()
    try:
        poster.offer(_status())
        wait_for(lambda: _count(metrics, "given_up") == 1, timeout=10, what="given up once")
        assert len(forge.requests) == 3  # the first try and two retries, then no more
        assert _count(metrics, "failed") == 3 and _count(metrics, "posted") == 0
        assert poster.idle()
    finally:
        poster.stop()
    assert "answered 500" in caplog.text
    assert all(TOKEN not in r.getMessage() for r in caplog.records)
    with pytest.raises(ForgePostError) as raised:
        post_status(ForgeConfig("gitea", forge.url, "fleet/policy"), _status(), token_file)
    assert "500" in str(raised.value) and TOKEN not in str(raised.value)


def test_a_hanging_forge_never_holds_the_offer_and_the_newest_state_wins(
    forge: ForgeStub, token_file: Path,
) -> None:
    forge.hang = threading.Event()
    poster = CommitStatuses(ForgeConfig("github", forge.url, "fleet/policy"), token_file,
                            gate=PostGate(interval=0.0)).start()
    try:
        poster.offer(_status("step 1/3"))
        forge.wait_for(1)  # the worker is stuck in the forge
        started = time.monotonic()
        for n in range(2, 50):
            poster.offer(_status(f"step {n}/50"))
        poster.offer(_status("completed", state="success"))
        assert time.monotonic() - started < 0.05  # the sync loop is not delayed
        forge.hang.set()
        requests = forge.wait_for(2)
        wait_for(poster.idle, timeout=10, what="the poster idle")
        assert [r["body"]["description"] for r in requests] == ["step 1/3", "completed"]
        assert requests[1]["body"]["state"] == "success"
    finally:
        forge.hang.set()
        poster.stop()


def test_identical_states_go_out_once_and_only_the_leader_posts(
    forge: ForgeStub, token_file: Path,
) -> None:
    leading = threading.Event()
    poster = CommitStatuses(ForgeConfig("gitea", forge.url, "fleet/policy"), token_file,
                            is_leader=leading.is_set, gate=PostGate(interval=0.0)).start()
    try:
        poster.offer(_status("not the leader"))
        wait_for(poster.idle, timeout=10, what="the poster idle")
        leading.set()
        poster.offer(_status())
        forge.wait_for(1)
        wait_for(lambda: len(poster.posted) == 1, timeout=10, what="one status posted")
        poster.offer(_status())  # the forge has it: dropped, not posted
        wait_for(poster.idle, timeout=10, what="the poster idle")
        poster.offer(_status(state="success", description="completed"))
        requests = forge.wait_for(2)
        assert [r["body"]["description"] for r in requests] == [
            "step 1/3, 2/10 nodes on the new driver", "completed"]
    finally:
        poster.stop()


@pytest.mark.parametrize(("remote", "repository"), [
    ("https://github.com/fleet/policy.git", "fleet/policy"),
    ("https://x-access-token@github.example.com/Fleet/Policy", "Fleet/Policy"),
    ("ssh://git@gitlab.example.com:2222/infra/gpu/policy.git", "infra/gpu/policy"),
    ("git@gitea.example.com:fleet/policy.git", "fleet/policy"),
    ("/srv/git/policy.git", None),
    ("file:///srv/git/policy.git", None),
])
def test_the_repository_is_derived_from_the_remote_url(remote: str,
                                                       repository: str | None) -> None:
    assert repository_from_remote(remote) == repository


def test_forge_settings_from_flags_then_reconciler_yaml() -> None:
    assert forge_config(kind=None, url=None, repository=None, remote="x") is None
    got = forge_config(kind=None, url=None, repository=None,
                       remote="git@github.com:fleet/policy.git",
                       file_section={"type": "github", "url": "https://api.github.com/"})
    assert got == ForgeConfig("github", "https://api.github.com", "fleet/policy")
    got = forge_config(kind="gitlab", url="http://127.0.0.1:8080/api/v4", repository="g/s/p",
                       remote="/srv/policy", file_section={"type": "github"})
    assert got == ForgeConfig("gitlab", "http://127.0.0.1:8080/api/v4", "g/s/p")


@pytest.mark.parametrize(("remote", "url"), [
    ("git@github.com:fleet/policy.git", "https://api.github.com"),
    ("https://ghe.example.com/fleet/policy.git", "https://GHE.example.com/api/v3"),
    ("ssh://git@gitlab.example.com:2222/g/s/p.git", "https://gitlab.example.com/api/v4"),
])
def test_a_forge_url_from_reconciler_yaml_on_the_remotes_host_is_taken(remote: str,
                                                                      url: str) -> None:
    got = forge_config(kind=None, url=None, repository=None, remote=remote,
                       file_section={"type": "github", "url": url})
    assert got is not None and got.url == url


@pytest.mark.parametrize(("remote", "url", "message"), [
    ("git@github.com:fleet/policy.git", "https://collector.example.net",
     "forge.url: collector.example.net is not the remote's host github.com"),
    ("https://gitea.example.com/fleet/policy.git", "https://gitea.example.com.evil.net/api/v1",
     "is not the remote's host gitea.example.com"),
    ("file:///srv/git/policy.git", "http://127.0.0.1:3000/api/v1",
     "is not a host \\(the remote is a local path\\)"),
])
def test_a_forge_url_from_reconciler_yaml_elsewhere_is_refused(remote: str, url: str,
                                                               message: str) -> None:
    """reconciler.yaml is what a merged change sets: it cannot send the token elsewhere."""
    with pytest.raises(ForgeConfigError, match=message) as refused:
        forge_config(kind=None, url=None, repository="o/n", remote=remote,
                     file_section={"type": "gitea", "url": url})
    assert "--forge-url" in str(refused.value)
    # the same URL from the command line is the operator's choice
    assert forge_config(kind=None, url=url, repository="o/n", remote=remote,
                        file_section={"type": "gitea"}) is not None


@pytest.mark.parametrize(("url", "message"), [
    ("http://gitea.example.com/api/v1", "--forge-url: http:// is refused for gitea.example.com"),
    ("http://10.0.0.5/api/v1", "http:// is refused for 10.0.0.5"),
    ("ftp://gitea.example.com", "expected an https:// API URL"),
    ("https://user:pw@gitea.example.com", "no credentials"),
])
def test_an_http_forge_url_off_loopback_is_refused(url: str, message: str) -> None:
    with pytest.raises(ForgeConfigError, match=message):
        forge_config(kind="gitea", url=url, repository="o/n", remote="")
    for loopback in ("http://127.0.0.1:3000", "http://localhost/api/v1", "http://[::1]:80"):
        assert forge_config(kind="gitea", url=loopback, repository="o/n", remote="")


def test_a_repository_that_cannot_be_derived_is_a_located_error() -> None:
    with pytest.raises(ForgeConfigError, match="--forge-repository"):
        forge_config(kind="github", url="https://api.github.com", repository=None,
                     remote="/srv/git/policy")


def test_a_token_file_behind_a_link_is_read_and_a_fifo_is_refused_at_once(
    tmp_path: Path,
) -> None:
    # a mounted Secret's file is a link; a FIFO with no writer would block an open() forever
    real = tmp_path / "..data-token"
    real.write_text("t0ken\n")
    link = tmp_path / "token"
    link.symlink_to(real)
    assert read_token(link) == "t0ken"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ForgePostError, match="unusable: a FIFO"):
        read_token(fifo)


def test_the_poster_goes_where_the_section_in_force_says_the_flags_winning(
    forge: ForgeStub, token_file: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """``forge:`` is asked before each post: a new section (a commit applied) moves the next
    status, which is posted again there; a section naming no forge, or one that cannot be used,
    drops them until a commit fixes it; ``--forge-url`` wins over ``forge.url``."""
    sections: list[ForgeSection | None] = [None]
    target = ForgeTarget(kind=None, url=forge.url + "/api/v1", repository=None,
                         remote="git@127.0.0.1:fleet/policy.git", section=lambda: sections[-1])
    poster = CommitStatuses(target.current, token_file, gate=PostGate(interval=0.0)).start()
    try:
        poster.offer(_status())  # no forge named: dropped
        wait_for(poster.idle, timeout=10, what="dropped")
        sections.append(ForgeSection(type="gitea", url="https://elsewhere.example.com/api/v1"))
        poster.offer(_status())
        [first] = forge.wait_for(1)
        assert first["path"] == f"/api/v1/repos/fleet/policy/statuses/{SHA}"
        sections.append(ForgeSection(type="gitea", repository="fleet/renamed"))
        poster.offer(_status())  # the same state: the new repository has not got it yet
        [_, second] = forge.wait_for(2)
        assert second["path"] == f"/api/v1/repos/fleet/renamed/statuses/{SHA}"
        poster.offer(_status())  # that repository has it now
        wait_for(poster.idle, timeout=10, what="not posted again")
        with caplog.at_level(logging.ERROR, logger="reconciler.forge"):
            sections.append(ForgeSection(type="gitea", repository="../admin"))
            poster.offer(_status("step 2/3"))
            wait_for(poster.idle, timeout=10, what="dropped")
        assert "reconciler.yaml forge: --forge: the repository cannot have a '.' or '..' part" \
            in caplog.text
        assert "commit statuses are off until it is fixed" in caplog.text
        sections.append(ForgeSection(type="gitlab", repository="fleet/policy"))
        poster.offer(_status("step 2/3"))
        [*_, third] = forge.wait_for(3)
        assert third["path"] == f"/api/v1/projects/fleet%2Fpolicy/statuses/{SHA}"
        assert len(forge.requests) == 3
    finally:
        poster.stop()
