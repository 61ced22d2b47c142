"""bench/overview.py at a quick size (issue 37): it fills a private redis-server through the
engine and the transitions, serves the store with `carry web` from a baseline revision and from
this tree, checks both overviews have every series and the series page every patch, and prints
its table (no timing is asserted); with --exported the webs read the series as compose's does,
from carry's copy exported from the (emulated) GitHub."""

from __future__ import annotations

import pytest

from bench.overview import main
from tests.support.markers import needs_redis_server

pytestmark = [
    pytest.mark.slow,
    needs_redis_server,
]


@pytest.mark.parametrize(
    ("flags", "source"),
    [([], "a checkout (CARRY_DOWNSTREAM_DIR)"), (["--exported"], "carry's export")],
)
def test_the_quick_overview_table_has_both_pages_for_both_webs(
    capsys: pytest.CaptureFixture[str], flags: list[str], source: str
) -> None:
    # 12 patches: more than the overview shows as chips, so its counted cell is rendered
    quick = ["--series", "3", "--patches", "12", "--repeat", "2", "--baseline", "HEAD"]
    assert main([*quick, *flags]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == (
        "overview bench: S=3 P=12, 2 requests a page, 5 series changed before each, "
        f"series read from {source}"
    ), lines
    rows = [line.split(" | ")[:2] for line in lines[3:]]
    assert rows == [
        ["| baseline HEAD", "overview /"],
        ["| now", "overview /"],
        ["| baseline HEAD", "series page"],
        ["| now", "series page"],
        ["| baseline HEAD", "first overview"],
        ["| now", "first overview"],
    ], lines
