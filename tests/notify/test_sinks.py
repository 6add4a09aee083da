"""Each sink against a receiver on loopback that checks the signature the way its vendor
documents it (computed here, independently of ``reconciler.notify.sinks``); a sink that answers
500 or hangs does not hold up the offer; retries are bounded; no secret or keyed URL in the log,
not even at DEBUG."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from reconciler import clock
from reconciler.notify.notifier import Notifier
from reconciler.policy.notify_config import NotifySink
from reconciler.sim.waiting import wait_for
from reconciler.views.waits import GitContext
from tests.notify.receivers import Receiver, receiver
from tests.views.test_read_model import GATE, snap

GIT = GitContext(policy_file="clusters/prod-a/cluster-operator.yaml", pause_line=14)
WALL = 1_764_496_800.25  # the clock seam's wall time: every signature uses it
FEISHU_SECRET = "feishu-signing-secret-4711"
DINGTALK_SECRET = "SECdingtalk+secret/with=signs"
WEBHOOK_KEY = b"standard-webhooks-key-0123456789"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(WEBHOOK_KEY).decode()
SLACK_PATH = "/services/T000/B000/slack-key-XYZ"
WECOM_PATH = "/cgi-bin/webhook/send?key=wecom-key-693a91f6"


class MemoryLedger:
    """The ledger seam, in memory (the annotation's is tested against an API server)."""

    def __init__(self) -> None:
        self.sent: dict[str, list[str]] = {}
        self.records = 0

    def load(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self.sent.items()}

    def record(self, sent: Mapping[str, list[str]]) -> None:
        self.records += 1
        self.sent = {k: list(v) for k, v in sent.items()}


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text + "\n")
    return str(path)


def notifier(sinks: list[NotifySink], ledger: MemoryLedger | None = None,
             **kw: Any) -> Notifier:
    return Notifier("prod-a", sinks=lambda: tuple(sinks), ledger=ledger or MemoryLedger(),
                    wall=lambda: WALL, git=lambda: GIT, **kw)


def gate() -> dict[str, Any]:
    return snap("StepPaused", conditions=GATE, pause=True)


def b64_hmac(key: bytes, message: bytes) -> str:
    return base64.b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode()


def one(r: Receiver) -> tuple[str, dict[str, str], dict[str, Any]]:
    wait_for(lambda: r.got, timeout=10, what="a delivery")
    got = r.got[0]
    return got.path, got.headers, json.loads(got.body)


