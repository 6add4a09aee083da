"""``clusters.<name>`` with rollout, health, windows and promotion, and top-level ``windows`` in
reconciler.yaml (docs/configuration.md#maintenance-windows): the documented example is valid; each
mistake is one located error; a per-cluster section replaces the repository-wide one as a whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.config.document import load
from reconciler.config.settings import ClusterSettings, SettingsRefused, resolve
from reconciler.config.validation import validate_repo_config
from reconciler.fleet.promotion import Promotion
from reconciler.fleet.windows import WindowCalendar
from tests.policy.commands import validate_bounded

SPEC_EXAMPLE = """\
clusters:
  prod-100:
    promotion:
      after: lab-10       # a payload reaches prod-100 only after lab-10 completed it
      soak: 24h           # ... at least this long ago, not rolled back since
      mode: hold          # hold | branch | auto
    windows:
      timezone: Asia/Shanghai
      allow: [{schedule: '0 22 * * 1-5', duration: 8h}]     # cron: when a window opens
      deny:  [{from: '2026-12-24T00:00:00+08:00', until: '2026-12-27T00:00:00+08:00', reason: holiday freeze}]
"""  # noqa: E501


def errors(text: str, clusters: tuple[str, ...] | None = ("lab-10", "prod-100")
           ) -> list[tuple[int, int, str, str]]:
    result = validate_repo_config(text, "reconciler.yaml", known_clusters=clusters)
    return [(f.line, f.column, f.rule, f.message) for f in result.errors]


def settings(text: str, cluster: str) -> ClusterSettings:
    return resolve(load(text), cluster, source="test")


def test_spec_example_is_valid_and_parses_into_the_settings() -> None:
    assert errors(SPEC_EXAMPLE) == []
    prod, lab = settings(SPEC_EXAMPLE, "prod-100"), settings(SPEC_EXAMPLE, "lab-10")
    assert prod.promotion == Promotion("lab-10", 24 * 3600.0, "hold")
    assert lab.promotion is None
    calendar = prod.windows
    assert isinstance(calendar, WindowCalendar) and calendar.timezone == "Asia/Shanghai"
    assert calendar.deny[0].reason == "holiday freeze"
    assert lab.windows is None


def test_a_cluster_section_replaces_the_repository_wide_one_and_rollout_key_by_key() -> None:
    text = """\
rollout: {readyTimeout: 20m}
windows:
  timezone: Europe/Berlin
  allow: [{schedule: '0 1 * * *', duration: 2h}]
clusters:
  prod-100:
    rollout: {}
    windows:
      deny: [{from: '2026-12-24T00:00:00Z', until: '2026-12-27T00:00:00Z'}]
