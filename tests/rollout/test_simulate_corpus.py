"""`reconciler simulate --format json` gives, for every recorded case, exactly the output recorded
before the planner was restructured (tests/rollout/simulate_corpus.py says how it was made)."""

from __future__ import annotations

import json

import pytest

from tests.rollout.simulate_corpus import CASES, CORPUS, Case, run


def test_the_corpus_covers_every_case_and_nothing_else() -> None:
    recorded = {p.stem for p in CORPUS.glob("*.json")}
    assert recorded == {case.name for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_simulate_gives_the_recorded_output(case: Case) -> None:
    expected = json.loads((CORPUS / f"{case.name}.json").read_text(encoding="utf-8"))
    code, stdout = run(case)
    assert code == expected["exit_code"]
    assert json.loads(stdout) == expected["output"]
