"""The `carry` command as its command-line tests run it (a child `python -m bot.cli` from the
repository root), and the fix page they write beside a series' patches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT


def carry(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        timeout=120,
    )


FIX_PAGE = """\
# value-fix

Make values safe.

| Field | Value |
|---|---|
| Affects | every widget |
| Releases | v1.0 |
| Patches | {patches} |
| Upstream | not-filed |
| Test | none |

## Problem

P.

## Symptom

S.

## Who is affected

W.

## The fix

F.

## Verify

V.
"""
