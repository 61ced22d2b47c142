"""bench/reliability's override race (issue 13), at its --quick size: rebases on successive
upstream heads, maintainers' `/carry pause|resume|keep|drop|approve`, CI results from a runner
process and carry's replies, all at once on one series, lose nothing.

It starts its own redis-server, GitHub emulator, two carry workers and a runner (about 15 s).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.reliability import QUICK, run_override_race
from tests.support.markers import needs_redis_server

pytestmark = [
    pytest.mark.slow,
    needs_redis_server,
]


def test_the_quick_override_race_loses_no_override_ci_row_or_reply(tmp_path: Path) -> None:
    figures = run_override_race(tmp_path, QUICK, seed=0)
    shown = figures.table()
    assert figures.errors == [], shown
    assert figures.drained, shown
    assert figures.lost == {"overrides": 0, "CI rows": 0, "replies": 0}, shown
    assert figures.replies_extra == 0, shown
    # Every head asked for was checked, and the series never went back to an older one.
    assert not figures.heads_lost, shown
    sent, _ = figures.overrides_total
    # It raced: every kind of override was sent, each command is due one reply, CI ran.
    assert set(figures.overrides_sent) == {"pause", "pin", "approve"}, shown
    assert sum(figures.replies_due.values()) == sent >= 20, shown
    assert figures.ci_rows_sent >= 4 and figures.asked >= 5, shown
