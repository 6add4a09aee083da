"""``notify:`` in reconciler.yaml: typed in the live settings (repository-wide, or replaced per
cluster), and refused with the place in the file when it does not validate."""

from __future__ import annotations

import pytest

from reconciler.policy.notify_config import EVENT_KINDS
from reconciler.policy.repo_config import RepoConfigFile
from reconciler.policy.validation import validate_repo_config
from reconciler.settings.cluster import ClusterSettings, SettingsRefused, resolve_settings

GOOD = """\
notify:
  - name: team
    type: slack
    urlFile: /etc/reconciler/slack-url
  - name: audit
    type: webhook
    url: https://hooks.example.com/gpu
    secretFile: /etc/reconciler/webhook-secret
    events: [completed, rollback]
clusters:
  prod-cn:
    notify:
      - name: lark
        type: feishu
        url: https://open.feishu.cn/open-apis/bot/v2/hook/x
        secretFile: /etc/reconciler/feishu-secret
"""


def settings(text: str, cluster: str = "prod-a") -> ClusterSettings:
    return resolve_settings(RepoConfigFile.parse(text), cluster, source="test")


def test_sinks_resolve_per_cluster_and_a_clusters_list_replaces_the_repositorys() -> None:
    team, audit = settings(GOOD).notify
    assert (team.name, team.type, team.url, team.url_file) == (
        "team", "slack", None, "/etc/reconciler/slack-url")
    assert team.events == frozenset(EVENT_KINDS)
    assert audit.events == frozenset({"completed", "rollback"})
    assert audit.wants("completed") and not audit.wants("gate")
    [lark] = settings(GOOD, "prod-cn").notify
    assert (lark.name, lark.type, lark.secret_file) == (
        "lark", "feishu", "/etc/reconciler/feishu-secret")
    assert settings("sync:\n  fetchInterval: 30s\n").notify == ()


@pytest.mark.parametrize(("text", "where"), [
    # a Slack URL holds its key: only urlFile
    ("notify:\n  - name: team\n    type: slack\n    url: https://hooks.slack.com/x\n",
     "reconciler.yaml:2:5:"),
    # the generic webhook signs: its secret file is required
    ("notify:\n  - name: a\n    type: webhook\n    url: https://h.example.com\n",
     "reconciler.yaml:2:5:"),
    ("notify:\n  - name: a\n    type: teams\n    urlFile: /u\n", "reconciler.yaml:3:11:"),
    ("notify:\n  - name: a\n    type: wecom\n    urlFile: /u\n    events: [gates]\n",
     "reconciler.yaml:5:14:"),
    ("clusters:\n  prod-a:\n    notify:\n      - name: a\n        type: dingtalk\n"
     "        urlFile: /u\n        secretFile: 7\n", "reconciler.yaml:7:21:"),
])
def test_a_section_that_does_not_validate_is_refused_with_its_place(text: str,
                                                                     where: str) -> None:
    with pytest.raises(SettingsRefused) as refused:
        settings(text)
    assert str(refused.value).startswith(where), str(refused.value)
    findings = [f for f in validate_repo_config(text, "reconciler.yaml").findings
                if f.is_error]
    assert findings and f"{findings[0].file}:{findings[0].line}:{findings[0].column}:" == \
        where.rstrip(":") + ":"


def test_two_sinks_with_one_name_are_refused_naming_the_key() -> None:
    text = ("notify:\n  - {name: a, type: slack, urlFile: /a}\n"
            "  - {name: a, type: wecom, urlFile: /b}\n")
    with pytest.raises(SettingsRefused, match=r"notify\[1\]\.name: 'a' is used twice"):
        settings(text)
