"""Reading the JSON lines carry's service commands log (started with CarryEnv)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Celery's signal handlers print these straight to stdout (logging is unsafe there).
CELERY_SIGNAL_SAYINGS = ("worker: Warm shutdown", "worker: Cold shutdown", "worker: Hitting Ctrl+C")


def json_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of a log file as JSON; fails on the first line that is not."""
    records = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip() or line.startswith(CELERY_SIGNAL_SAYINGS):
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise AssertionError(f"{path.name}:{number} is not a JSON line: {line!r}") from err
    return records
