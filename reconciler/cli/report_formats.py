"""``reconciler validate`` for code-review tools: SARIF 2.1.0 (GitHub code scanning) and the
GitLab Code Quality report. Both carry the same findings as the text and json formats.

A review tool keeps an alert open across pushes by its fingerprint, so a fingerprint is built
from where the finding is in the document's terms (rule, file, JSON pointer), never from its
line or anything that changes between runs: a line added above it must not turn one alert into
a fixed one and a new one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from reconciler import __version__
from reconciler.files import unsafe
from reconciler.policy.findings import Finding, Severity

#: The project's home; the docs the rules link to are under it. A placeholder, like the image
#: in deploy/deployment.yaml, until the project is published.
PROJECT_URL = "https://github.com/example/gpu-gitops-reconciler"
_DOCS = f"{PROJECT_URL}/blob/main/docs"

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
#: The key of our fingerprint in ``partialFingerprints`` (versioned: a new recipe gets /v2).
FINGERPRINT_KEY = "reconcilerFinding/v1"

SARIF_LEVELS: dict[Severity, str] = {"error": "error", "warning": "warning", "info": "note"}
#: An error makes the sync refuse the commit, so nothing of it reaches the cluster; a warning
#: is applied as written; an info only tells (GitLab's lowest severity).
GITLAB_SEVERITIES: dict[Severity, str] = {"error": "critical", "warning": "minor",
                                          "info": "info"}


# -- rules ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RuleHelp:
    short: str
    page: str  # docs page and anchor


_CATALOGUE = "validation.md#message-catalogue"
_FILES = "validation.md#files-on-disk"
_HEALTH = "health.md#what-validation-reports"
_FLEET = "configuration.md#a-fleet-of-clusters-clustersname-windows-promotion"
_FIRMWARE = "firmware.md#preflight-refusals"
_NOTIFY = "notifications.md#keys"

#: rule, docs page (a key of _PAGES), short description: one rule a line
_TABLE = """
file-too-large             files     The file is larger than a policy file may be (1 MiB)
not-utf8                   catalogue The file is not UTF-8 text
yaml-version               catalogue Policy files are YAML 1.2; a %YAML 1.1 directive is refused
yaml-syntax                catalogue The file is not valid YAML
too-deep                   catalogue Collections are nested too deep
empty-document             catalogue The file holds no YAML document
multiple-documents         catalogue A policy file holds exactly one YAML document
duplicate-key              catalogue A YAML mapping repeats a key
custom-tag                 catalogue A YAML tag other than plain YAML 1.2 types
key-type                   catalogue A mapping key that is not a string
merge-key                  catalogue YAML merge keys (<<) are not allowed
recursive-alias            catalogue A YAML alias refers to its own collection
alias-bomb                 catalogue YAML aliases expand the document beyond the limit
tag-value                  catalogue A value does not fit its explicit YAML tag
non-finite-number          catalogue A number that is not finite (.inf, .nan)
integer-range              catalogue An integer outside the signed 64-bit range Kubernetes stores
schema-type                catalogue A value of the wrong type
schema-enum                catalogue A value that is not one of the allowed values
schema-minimum             catalogue A number below its minimum
schema-maximum             catalogue A number above its maximum
schema-pattern             catalogue A string that does not have the required form
schema-min-items           catalogue A list with too few items
schema-min-length          catalogue A string that is too short
schema-max-properties      catalogue A mapping with too many keys
percent-format             catalogue Not a node count or a percentage like '50%'
required-field             catalogue A required field is missing
unknown-field              catalogue A field the ClusterOperator schema does not know
unknown-field-pruned       catalogue A field the vendor's CRD does not have: the API server drops it
crd-required-field         catalogue Fields the vendor's CRD requires, left to the installed object
not-acted-on               catalogue Fields applied as written, not acted on by the reconciler
null-left-out              catalogue Empty values, left out when the sync applies the policy
list-duplicate             catalogue A list keyed by the CRD repeats an item
percent-range              catalogue A percentage outside 1% to 100%
steps-required             catalogue enableRollout is true but there are no upgradeSteps
steps-increasing           catalogue Step targets do not strictly increase
last-step-100              catalogue The last step does not reach 100% of the nodes
server-populated-field     catalogue A field the API server sets, never applied
helm-ownership-metadata    catalogue Helm's ownership metadata in a policy, never applied
reconciler-annotation      catalogue The reconciler's own annotation in a policy, never applied
cluster-scoped-namespace   catalogue A namespace on the cluster-scoped ClusterOperator
transition-locked-field    catalogue A field that cannot change while the rollout runs
firmware-locked-field      catalogue A firmware field that cannot change during a firmware upgrade
firmware-rollout-conflict  catalogue A driver change while a firmware upgrade runs
promotion-gate             catalogue The promotion gate does not allow this version yet
duplicate-object           catalogue A second ClusterOperator in one cluster folder
unreadable-file            files     The file cannot be read
symlink                    files     A symbolic link, not followed
not-regular-file           files     Not a regular file (a FIFO, device or socket)
no-policy                  catalogue A cluster folder without a policy file
health-expect              health    A health check's expect is not an operator and a number
health-duration            health    A health duration of 0 where one is needed, or over 168h
health-duplicate-check     health    A health check name used twice in one section
health-placeholder         health    An unknown or misplaced placeholder in a health query
health-promql              health    A health query that is not a usable PromQL query
health-prometheus-url      health    Not a usable Prometheus URL
windows-schedule           fleet     A maintenance window's cron expression is invalid
windows-timezone           fleet     An unknown time zone
windows-duration           fleet     A window duration of 0 or over 168h
windows-time               fleet     A deny range's from/until is not a time
windows-deny-order         fleet     A deny range's until is not after its from
promotion-unknown-cluster  fleet     promotion.after names no cluster
promotion-cycle            fleet     promotion.after chains form a cycle
promotion-soak             fleet     A promotion soak over 720h
notify-url-is-secret       notify    A Slack or WeCom URL in Git: it holds its key, give urlFile
notify-url-or-file         notify    A notify sink without its url or urlFile, or with both
notify-secret-file         notify    A webhook sink without secretFile, or one on Slack or WeCom
notify-type                notify    A notify sink without a type
notify-name-twice          notify    Two notify sinks with one name
notify-url                 notify    A notify sink's URL cannot be posted to
"""
_PAGES = {"catalogue": _CATALOGUE, "files": _FILES, "health": _HEALTH, "fleet": _FLEET,
          "notify": _NOTIFY}
RULES: dict[str, RuleHelp] = {
    rule: RuleHelp(short, _PAGES[page])
    for rule, page, short in (line.split(maxsplit=2) for line in _TABLE.strip().splitlines())
}

#: Rules named by a family and a part (``schema-<keyword>``, ``firmware-preflight-<rule>``).
_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("firmware-preflight-", "The firmware preflight refuses a node ({part})", _FIRMWARE),
    ("schema-", "The value does not satisfy the JSON Schema ({part})", _CATALOGUE),
    ("health-", "The health section is invalid ({part})", _HEALTH),
    ("windows-", "A maintenance window is invalid ({part})", _FLEET),
    ("promotion-", "The promotion section is invalid ({part})", _FLEET),
    ("notify-", "A notify sink is invalid ({part})", _NOTIFY),
)


def rule_help(rule: str) -> RuleHelp:
    """The short description and docs page of ``rule``; a rule this table does not know yet
    still gets one (its family's, or the message catalogue)."""
    if rule in RULES:
        return RULES[rule]
    for prefix, short, page in _FAMILIES:
        if rule.startswith(prefix) and len(rule) > len(prefix):
            return RuleHelp(short.format(part=rule[len(prefix):]), page)
    return RuleHelp(f"Policy check {rule}", _CATALOGUE)


def help_uri(rule: str) -> str:
    return f"{_DOCS}/{rule_help(rule).page}"


# -- paths and fingerprints ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RepositoryPaths:
    """Turns a finding's file as shown (relative to the current folder, or ``REF:path`` for a
    file read at the ``--against`` ref) into a path relative to the repository root with
    forward slashes, which is what code-review tools match against the diff."""

    root: Path
    cwd: Path
    ref: str | None = None

    def relative(self, shown: str) -> str:
        if self.ref is not None and shown.startswith(f"{self.ref}:"):
            shown = shown[len(self.ref) + 1:]
        absolute = Path(os.path.normpath(self.cwd / shown))
        try:
            return absolute.relative_to(self.root).as_posix()
        except ValueError:
            return absolute.as_posix()  # outside the repository: where it is


def fingerprints(findings: Sequence[Finding], path: Callable[[str], str]) -> list[str]:
    """One fingerprint per finding, in order: SHA-256 of rule, repository path and JSON pointer
    (the field). Not the message: some name the time (the promotion gate's "completed 3h ago"),
    and a value fixed into another wrong one is still the alert at that field. Findings alike
    in all three get their occurrence number (in source order) too, so every fingerprint in
    one report is unique (GitLab keeps one issue per fingerprint)."""
    seen: Counter[tuple[str, str, str]] = Counter()
    out: list[str] = []
    for f in findings:
        key = (f.rule, path(f.file), f.pointer)
        occurrence = seen[key]
        seen[key] += 1
        # a JSON list: no part can run into the next; ASCII, so any surrogate is escaped
        text = json.dumps([*key, occurrence] if occurrence else list(key))
        out.append(hashlib.sha256(text.encode("ascii")).hexdigest())
    return out


def printable_json(text: str) -> str:
    """JSON text with every character a terminal or CI log must not get raw as a ``\\u``
    escape: json escapes C0 controls only; C1 (CSI), line separators, bidi overrides and lone
    surrogates too (outside strings the text is ASCII, so this changes no structure)."""
    if text.isascii() and "\x7f" not in text:  # json already escaped C0 controls
        return text
    return "".join(json.dumps(c)[1:-1] if c != "\n" and unsafe(c) else c for c in text)


def _json(document: Any) -> str:
    return printable_json(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def _artifact(path: str) -> dict[str, str]:
    """An artifactLocation: a URI reference relative to the repository root (spaces, '%', '#'
    and non-ASCII percent-encoded; a name that is not UTF-8 keeps its bytes), or a file URI
    for a file outside the repository."""
    uri = quote(path, safe="/", errors="surrogateescape")
    if path.startswith("/"):
        return {"uri": f"file://{uri}"}
    return {"uri": uri, "uriBaseId": "%SRCROOT%"}


# -- the formats ---------------------------------------------------------------------------------

def sarif_log(findings: Iterable[Finding], path: Callable[[str], str]) -> dict[str, Any]:
    """A SARIF 2.1.0 log with one run: the rules used (sorted) and one result per finding."""
    findings = list(findings)
    rule_ids = sorted({f.rule for f in findings})
    index = {rule: i for i, rule in enumerate(rule_ids)}
    results = [{
        "ruleId": f.rule,
        "ruleIndex": index[f.rule],
        "level": SARIF_LEVELS[f.severity],
        "message": {"text": f.message},
        "locations": [{"physicalLocation": {
            "artifactLocation": _artifact(path(f.file)),
            "region": {"startLine": f.line, "startColumn": f.column},
        }}],
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint},
        **({"properties": {"pointer": f.pointer}} if f.pointer else {}),
    } for f, fingerprint in zip(findings, fingerprints(findings, path), strict=True)]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "reconciler validate",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": f"{_DOCS}/validation.md",
                "rules": [{
                    "id": rule,
                    "name": rule,
                    "shortDescription": {"text": rule_help(rule).short},
                    "helpUri": help_uri(rule),
                } for rule in rule_ids],
            }},
            # columns count characters, as the text format prints them
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }


def format_sarif(findings: Iterable[Finding], path: Callable[[str], str]) -> str:
    return _json(sarif_log(findings, path))


def gitlab_report(findings: Iterable[Finding], path: Callable[[str], str]
                  ) -> list[dict[str, Any]]:
    """A GitLab Code Quality report: one issue per finding."""
    findings = list(findings)
    return [{
        "description": f.message,
        "check_name": f.rule,
        "fingerprint": fingerprint,
        "severity": GITLAB_SEVERITIES[f.severity],
        "location": {"path": path(f.file), "lines": {"begin": f.line}},
    } for f, fingerprint in zip(findings, fingerprints(findings, path), strict=True)]


def format_gitlab(findings: Iterable[Finding], path: Callable[[str], str]) -> str:
    return _json(gitlab_report(findings, path))
