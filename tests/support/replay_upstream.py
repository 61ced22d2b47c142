"""The synthetic upstream `carry replay`'s tests walk, its history built so the timeline is
known: patch 0001 applies, its context moves, it conflicts, upstream fixes the conflict, merges
the change in its own form, then reverts it; patch 0002 is merged upstream as is in "(#7)"."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.gitrepo import RepoBuilder

LINES = [f"setting_{i:02d} = compute_setting({i}, name='option number {i}')\n" for i in range(20)]
TOTAL = "compute_total = a + b  # original sum of both parts\n"
CARRIED = "compute_total = a + b + carry_adjustment  # carried fix for totals\n"
FLAG = "carry_adjustment_enabled = True  # switched on by the carried fix\n"
REWRITE = "compute_total = sum(parts_of_the_total)  # upstream rewrite\n"
UPSTREAM_TAKE = "compute_total = a + b + carry_adjustment  # upstream version of the fix\n"
HEADER = [f"# header line {i} added upstream, moving everything below\n" for i in range(3)]
UTIL = "def helper_for_util(value):\n    return value * 2  # the carried helper\n"


def lib(total: str, *, header: bool = False, flag: bool = False) -> str:
    body = [*(HEADER if header else []), *LINES[:10], total, *([FLAG] if flag else []), *LINES[10:]]
    return "".join(body)


@dataclass
class Upstream:
    path: Path
    patches: list[Path]
    heads: list[str]  # the walked heads, oldest first
    start: str


def build_upstream(tmp_path: Path, builder: RepoBuilder) -> Upstream:
    repo = builder
    base = repo.commit("Initial import", {"lib.py": lib(TOTAL), "util.py": "# utilities\n"})
    # The carried series, made on the initial commit.
    repo.checkout(base, new_branch="carried")
    repo.commit("Add carry adjustment to totals", {"lib.py": lib(CARRIED, flag=True)})
    repo.commit("Add util helper", {"util.py": "# utilities\n" + UTIL})
    patches = repo.format_patch(f"{base}..carried", tmp_path / "patches")
    repo.checkout("main")
    heads = [
        repo.commit("Touch the docs", {"README": "docs\n"}),  # 0: both apply
        repo.commit("Add header lines", {"lib.py": lib(TOTAL, header=True)}),  # 1: 0001 moves
        repo.commit("Add util helper (#7)", {"util.py": "# utilities\n" + UTIL}),  # 2: 0002 taken
        repo.commit("Rewrite totals", {"lib.py": lib(REWRITE, header=True)}),  # 3: conflict
        repo.commit("Touch the docs again", {"README": "docs 2\n"}),  # 4: still a conflict
        repo.commit('Revert "Rewrite totals"', {"lib.py": lib(TOTAL, header=True)}),  # 5: applies
        repo.commit(
            "Add carry adjustment to totals (#42)",
            {"lib.py": lib(UPSTREAM_TAKE, header=True, flag=True)},
        ),  # 6: upstream's own version: review
        repo.commit(
            'Revert "Add carry adjustment to totals (#42)"',
            {"lib.py": lib(TOTAL, header=True)},
        ),  # 7: reverted: applies again
    ]
    return Upstream(repo.path, patches, heads, heads[0])