def test_each_sink_sends_its_vendors_body_and_signature(tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    caplog.set_level(logging.DEBUG)
    with (receiver(path=SLACK_PATH) as slack, receiver() as feishu,
          receiver(path="/robot/send?access_token=ding-token-1") as ding,
          receiver(path=WECOM_PATH) as wecom, receiver() as hook):
        sinks = [
            NotifySink("team-slack", "slack", url_file=write(tmp_path, "slack", slack.url)),
            NotifySink("lark", "feishu", url=feishu.url,
                       secret_file=write(tmp_path, "feishu", FEISHU_SECRET)),
            NotifySink("ding", "dingtalk", url=ding.url,
                       secret_file=write(tmp_path, "ding", DINGTALK_SECRET)),
            NotifySink("wecom", "wecom", url_file=write(tmp_path, "wecom", wecom.url)),
            NotifySink("hook", "webhook", url=hook.url,
                       secret_file=write(tmp_path, "hook", WEBHOOK_SECRET)),
        ]
        ledger = MemoryLedger()
        n = notifier(sinks, ledger)
        try:
            [event] = n.observe(gate())
            assert event.kind == "gate"

            path, _, body = one(slack)
            assert path == SLACK_PATH
            assert set(body) == {"text"}
            assert ("clusters/prod-a/cluster-operator.yaml:14: `pause: true` -> `pause: false`"
                    in body["text"])

            _, _, body = one(feishu)
            # Feishu: timestamp in seconds; sign = base64(HmacSHA256(key=timestamp+"\n"+secret,
            # message empty))
            assert body["timestamp"] == str(int(WALL))
            assert body["sign"] == b64_hmac(f"{int(WALL)}\n{FEISHU_SECRET}".encode(), b"")
            assert body["msg_type"] == "text" and "manual gate" in body["content"]["text"]

            path, _, body = one(ding)
            # DingTalk: timestamp in ms; sign = urlEncode(base64(HmacSHA256(key=secret,
            # message=timestamp+"\n"+secret))) as query parameters beside access_token
            query = urllib.parse.urlsplit(path).query
            params = dict(urllib.parse.parse_qsl(query))
            timestamp = str(int(WALL * 1000))
            assert params["access_token"] == "ding-token-1"
            assert params["timestamp"] == timestamp
            expected = b64_hmac(DINGTALK_SECRET.encode(),
                                f"{timestamp}\n{DINGTALK_SECRET}".encode())
            assert params["sign"] == expected
            assert f"sign={urllib.parse.quote_plus(expected)}" in query
            assert body == {"msgtype": "text", "text": {"content": body["text"]["content"]}}

            path, _, body = one(wecom)
            assert path == WECOM_PATH
            assert body["msgtype"] == "text" and "manual gate" in body["text"]["content"]
            assert "sign" not in body and "timestamp" not in body

            wait_for(lambda: hook.got, timeout=10, what="the webhook")
            got = hook.got[0]
            # Standard Webhooks: HMAC-SHA256 over "<id>.<timestamp>.<body>" with the
            # base64-decoded secret after whsec_; "v1,<base64>" (space-separated list)
            ident, ts = got.headers["webhook-id"], got.headers["webhook-timestamp"]
            assert ts == str(int(WALL))
            signed = f"{ident}.{ts}.".encode() + got.body
            signatures = got.headers["webhook-signature"].split(" ")
            assert f"v1,{b64_hmac(WEBHOOK_KEY, signed)}" in signatures
            payload = json.loads(got.body)
            assert payload["type"] == "rollout.gate"
            assert payload["data"]["key"] == event.key
            assert payload["data"]["change"]["after"] == "pause: false"

            wait_for(lambda: sum(map(len, ledger.sent.values())) == 5, timeout=10,
                     what="five deliveries recorded")
            assert ledger.sent == {s.name: [event.key] for s in sinks}
            # seen again: nothing sent again
            n.observe(gate())
            assert n.wait_idle(10)
            assert [len(r.got) for r in (slack, feishu, ding, wecom, hook)] == [1] * 5
        finally:
            n.stop()
    secrets = [FEISHU_SECRET, DINGTALK_SECRET, WEBHOOK_SECRET, "slack-key-XYZ",
               "wecom-key-693a91f6", "ding-token-1", base64.b64encode(WEBHOOK_KEY).decode()]
    assert "sent prod-a/" in caplog.text
    for secret in secrets:
        assert secret not in caplog.text


def test_a_sink_that_fails_or_hangs_holds_nothing_up_and_retries_are_bounded(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with (receiver(statuses=[500]) as failing, receiver(hang=True) as hanging,
          receiver(statuses=[500, 503, 200]) as flaky):
        secret = write(tmp_path, "hook", WEBHOOK_SECRET)
        sinks = [NotifySink("failing", "feishu", url=failing.url),
                 NotifySink("hanging", "slack", url_file=write(tmp_path, "h", hanging.url)),
                 NotifySink("flaky", "webhook", url=flaky.url, secret_file=secret)]
        ledger = MemoryLedger()
        n = notifier(sinks, ledger, attempts=3, first_backoff=0.05, max_backoff=0.1,
                     timeout=0.5)
        try:
            started = clock.monotonic()
            n.observe(gate())
            offered_in = clock.monotonic() - started
            # the offer does not wait for any answer: a hanging sink's timeout alone is 0.5 s
            assert offered_in < 0.25
            wait_for(lambda: n.given_up == 2, timeout=30, what="two sinks given up",
                     observe=lambda: (len(failing.got), len(hanging.got), len(flaky.got)))
            assert n.wait_idle(10)
            assert len(failing.got) == 3 and len(hanging.got) == 3
            # the flaky receiver got the same webhook-id each time (it can drop a repeat)
            assert len(flaky.got) == 3
            assert len({g.headers["webhook-id"] for g in flaky.got}) == 1
            assert list(ledger.sent) == ["flaky"] and n.delivered == 1
        finally:
            n.stop()
    assert "answered 500" in caplog.text
    for text in (WEBHOOK_SECRET, hanging.url, failing.url, flaky.url):
        assert text not in caplog.text


def test_a_sink_gets_only_its_events(tmp_path: Path) -> None:
    with receiver() as only_completed, receiver() as every:
        sinks = [NotifySink("done", "slack", url_file=write(tmp_path, "a", only_completed.url),
                            events=frozenset({"completed"})),
                 NotifySink("all", "slack", url_file=write(tmp_path, "b", every.url))]
        n = notifier(sinks)
        try:
            n.observe(gate())
            wait_for(lambda: every.got, timeout=10, what="the gate")
            assert n.wait_idle(10)
            assert only_completed.got == []
        finally:
            n.stop()


def test_no_sinks_derive_nothing() -> None:
    n = notifier([])
    assert n.observe(gate()) == []
    n.stop()


def test_a_secret_file_that_is_a_fifo_is_given_up_at_once_and_others_still_send(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    # a FIFO with no writer would block the sender's open() forever: refused, never waited on
    fifo = tmp_path / "secret-fifo"
    os.mkfifo(fifo)
    with receiver() as slack:
        link = tmp_path / "slack-url"
        link.symlink_to(write(tmp_path, "..data-slack-url", slack.url))  # a Secret's link
        sent = notifier([
            NotifySink(name="hooked", type="webhook", url=slack.url, secret_file=str(fifo)),
            NotifySink(name="team", type="slack", url_file=str(link)),
        ])
        try:
            with caplog.at_level(logging.DEBUG):
                sent.observe(gate())
                wait_for(lambda: len(slack.got) == 1, timeout=10, what="slack's message",
                         observe=lambda: slack.got)
                wait_for(lambda: "FIFO" in caplog.text, timeout=10, what="the FIFO refused",
                         observe=lambda: caplog.text)
        finally:
            sent.stop()
    assert slack.url not in caplog.text
