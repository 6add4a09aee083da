"""Log setup: human-readable lines by default, one JSON object per line on request.

JSON lines carry the standard fields (``time``, ``level``, ``logger``, ``message``) plus any
``extra={...}`` the caller gave (``cluster``, ``commit``, ``step``...), so a log pipeline can
filter on them without parsing messages.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

# Attributes every LogRecord has; anything else came from ``extra=``.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys()
) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def configure_logging(
    *, json_logs: bool = False, level: str | int = "INFO", stream: TextIO | None = None
) -> logging.Handler:
    """Replace the root logger's handlers with one writing to ``stream`` (default stderr).

    Returns the handler (tests read it; the daemon ignores it). ``level`` accepts names in any
    case (``debug``) or numbers; an unknown name is a ``ValueError`` that says which ones exist.
    """
    if isinstance(level, str):
        numeric = logging.getLevelName(level.upper())
        if not isinstance(numeric, int):
            raise ValueError(
                f"unknown log level {level!r}: use debug, info, warning, error or critical"
            )
        level = numeric
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if json_logs else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Client libraries are chatty at debug and may log request headers (tokens): keep them at
    # warning unless the caller asks for them by name.
    for noisy in ("kubernetes", "urllib3", "git"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    return handler
