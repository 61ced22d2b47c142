"""bench/scale.py at its quick size (issue 37): the whole service (web, the quick lane's worker,
one then two git workers, beat, a runner, a private redis-server, the GitHub emulator) under
heads pushed at a fixed rate, and its table: a row for every size and worker count, and every
head pushed decided by every series on its upstream."""

from __future__ import annotations

import pytest

from bench.scale import QUICK, render, render_families, run
from tests.support.markers import needs_redis_server

pytestmark = [
    pytest.mark.slow,
    needs_redis_server,
]


def test_the_quick_scale_table_has_every_row_and_every_head_checked() -> None:
    rows = run(QUICK, say=lambda _line: None)
    table = render(rows)
    lines = table.splitlines()
    assert len(lines) == 2 + len(QUICK.sizes) * len(QUICK.git_workers), table
    assert [(r.size, r.git_workers) for r in rows] == [
        (size, workers) for workers in QUICK.git_workers for size in QUICK.sizes
    ]
    for row, line in zip(rows, lines[2:], strict=True):
        assert line.startswith(f"| {row.git_workers} | {row.size} |"), table
        assert row.pushed > 0 and row.checked == row.pushed, table
        assert row.series_heads + row.superseded == row.owed, table
        assert row.decision_ms and row.pr_ms, table  # every head moved a patch: a PR each time
        assert row.overview_ms and row.series_page_ms and not row.page_failures, table
    assert "`carry:history:*`" in render_families(rows)
