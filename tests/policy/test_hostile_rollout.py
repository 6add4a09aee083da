"""Hostile values in the inputs of the rollout settings and their tools: ``rollout:`` of
reconciler.yaml, the ``--faults`` and ``--nodes-file`` files of ``simulate``, the forge's API
URL and the notification sinks. Each is refused with a message naming where, never a
traceback and never an unusable value taken as valid. Pure: no child process, no cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from reconciler.cli.main import cli
from reconciler.cli.simulate import InputError, load_faults
from reconciler.cli.simulate_topology import load_nodes_file
from reconciler.config.document import ConfigDocument, load
from reconciler.config.settings import SettingsRefused, resolve
from reconciler.config.validation import validate_repo_config
from reconciler.merge.plan import changed_paths
from reconciler.policy.forge_config import ForgeConfigError, check_api_url, forge_config
from reconciler.policy.notify_config import NotifyConfigError, read_notify

HUGE = "9" * 400


def _errors(text: str) -> list[tuple[int, str]]:
    return [(f.line, f.message) for f in validate_repo_config(text, "reconciler.yaml").findings
            if f.is_error]


@pytest.mark.parametrize("fault", ["[crashloop]", "{crashloop: 1}"])
def test_a_fault_that_is_not_a_string_is_refused_where_written(tmp_path: Path,
                                                                fault: str) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(f"faults:\n  - {{node: node-0001, fault: {fault}}}\n")
    with pytest.raises(InputError, match=r"faults\.yaml:2:\d+: faults\[0\]\.fault: "):
        load_faults(path, 5)


def test_a_huge_fault_name_is_shown_shortened(tmp_path: Path) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(f"faults:\n  - {{node: node-0001, fault: {'x' * 100_000}}}\n")
    with pytest.raises(InputError) as refused:
        load_faults(path, 5)
    assert len(refused.value.message) < 1000
    assert "faults.yaml:2:" in refused.value.message


@pytest.mark.parametrize(("entry", "where"), [
    ("{name: a, labels: {zone: " + "z" * 64 + "}}", "labels/zone"),
    ("{name: a, labels: {'bad key!': x}}", "label key"),
    ("{name: 'a\\e[2J', labels: {}}", "node name"),
    ("{name: " + "n" * 254 + ", labels: {}}", "node name"),
])
def test_a_nodes_file_holds_only_what_the_api_server_would_store(
        tmp_path: Path, entry: str, where: str) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text(f"nodes:\n  - {{name: ok, labels: {{zone: a}}}}\n  - {entry}\n")

    def fail(message: str) -> None:
        raise InputError(message)

    with pytest.raises(InputError, match=r"nodes\.yaml:3:\d+: ") as refused:
        load_nodes_file(path, 100, fail)  # type: ignore[arg-type]
    assert len(refused.value.message) < 1000


@pytest.mark.parametrize("key", ["readyTimeout", "drain.timeout", "waitFor.timeout"])
def test_a_duration_too_large_to_count_is_an_error_where_written(key: str) -> None:
    section, _, name = key.rpartition(".")
    value = f"{HUGE}s"
    body = (f"  {section}: {{{name}: {value}}}\n" if section else f"  {name}: {value}\n")
    extra = "  drain: {}\n" if section == "waitFor" else ""
    errors = _errors(f"rollout:\n{body}{extra}")
    assert [line for line, _ in errors] == [2], errors
    assert "too large" in errors[0][1]


def test_a_cluster_duration_too_large_is_an_error_where_written() -> None:
    errors = _errors(f"clusters:\n  lab:\n    rollout:\n      readyTimeout: {HUGE}h\n")
    assert [line for line, _ in errors] == [4], errors


@pytest.mark.parametrize("value", ["0%", "101%", "1000%"])
def test_a_per_domain_percentage_out_of_range_says_the_range(value: str) -> None:
    errors = _errors(f"rollout:\n  topology: {{key: zone, maxUnavailablePerDomain: '{value}'}}\n")
    assert [line for line, _ in errors] == [2], errors
    assert "not a percentage" not in errors[0][1]
    assert "1%" in errors[0][1] and "100%" in errors[0][1]


@pytest.mark.parametrize("url", ["https://[::1", "https://[x/", "https://h:99999",
                                 "https://h:0", "https://h\x1b[2J/", "https://h/a b",
                                 "https://h/\r\nX: y"])
def test_a_forge_url_that_cannot_be_posted_to_is_refused_naming_the_key(url: str) -> None:
    with pytest.raises(ForgeConfigError, match=r"^forge\.url: "):
        check_api_url(url, key="forge.url")


def test_validate_refuses_a_forge_url_the_daemon_refuses() -> None:
    errors = _errors("forge: {type: gitea, url: 'https://[::1', repository: o/n}\n")
    assert [line for line, _ in errors] == [1], errors


@pytest.mark.parametrize("url", ["https://[::1/x", "https://x:99999/h", "https://x/\r\nX: y",
                                 "https://", "https:// x/h", "https://x/\x1b[2J"])
def test_a_sink_url_that_cannot_be_posted_to_is_refused_naming_the_key(url: str) -> None:
    with pytest.raises(NotifyConfigError, match=r"^notify\[0\]\.url: "):
        read_notify([{"name": "a", "type": "feishu", "url": url}])


def test_validate_refuses_a_sink_url_the_daemon_refuses() -> None:
    errors = _errors("notify:\n  - {name: a, type: feishu, url: 'https://x:99999/h'}\n")
    assert [line for line, _ in errors] == [2], errors


@pytest.mark.parametrize("repository", ["../../admin", "o/./n", "o/n\x1b[2J"])
def test_a_forge_repository_that_would_leave_its_api_path_is_refused(repository: str) -> None:
    with pytest.raises(ForgeConfigError, match="repository"):
        forge_config(kind="gitea", url="https://gitea.example.com/api/v1",
                     repository=repository, remote="")
    errors = _errors("forge: {type: gitea, url: 'https://gitea.example.com/api/v1', "
                     f"repository: {json.dumps(repository)}}}\n")
    assert [line for line, _ in errors] == [1], errors


def test_a_cluster_rollout_section_is_planned_key_by_key() -> None:
    """``clusters.<name>.rollout`` replaces the repository-wide keys one by one: adding
    ``drain`` to a cluster changes its drain, not its inherited ``readyTimeout``."""
    wide = {"rollout": {"readyTimeout": "10m"}}
    own = {**wide, "clusters": {"lab": {"rollout": {"drain": {"timeout": "5m"}}}}}
    assert list(changed_paths(ConfigDocument.from_data(wide).seen_by("lab"),
                              ConfigDocument.from_data(own).seen_by("lab"))) == ["rollout.drain"]


@pytest.mark.parametrize("selector", ["a," * 200_000, "a=b," * 50_000 + "c=(",
                                      "k" * 100_000 + "=v", "k=" + "v" * 100_000])
def test_a_huge_selector_is_quoted_shortened_where_written(selector: str) -> None:
    errors = _errors(f"rollout:\n  drain: {{podSelector: '{selector}'}}\n")
    assert [line for line, _ in errors] == [2]
    assert len(errors[0][1]) < 1000


def test_a_repo_config_that_is_not_utf8_is_refused_as_a_file(tmp_path: Path) -> None:
    """``simulate --repo-config``: bytes that are not UTF-8 make the file not valid, located;
    not 'the health section is not valid' for a file without one."""
    config = tmp_path / "reconciler.yaml"
    config.write_bytes(b"rollout:\n  readyTimeout: \"\xff\"\n")
    policy = Path(__file__).resolve().parents[2] / "examples-repo/clusters/lab-10" \
        / "cluster-operator.yaml"
    result = CliRunner().invoke(cli, ["simulate", str(policy), "--nodes", "3", "--from-version",
                                      "1.0", "--repo-config", str(config)])
    assert result.exit_code == 2, result.output
    assert "--repo-config is not valid:" in result.output
    assert f"{config}:2:" in result.output
    assert "health" not in result.output


@pytest.mark.parametrize(("line", "says"), [
    ("notify:\n  - {name: 'b\\e[2J', type: feishu, url: 'https://x/h'}\n",
     "letters, digits"),
    ("notify:\n  - {name: b, type: feishu, url: 'ftp://x/h'}\n", "https://"),
    ("forge: {type: gitea, url: 'https://x/', repository: 'name'}\n", "owner/name"),
    ("forge: {type: gitea, url: 'http://x/', repository: 'o/n'}\n", "https://"),
    ("rollout:\n  topology: {key: zone, maxUnavailablePerDomain: '0%'}\n", "'1%' to '100%'"),
])
def test_a_pattern_error_says_what_the_value_should_look_like(line: str, says: str) -> None:
    errors = _errors(line)
    assert errors, line
    message = errors[0][1]
    assert " or string," not in message and "expected string, got string" not in message
    assert says in message


@pytest.mark.parametrize(("text", "says"), [
    ("rollout:\n  drain: {}\n  waitFor:\n    timeout: 90\n",
     "waitFor.timeout: expected a duration like '30s', '10m' or '1h30m' or 0, got integer 90; "
     "a duration has a unit: '90s' for 90 seconds"),
    ("firmware: {timeouts: {upgrade: 300}}\n", "got integer 300; a duration has a unit: '300s'"),
    ("rollout:\n  waitFor:\n    timeout: false\n", "or 0, got boolean false"),
])
def test_a_number_or_boolean_for_a_duration_or_zero_is_located_not_a_traceback(
        text: str, says: str) -> None:
    """The "0 or a duration" fields: a branch of theirs that names no type ({"const": 0})
    made the error mapping raise (validate, simulate and the daemon's settings)."""
    errors = _errors(text)
    assert len(errors) == 1 and says in errors[0][1], errors
    if text.startswith("rollout"):  # the daemon's path: a located refusal
        with pytest.raises(SettingsRefused, match="a duration like"):
            resolve(load(text), "prod", source="test")


def test_a_firmware_node_label_that_is_no_label_key_is_refused_in_validate_and_the_daemon(
        ) -> None:
    """A key no node can carry reads as "absent" everywhere: the vfio-pci refusal would be off."""
    text = 'firmware: {nodeLabels: {vfioPci: "metax-tech.com/gpu vfio-pci"}}\n'
    assert _errors(text) == [(1, "firmware.nodeLabels.vfioPci: 'metax-tech.com/gpu vfio-pci' "
                                 "is not a label key: its name must be 1-63 characters of "
                                 "letters, digits, '-', '_' and '.', starting and ending with "
                                 "a letter or a digit")]
    with pytest.raises(SettingsRefused, match=r"reconciler\.yaml:1:\d+: firmware\.nodeLabels"):
        resolve(load(text), "prod", source="test")
    assert _errors('firmware: {nodeLabels: {vfioPci: "example.com/vfio"}}\n') == []


def test_validate_warns_of_a_forge_url_off_the_origins_host() -> None:
    """The daemon turns commit statuses off for such a URL from Git (a merged change could
    send the token anywhere); validate, knowing origin, says so before the merge."""
    text = "forge: {type: github, url: 'https://api.evil.example', repository: o/n}\n"
    found = validate_repo_config(text, "reconciler.yaml", remote="git@github.com:o/n.git").findings
    assert [(f.severity, f.rule) for f in found] == [("warning", "forge-url")]
    assert "api.evil.example is not the remote's host github.com" in found[0].message
    assert "origin here is git@github.com:o/n.git" in found[0].message
    for url in ("https://api.github.com", "https://github.com/api/v3"):
        text = f"forge: {{type: github, url: '{url}', repository: o/n}}\n"
        assert validate_repo_config(text, "reconciler.yaml",
                                    remote="https://github.com/o/n.git").findings == []


def test_a_zero_ready_timeout_is_refused_and_an_instant_forced_drain_warned_of() -> None:
    """``--ready-timeout`` refuses 0; the file said nothing and every node would fail."""
    text = ("rollout:\n  readyTimeout: 0s\n  drain: {timeout: 0m, onTimeout: delete}\n"
            "  waitFor: {timeout: 0h}\n")
    found = [(f.line, f.severity, f.rule) for f in
             validate_repo_config(text, "reconciler.yaml").findings]
    assert found == [(2, "error", "rollout-duration"),
                     (3, "warning", "rollout-drain-delete-at-once")]
    with pytest.raises(SettingsRefused, match="readyTimeout: must be longer than 0"):
        resolve(load(text), "prod", source="test")
    # any zero is zero: waitFor 0m waits as long as it takes, with or without drain
    assert validate_repo_config("rollout:\n  waitFor: {timeout: 0m}\n",
                                "reconciler.yaml").findings == []
