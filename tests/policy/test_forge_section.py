"""``forge:`` in reconciler.yaml (docs/forges.md): checked by the repo-config schema with located
errors; never the token; ``http://`` only to a loopback address."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.policy.commands import git
from tests.policy.commands import validate as run
from tests.policy.texts import EXAMPLES


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "policy"
    shutil.copytree(EXAMPLES, root)
    git(root, "init", "-q", "-b", "main")
    return root


def _config(repo: Path, forge: str) -> list[str]:
    (repo / "reconciler.yaml").write_text("clustersDir: clusters\nforge:\n" + forge)
    result = run(repo, "reconciler.yaml")
    return result.stdout.splitlines() if result.returncode else []


def test_a_forge_section_is_valid(repo: Path) -> None:
    for forge in ("  type: github\n  url: https://api.github.com\n",
                  "  type: gitlab\n  url: https://gitlab.example.com/api/v4\n"
                  "  repository: infra/gpu/policy\n",
                  "  type: gitea\n  url: http://127.0.0.1:3000/api/v1\n"):
        assert _config(repo, forge) == [], forge


@pytest.mark.parametrize(("forge", "where"), [
    ("  type: bitbucket\n  url: https://x.example.com\n", "reconciler.yaml:3:9: error: "),
    ("  type: gitea\n  url: http://gitea.example.com/api/v1\n", "reconciler.yaml:4:8: error: "),
    ("  type: github\n  url: https://api.github.com\n  token: ghp_x\n",
     "reconciler.yaml:5:3: error: unknown field 'token'"),
    ("  type: github\n  url: https://api.github.com\n  repository: policy\n",
     "reconciler.yaml:5:15: error: "),
])
def test_a_wrong_forge_section_is_a_located_error(repo: Path, forge: str, where: str) -> None:
    lines = _config(repo, forge)
    assert lines and lines[0].startswith(where), lines
