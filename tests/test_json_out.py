"""``write_json`` (behind ``reconciler simulate --format json``) writes exactly what
``json.dumps(value, indent=2)`` writes, batch boundaries included."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest

from reconciler.cli import json_out
from reconciler.cli.json_out import write_json


class Phase(enum.StrEnum):
    IDLING = "Idling"


class Level(enum.IntEnum):
    HIGH = 3


def written(value: Any) -> str:
    parts: list[str] = []
    write_json(value, parts.append)
    return "".join(parts)


VALUES: list[Any] = [
    {},
    [],
    None,
    "plain",
    {"a": 1, "b": [1, 2.5, -0.0, 1e300, 1e-7, True, False, None], "c": {}, "d": []},
    {"nested": {"deeper": [{"x": [[], {}, [1, [2, {"y": "z"}]]]}]}},
    {"text": "ümlaut \u2603 \U0001f600 \"quoted\" \\ back\nline\ttab\x1b[31m"},
    {"floats": [float("nan"), float("inf"), -float("inf"), 0.1 + 0.2, 12345678901234567890.0]},
    {"ints": [0, -1, 2**70, Level.HIGH], "phase": Phase.IDLING, Phase.IDLING: "as a key"},
    {2: "int key", 2.5: "float key", True: "bool key", None: "null key"},
    {"tuple": (1, "two", (3,))},
    [{"a": 1}, [1, 2], "x"],
]


@pytest.mark.parametrize("value", VALUES)
def test_writes_what_json_dumps_writes(value: Any) -> None:
    assert written(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize("size", [json_out._BATCH - 1, json_out._BATCH, json_out._BATCH + 1,
                                  3 * json_out._BATCH + 7])
def test_long_lists_are_written_in_batches_with_the_same_text(size: int) -> None:
    value = {
        "final": {"phase": "Idling", "status": {"n": size}},
        "nodes": [{"name": f"node-{i:06d}", "version": "2.33.0.9", "ready": i % 3 != 0}
                  for i in range(size)],
        "events": [{"t": i * 0.5, "type": "NodeReady", "node": f"node-{i}", "step": i % 4,
                    "message": f"node-{i}: driver Ready on 2.33.0.9"} for i in range(size)],
        "mixed": [{"a": i, "nested": {"b": [i, {"c": None}], "d": []}} if i % 7 else i
                  for i in range(size)],
        "empty": [],
    }
    parts: list[str] = []
    write_json(value, parts.append)
    assert "".join(parts) == json.dumps(value, indent=2)
    assert len(parts) > 2 * (size // json_out._BATCH)  # written as it was made


def test_what_json_refuses_it_refuses() -> None:
    with pytest.raises(TypeError):
        written({"a": object()})
    with pytest.raises(TypeError):
        written({(1, 2): "tuple key"})
