"""``notify:`` in reconciler.yaml: typed in the live settings (repository-wide, or replaced per
cluster), and refused with the place in the file when it does not validate."""

from __future__ import annotations

import pytest

from reconciler.config.document import load
from reconciler.config.settings import ClusterSettings, SettingsRefused, resolve
from reconciler.config.validation import validate_repo_config
from reconciler.policy.notify_config import EVENT_KINDS, NotifyConfigError, read_notify

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
    return resolve(load(text), cluster, source="test")


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
     "reconciler.yaml:4:5:"),
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
    with pytest.raises(SettingsRefused, match=r"^reconciler\.yaml:3:12: notify\[1\]\.name: 'a' "
                       r"is used twice: give each sink its own name .*\[notify-name-twice\]$"):
        settings(text)


SLACK_FIX = ("a Slack incoming-webhook URL holds its key: put it in a file and give urlFile (a "
             "mounted Secret, e.g. urlFile: /etc/reconciler/notify/slack-url); url is refused "
             "for slack, so the key is never in Git")

#: (case, reconciler.yaml, the place, the rule, the whole message: what is wrong and the fix)
ERRORS: list[tuple[str, str, str, str, str]] = [
    # found in use (issue 42): the flow-style entry got "expected a valid value ... [schema-not]"
    ("slack with url", "notify: [{name: team, type: slack, url: https://hooks.slack.com/x}]\n",
     "1:36", "notify-url-is-secret", f"notify[0].url: {SLACK_FIX}"),
    ("slack with url, per cluster",
     "clusters:\n  prod-a:\n    notify:\n      - name: team\n        type: slack\n"
     "        url: https://hooks.slack.com/x\n",
     "6:9", "notify-url-is-secret", f"notify[0].url: {SLACK_FIX}"),
    ("wecom with url", "notify:\n  - name: w\n    type: wecom\n"
     "    url: https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k\n",
     "4:5", "notify-url-is-secret",
     "notify[0].url: a WeCom group robot URL holds its key: put it in a file and give urlFile "
     "(a mounted Secret, e.g. urlFile: /etc/reconciler/notify/wecom-url); url is refused for "
     "wecom, so the key is never in Git"),
    ("wecom without urlFile", "notify:\n  - name: w\n    type: wecom\n",
     "2:5", "notify-url-or-file",
     "notify[0]: no urlFile: a WeCom group robot URL holds its key: put it in a file and give "
     "urlFile (a mounted Secret, e.g. urlFile: /etc/reconciler/notify/wecom-url)"),
    ("no type", "notify:\n  - name: team\n    urlFile: /u\n",
     "2:5", "notify-type",
     "notify[0]: no type: say which receiver this is, type: slack, feishu, dingtalk, wecom or "
     "webhook"),
    ("an unknown type, with the list", "notify:\n  - name: a\n    type: teams\n    urlFile: /u\n",
     "3:11", "schema-enum",
     "notify[0].type: expected one of 'slack', 'feishu', 'dingtalk', 'wecom', 'webhook', got "
     "string 'teams'"),
    ("webhook without secretFile", "notify:\n  - name: a\n    type: webhook\n"
     "    url: https://h.example.com\n",
     "2:5", "notify-secret-file",
     "notify[0]: no secretFile: a webhook sink signs each request (Standard Webhooks): add "
     "secretFile, a file that holds whsec_ and the key in base64 (make one with "
     'echo "whsec_$(head -c 32 /dev/urandom | base64)" and give it to the receiver too)'),
    ("slack with secretFile", "notify:\n  - name: s\n    type: slack\n    urlFile: /u\n"
     "    secretFile: /s\n",
     "5:5", "notify-secret-file",
     "notify[0].secretFile: Slack incoming webhooks do not sign requests (the URL is the "
     "secret): remove secretFile"),
    ("neither url nor urlFile", "notify:\n  - name: f\n    type: feishu\n"
     "    secretFile: /s\n",
     "2:5", "notify-url-or-file",
     "notify[0]: no url or urlFile: give where events are posted, url: https://... or urlFile: "
     "a file that holds it (when the URL holds a token)"),
    ("url and urlFile", "notify:\n  - name: d\n    type: dingtalk\n"
     "    url: https://oapi.dingtalk.com/robot/send?access_token=t\n    urlFile: /u\n",
     "5:5", "notify-url-or-file",
     "notify[0].urlFile: url and urlFile both given: keep one (urlFile when the URL holds a "
     "token)"),
]


@pytest.mark.parametrize(("case", "text", "where", "rule", "message"), ERRORS,
                         ids=[e[0] for e in ERRORS])
def test_an_error_names_the_rule_and_the_fix_in_validate_and_in_the_refusal(
        case: str, text: str, where: str, rule: str, message: str) -> None:
    [finding] = [f for f in validate_repo_config(text, "reconciler.yaml").findings
                 if f.is_error]
    assert (f"{finding.line}:{finding.column}", finding.rule, finding.message) == (
        where, rule, message)
    with pytest.raises(SettingsRefused) as refused:
        settings(text)
    assert str(refused.value) == f"reconciler.yaml:{where}: {message} [{rule}]"


def test_feishu_and_dingtalk_sign_only_when_given_a_secret() -> None:
    text = ("notify:\n  - {name: f, type: feishu, url: https://open.feishu.cn/x}\n"
            "  - {name: d, type: dingtalk, urlFile: /u, secretFile: /s}\n")
    assert validate_repo_config(text, "reconciler.yaml").findings == []
    feishu, dingtalk = settings(text).notify
    assert (feishu.secret_file, dingtalk.secret_file) == (None, "/s")


def test_the_daemons_reading_says_the_same_without_the_text() -> None:
    """``read_notify`` (the typed reading) words a sink as validate does."""
    with pytest.raises(NotifyConfigError) as refused:
        read_notify([{"name": "team", "type": "slack", "url": "https://hooks.slack.com/x"}])
    assert str(refused.value) == f"notify[0].url: {SLACK_FIX}"
