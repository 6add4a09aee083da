"""The policy repository hosted on a real Gitea (issue 33, docs/forges.md), with ``reconciler run``
as a process against the real control plane: people clone and push over Gitea's HTTP with a
token; Gitea's own push webhook (its headers, its HMAC of the body) is what makes the daemon
fetch (the fetch interval is an hour); the commit statuses the daemon posts are read back
through Gitea's API: ``pending`` during the rollout and ``success`` at the end on the merged
commit, ``failure`` on a rejected one.

Gitea is built once by scripts/install-gitea (tests/gitops/gitea.py finds and starts it)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reconciler.kube.api import KubeApi
from reconciler.sim.control_plane import ControlPlane
from reconciler.sim.fleet import Fleet
from reconciler.sim.waiting import wait_for
from tests.gitops.gitea import ADMIN, Gitea
from tests.sync.conftest import CLUSTER, NEW, POLICY_PATH, REPO_CONFIG, Person, policy
from tests.sync.daemon import WEBHOOK_SECRET, Daemon, wait_port_ready
from tests.sync.helpers import source_commit, step_state

pytestmark = [pytest.mark.cluster, pytest.mark.forge]

OWNER = "fleet"
CONTEXT = f"gpu-reconciler/{CLUSTER}"


@pytest.fixture(scope="module")
def gitea(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gitea]:
    server = Gitea(tmp_path_factory.mktemp("gitea")).start()
    yield server
    server.stop()


@dataclass
class Hosted:
    """The policy repository on Gitea, a person's clone of it, and the daemon syncing it."""

    gitea: Gitea
    name: str
    seed: str
    alice: Person
    daemon: Daemon
    hook: int
    #: the daemon's token
    token: str

    def statuses(self, sha: str) -> list[dict[str, Any]]:
        return self.gitea.statuses(OWNER, self.name, sha)

    def subjects(self) -> list[str]:
        """The newest commit subjects of main, as Gitea lists them."""
        commits = self.gitea.api("GET", f"/repos/{OWNER}/{self.name}/commits"
                                        "?sha=main&limit=20&stat=false&files=false")
        return [c["commit"]["message"].split("\n", 1)[0] for c in commits]


@pytest.fixture
def hosted(gitea: Gitea, control_plane: ControlPlane, tmp_path: Path) -> Iterator[Hosted]:
    name = f"policy-{secrets.token_hex(3)}"
    gitea.create_repository(OWNER, name)
    seeder = Person(gitea.clone_url(OWNER, name), tmp_path / "seed", name="Sam Seeder")
    seed = seeder.commit("Add the prod-a policy", {"reconciler.yaml": REPO_CONFIG,
                                                   POLICY_PATH: policy()})
    seeder.push()
    alice = Person(gitea.clone_url(OWNER, name), tmp_path / "alice", name="Alice Operator")
    # the daemon's token has the one scope docs/forges.md asks for: Git and statuses
    token = tmp_path / "gitea-token"
    token.write_text(gitea.new_token(f"reconciler-{name}", "write:repository") + "\n")
    token.chmod(0o600)
    daemon = Daemon([
        "--repo", f"{gitea.url}/{OWNER}/{name}.git", "--cluster", CLUSTER,
        "--kubeconfig", str(control_plane.kubeconfig),
        # only the webhook makes it fetch within the test
        "--fetch-interval", "1h",
        "--git-username", ADMIN, "--git-password-file", str(token),
        # the repository on the forge is derived from --repo
        "--forge", "gitea", "--forge-url", gitea.api_url, "--forge-token-file", str(token),
    ], workdir=tmp_path, name="gitea-sync")
    try:
        hook = gitea.add_push_webhook(
            OWNER, name, f"http://127.0.0.1:{daemon.webhook_port}/webhook", WEBHOOK_SECRET)
        wait_port_ready(daemon)
        yield Hosted(gitea, name, seed, alice, daemon, hook, token.read_text().strip())
    finally:
        code = daemon.stop()
        assert code == 0, daemon.log()[-3000:]


