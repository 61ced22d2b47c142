"""bench/every_head.py at a quick size (issue 32): every head's exact tree is tested on a real
runner although carry has nothing to propose, the last known good head follows, the red head is
bisected down to the upstream commit inside it that broke the fix (with the A/B reading), and
the webhook receiver is told once when the series goes red, how it was bisected, and once when
it is green again, signed. The tested tree is `carry/tree/<series>` in the downstream repository
(with its check on that commit), the last good one `carry/good/<series>`; after two red heads
the fix page's owner is mentioned once on the dashboard issue (on by default: the token may
write issues) and to the webhook.

It starts its own redis-server, the GitHub emulator, carry's web and worker and a runner.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.every_head import run_every_head
from tests.support.markers import needs_redis_server

pytestmark = [
    pytest.mark.slow,
    needs_redis_server,
]


def test_every_head_is_verified_and_a_red_head_is_told_once(tmp_path: Path) -> None:
    figures = run_every_head(tmp_path, heads=5)
    table = figures.table()
    assert figures.ok, table
    assert figures.prs == 0, table
    red = figures.heads[figures.broken_from]
    (went_red,) = [m for m in figures.messages if m.event == "went-red"]
    assert went_red.body["head"] == red and went_red.signed, table
    assert went_red.body["last_good"] == figures.heads[figures.broken_from - 1], table
    (bisected,) = [m for m in figures.messages if m.event == "bisected"]
    assert bisected.body["culprit"] == figures.breaking, table
    assert bisected.body["pr"] == 100 + figures.broken_from, table
    assert figures.bisect["runs"] <= figures.bisect["budget"], table
    # the tested tree is a branch people can build, and the good head's tree a ref
    tree, good = figures.tree_ref, figures.good_ref
    assert tree is not None and good is not None, table
    assert (tree.parent, tree.patches, tree.tree) == (figures.heads[-1], 1, tree.tested_tree)
    assert "carry/gaudi/fixed: success" in tree.statuses, table
    assert good.commit == tree.commit, table  # the last head is the good one
    assert figures.tree_pushes == len(figures.heads) and figures.own_pushes_rebased == 0, table
    assert figures.own_pushes_noted >= 1, table  # carry heard its own pushes and left them
    # after two red heads the fix page's owner is mentioned, once, on the dashboard issue
    (mention,) = figures.mentions
    assert "@fix-owner" in mention and "2 heads" in mention, table
    (streak,) = [m for m in figures.messages if m.event == "red-streak"]
    assert streak.body["owners"] == ["fix-owner"] and streak.signed, table
