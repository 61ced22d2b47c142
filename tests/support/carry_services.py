"""carry's own service commands (`carry worker`, as deployed) for a CarryEnv, and reading the
JSON lines they log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.carry_env import CarryEnv, wait_for
from tests.support.paths import REPO_ROOT


def start_carry_worker(env: CarryEnv, name: str = "worker") -> Path:
    """`carry --log-level INFO worker` (what docker-compose runs); returns its log file."""
    log_path = env.root / f"{name}.log"
    log = open(log_path, "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "--log-level", "INFO", "worker"],
        env=env.env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO_ROOT,
        start_new_session=True,
    )
    env.procs.append(proc)

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(log_path.read_text(errors="replace"))
        return b"ready." in log_path.read_bytes()

    wait_for(ready, 30, f"carry worker {name}")
    return log_path


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