def _states(statuses: list[dict[str, Any]]) -> list[tuple[str, str]]:
    # Gitea answers a status's state under "status" (it takes it as "state")
    return [(s["status"], s["description"]) for s in statuses]


def test_gitea_push_webhooks_drive_the_rollout_and_its_statuses_read_back_on_the_merge(
    kube: KubeApi, fleet10: Fleet, hosted: Hosted,
) -> None:
    wait_for(lambda: source_commit(kube) == hosted.seed, timeout=60, what="the seed applied",
             observe=lambda: hosted.daemon.log()[-2000:])
    merge = hosted.alice.commit_and_push(f"Upgrade prod-a to {NEW}", {POLICY_PATH: policy(NEW)})
    wait_for(lambda: any(state == "pending" and "manual gate" in text
                         for state, text in _states(hosted.statuses(merge))),
             timeout=60, what="pending at the manual gate on the merge",
             observe=lambda: (_states(hosted.statuses(merge)), hosted.daemon.log()[-2000:]))
    # Gitea's delivery, not a fetch interval, made the daemon fetch the merge
    assert (f"webhook push (gitea) to {OWNER}/{hosted.name} refs/heads/main ({merge[:12]}) "
            f"by {ADMIN}: fetch triggered") in hosted.daemon.log()
    # our write-back of pause: true, pushed to Gitea over HTTP with the token
    wait_for(lambda: any("pause the rollout at step 1/3: manual gate" in subject
                         for subject in hosted.subjects()),
             timeout=30, what="the pause write-back on Gitea", observe=hosted.subjects)
    hosted.alice.pull()
    resume = hosted.alice.commit_and_push("Release the rest of prod-a",
                                          {POLICY_PATH: policy(NEW, pause=False)})
    wait_for(lambda: step_state(kube) == ("Idling", 3, "Completed"), timeout=90,
             what="the rollout completed", observe=lambda: step_state(kube))
    wait_for(lambda: any(s["status"] == "success" for s in hosted.statuses(merge)),
             timeout=60, what="success on the merge",
             observe=lambda: _states(hosted.statuses(merge)))
    statuses = hosted.statuses(merge)
    assert source_commit(kube) == resume
    assert {s["context"] for s in statuses} == {CONTEXT}
    assert {s["creator"]["login"] for s in statuses} == {ADMIN}
    states = _states(statuses)
    assert states[0][0] == "pending"
    gate = next(text for state, text in states if "manual gate" in text)
    assert gate.startswith("step 1/3")
    assert states[-1][0] == "success"
    assert states[-1][1].startswith(f"completed {NEW}")
    # the gate's release and the seed got none: the merge started the rollout
    assert hosted.statuses(resume) == []
    assert hosted.statuses(hosted.seed) == []
    # Gitea's combined state of the merge, as a pull request shows it
    combined = hosted.gitea.api("GET", f"/repos/{OWNER}/{hosted.name}/commits/{merge}/status")
    assert combined["state"] == "success"
    # the token went to Git and to the API, never to the log
    assert hosted.token not in hosted.daemon.log()


def test_a_rejected_commit_pushed_to_gitea_gets_failure_on_itself(
    kube: KubeApi, fleet10: Fleet, hosted: Hosted,
) -> None:
    wait_for(lambda: source_commit(kube) == hosted.seed, timeout=60, what="the seed applied",
             observe=lambda: hosted.daemon.log()[-2000:])
    bad = hosted.alice.commit_and_push("Break prod-a",
                                       {POLICY_PATH: policy(NEW, max_parallel='"-3"')})
    wait_for(lambda: bool(hosted.statuses(bad)), timeout=60, what="the rejection on Gitea",
             observe=lambda: hosted.daemon.log()[-2000:])
    (status,) = hosted.statuses(bad)
    assert status["status"] == "failure"
    assert status["context"] == CONTEXT
    assert status["description"].startswith(f"rejected, nothing applied: {POLICY_PATH}:")
    assert source_commit(kube) == hosted.seed