"""
    assert errors(text) == []
    # rollout is replaced key by key (docs/live-clusters.md): prod-100's section has no
    # readyTimeout, so the repository-wide 20m applies
    assert settings(text, "prod-100").rollout.ready_timeout == 1200.0
    assert settings(text, "lab-10").rollout.ready_timeout == 1200.0
    prod = settings(text, "prod-100").windows
    assert prod is not None and prod.allow == () and prod.timezone == "UTC"  # no merge
    lab = settings(text, "lab-10").windows
    assert lab is not None and lab.timezone == "Europe/Berlin" and len(lab.allow) == 1


@pytest.mark.parametrize(("text", "expected"), [
    ("clusters:\n  prod-100:\n    promotion: {after: lab-9}\n",
     (3, 24, "promotion-unknown-cluster",
      "clusters.prod-100.promotion.after: no cluster 'lab-9'")),
    ("clusters:\n  a: {promotion: {after: b}}\n  b: {promotion: {after: c}}\n"
     "  c: {promotion: {after: a}}\n",
     (2, 26, "promotion-cycle", "(a after b after c after a)")),
    ("clusters:\n  a: {promotion: {after: a}}\n",
     (2, 26, "promotion-cycle", "(a after a)")),
    ("windows:\n  allow: [{schedule: '61 22 * * *', duration: 8h}]\n",
     (2, 22, "windows-schedule", "windows.allow[0].schedule: not a valid cron expression")),
    ("windows:\n  allow: [{schedule: '0 22 * *', duration: 8h}]\n",
     (2, 22, "windows-schedule", "expected five cron fields")),
    ("windows:\n  allow: [{schedule: '0 22 * * *', duration: 0s}]\n",
     (2, 46, "windows-duration", "windows.allow[0].duration: must be longer than 0")),
    ("windows: {timezone: Mars/Olympus}\n",
     (1, 21, "windows-timezone", "unknown time zone 'Mars/Olympus'")),
    ("clusters:\n  prod-100:\n    windows: {timezone: ../../etc/passwd}\n",
     (3, 25, "windows-timezone", "clusters.prod-100.windows.timezone: unknown time zone")),
    ("windows:\n  deny:\n    - {from: '2026-12-27T00:00:00Z', until: '2026-12-24T00:00:00Z'}\n",
     (3, 45, "windows-deny-order", "windows.deny[0].until: must be after from")),
    ("windows:\n  deny:\n    - {from: 'Christmas', until: '2026-12-24T00:00:00Z'}\n",
     (3, 14, "windows-time", "windows.deny[0].from: expected an RFC 3339 time")),
    ("clusters:\n  prod-100: {promotion: {after: lab-10, mode: yolo}}\n",
     (2, 47, "schema-enum", "expected one of 'hold', 'branch', 'auto'")),
    ("clusters:\n  prod-100: {promotion: {after: lab-10, soak: 2000h}}\n",
     (2, 47, "promotion-soak", "at most 720h")),
    ("promotion: {after: lab-10}\n",
     (1, 1, "unknown-field", "unknown field 'promotion' at the top level")),
])
def test_each_fleet_mistake_is_one_located_error(text: str,
                                                 expected: tuple[int, int, str, str]) -> None:
    found = errors(text)
    assert len(found) == 1, found
    line, column, rule, message = found[0]
    assert (line, column, rule) == expected[:3], found
    assert expected[3] in message


def test_a_cluster_named_only_in_clusters_entries_is_a_known_upstream() -> None:
    text = "clusters:\n  staging: {}\n  prod-100: {promotion: {after: staging}}\n"
    assert errors(text, clusters=("prod-100",)) == []
    # without the folder list, an unknown upstream cannot be judged and is not reported
    assert errors("clusters:\n  prod-100: {promotion: {after: nowhere}}\n", clusters=None) == []


def test_validate_names_a_folder_cluster_as_known_and_reports_an_unknown_one(
        tmp_path: Path) -> None:
    (tmp_path / "clusters" / "lab-10").mkdir(parents=True)
    (tmp_path / "clusters" / "lab-10" / "co.yaml").write_text(
        "apiVersion: metax-tech.com/v1\nkind: ClusterOperator\nmetadata: {name: c}\nspec: {}\n")
    (tmp_path / "reconciler.yaml").write_text(
        "clusters:\n  prod-100: {promotion: {after: lab-10}}\n"
        "  prod-200: {promotion: {after: lab-11}}\n")
    done = validate_bounded(tmp_path, "reconciler.yaml")
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("reconciler.yaml:3:33: error: clusters.prod-200.promotion.after: no cluster "
            "'lab-11'") in done.stdout
    assert done.stdout.count("error:") == 1  # prod-100's upstream lab-10 is a folder


def test_a_broken_windows_section_fails_closed_and_says_why() -> None:
    calendar = settings("windows: {timezone: Mars/Olympus}\n", "prod-100").windows
    assert calendar is not None and not calendar.is_open(0.0)
    assert "Mars/Olympus" in calendar.verdict(0.0).describe()
    # a file that is not YAML refuses the settings as a whole: the windows in force stay
    with pytest.raises(SettingsRefused, match=r"reconciler\.yaml:2:1: "):
        settings("windows: [\n", "prod-100")


def test_a_wrong_promotion_section_is_refused_naming_the_key() -> None:
    resolved = settings("clusters:\n  p: {promotion: {after: l, mode: yolo}}\n", "p")
    assert resolved.promotion is None
    assert resolved.promotion_error is not None
    assert resolved.promotion_error.startswith("clusters.p.promotion.mode: expected one of")


def test_the_repository_example_config_is_valid() -> None:
    root = Path(__file__).resolve().parents[2] / "examples-repo"
    result = validate_repo_config((root / "reconciler.yaml").read_text(), "reconciler.yaml")
    assert result.ok, result.findings


def test_hostile_windows_sections_end_with_located_errors(tmp_path: Path) -> None:
    """Every allow and deny entry the schema allows, with expensive or broken cron expressions,
    odd zone names and out-of-range times: the child ends, bounded, and locates each error."""
    heavy = ",".join(f"{m}" for m in range(0, 60, 2))[:120]
    allow = "".join(
        f"    - {{schedule: '{expr}', duration: 1m}}\n" for expr in
        [f"{heavy} * * * *", "0 0 * 2 MON#5", "\u00a0* * * * *", "0 0 31 2 *", "*/0 * * * *",
         "0 0 L-40 * *", "0 0 ? ? ?", "99999999999999999999 * * * *"] * 8)
    deny = "".join(
        f"    - {{from: '{a}', until: '{b}'}}\n" for a, b in
        [("9999-12-31T23:59:59+14:00", "9999-12-31T23:59:59-14:00"),
         ("0001-01-01T00:00:00+14:00", "0001-01-01T00:00:01Z"),
         ("2026-13-01T00:00:00Z", "2026-12-01T00:00:00Z")] * 85)
    (tmp_path / "reconciler.yaml").write_text(
        "windows:\n  timezone: 'Etc/GMT+99'\n  allow:\n" + allow + "  deny:\n" + deny)
    done = validate_bounded(tmp_path, "reconciler.yaml", timeout=120)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines and all(line.startswith("reconciler.yaml:") for line in lines)
    assert "reconciler.yaml:2:13: error: windows.timezone: unknown time zone 'Etc/GMT+99'" in (
        done.stdout)
    assert "[windows-schedule]" in done.stdout and "[windows-time]" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_a_cluster_section_with_no_folder_is_a_warning_with_the_likely_name() -> None:
    """A typo in clusters.<name> would leave the real cluster without its windows."""
    text = ("clusters:\n  prod-10O:\n    windows:\n      allow: [{schedule: '0 22 * * 1-5', "
            "duration: 8h}]\n  lab-1:\n    promotion: {after: upstream-lab}\n"
            "  upstream-lab: {}\n")
    result = validate_repo_config(text, "reconciler.yaml", known_clusters=("lab-10", "prod-100"))
    assert result.errors == []
    assert [(f.line, f.rule, f.message) for f in result.findings] == [
        (2, "clusters-unknown-cluster", "clusters.prod-10O: no cluster folder of that name, so "
         "these settings apply to no cluster; did you mean 'prod-100'?"),
        (5, "clusters-unknown-cluster", "clusters.lab-1: no cluster folder of that name, so "
         "these settings apply to no cluster; did you mean 'lab-10'?")]
    # upstream-lab is another cluster's promotion.after: meant; without the folders, no word
    assert validate_repo_config(text, "reconciler.yaml").findings == []
