"""The scripts of bench/ as modules, for the tests of their arithmetic and verdicts (they are
scripts, not a package: each is loaded from its file)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def load_bench(script: str) -> ModuleType:
    """``bench/<script>.py`` as the module ``bench_<script>`` (registered in ``sys.modules`` so
    its dataclasses resolve their module)."""
    name = f"bench_{script}"
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{script}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
