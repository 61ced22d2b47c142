"""`python -m bot.demo` as the end-to-end tests run it: its environment, and the cleanup of what
a failed run left behind."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def demo_env() -> dict[str, str]:
    """The caller's environment without the settings that would choose the demo's Redis or port."""
    return {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PORT")}


def stop_leftovers(pid_file: Path) -> None:
    """Kills what the demo started and did not stop (only if it failed to), by pid."""
    if not pid_file.exists():
        return
    for line in pid_file.read_text().splitlines():
        pid = int(line.split()[0])
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"bot.cli" in cmdline:
            os.killpg(pid, signal.SIGKILL)
