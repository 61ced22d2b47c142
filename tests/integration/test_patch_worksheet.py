"""The patch page as a maintainer's work sheet, from the engine's real report: the hunks the
head has and lacks, the failing hunk as a diff, the upstream commits that touched its lines as
links, git's own output, and the commands that reproduce it."""

from __future__ import annotations

import html
import re
from pathlib import Path

import httpx
import redis

from bot.core import transitions as tr
from bot.core.report import PatchReport
from bot.core.state import SeriesState
from bot.git.engine import Engine
from bot.git.mirror import Mirror
from bot.store.series import save_series
from harness.gitrepo import RepoBuilder
from tests.support.dashboard_app import dashboard
from tests.support.engine import BODY
from tests.support.engine_checks import patches_of
from workers.rebase import finding

UPSTREAM = "upstream-org/engine"
SERIES = "worksheet"


def report_for(up: RepoBuilder, tmp_path: Path, fix: dict, upstream_change: dict) -> PatchReport:
    base = up.head("main")
    up.checkout("main", new_branch="fix")
    up.commit("Make the values safe", fix)
    patches = patches_of(up, "main..fix", tmp_path / "patches")
    up.checkout("main")
    up.commit("Upstream rewrites value 30 (#41)", upstream_change)
    engine = Engine(Mirror(str(up.path), tmp_path / "cache"))
    return engine.check("main", patches, base=base).patches[0]


def page_for(client: redis.Redis, result: PatchReport) -> str:
    """The report stored as a rebase stores it, then the patch page."""
    name = result.patch.rsplit("/", 1)[-1]
    state = SeriesState(id=SERIES, upstream_repo=UPSTREAM)
    checked = tr.CheckResult(
        head="h" * 40, digest="d", checked_at="now", patches=(finding(result),)
    )
    tr.apply_check(state, checked)
    save_series(client, state)
    with dashboard(client) as url:
        answer = httpx.get(f"{url}/series/{SERIES}/patches/{name}", timeout=10)
    assert answer.status_code == 200
    return answer.text


def test_a_conflict_shows_its_hunk_as_a_diff_with_the_commits_that_touched_it(
    make_repo, client, tmp_path
):
    up = make_repo("upstream")
    up.commit("base", {"mod.py": BODY})
    fix = {"mod.py": BODY.replace("compute(30)", "compute(30, safe=True)")}
    result = report_for(up, tmp_path, fix, {"mod.py": BODY.replace("compute(30)", "other(30)")})
    assert result.status.value == "conflict"
    touched = up.head("main")
    text = page_for(client, result)
    sheet = text[text.index("What needs a decision") : text.index('id="evidence-title"')]
    assert "1 of 1 hunk needs work" in sheet
    assert '<tr class="needs-work">' in sheet
    assert '<span class="del">-value_30 = compute(30)</span>' in sheet
    assert '<span class="add">+value_30 = compute(30, safe=True)</span>' in sheet
    assert f'href="https://github.com/{UPSTREAM}/commit/{touched}"' in sheet
    assert "Upstream rewrites value 30 (#41)" in sheet
    output = html.unescape(re.search(r'<pre class="apply-output"[^>]*>(.*?)</pre>', sheet, re.S)[1])
    assert "error: patch failed: mod.py:" in output and "\n" in output
    reproduce = html.unescape(
        re.search(r'<pre class="reproduce"[^>]*><code>(.*?)</code>', sheet, re.S)[1]
    )
    assert reproduce.splitlines()[0].startswith("git clone ")
    assert reproduce.splitlines()[-1].startswith("git am -3 ")


def test_a_partial_lists_the_hunk_upstream_lacks_first_and_the_one_it_has(
    make_repo, client, tmp_path
):
    up = make_repo("upstream")
    up.commit("base", {"mod.py": BODY})
    both = BODY.replace("compute(3)", "compute(3, safe=True)").replace(
        "compute(35)", "compute(35, safe=True)"
    )
    taken = BODY.replace("compute(3)", "compute(3, safe=True)").replace("compute(30)", "x(30)")
    result = report_for(up, tmp_path, {"mod.py": both}, {"mod.py": taken})
    assert result.status.value == "partial"
    sheet = page_for(client, result)
    sheet = sheet[sheet.index("What needs a decision") : sheet.index('id="evidence-title"')]
    assert "1 of 2 hunks needs work; the head already has the other 1" in sheet
    rows = re.findall(r'<tr class="(needs-work|in-head)">', sheet)
    assert rows == ["needs-work", "in-head"]
    assert '<span class="add">+value_35 = compute(35, safe=True)</span>' in sheet


FUNC = (
    "def frobnicate(widget, level):\n"
    "    checked = validate_widget(widget)\n"
    "    scaled = checked.scale(level * 2)\n"
    "    return scaled.finish(mode='strict')\n"
)


def test_a_patch_upstream_took_in_another_form_names_its_commit_pr_and_difference(
    make_repo, client, tmp_path
):
    """Issue 35: the work sheet names the upstream commit (and PR) that brought upstream's
    version, shows upstream's text against the patch's for the hunk that differs, and the
    reason agrees with the sheet's count."""
    up = make_repo("upstream")
    up.commit("base", {"mod.py": BODY})
    mine = BODY.replace("(10)\n", "(10)\n" + FUNC).replace("compute(30)", "compute(30, fast=True)")
    theirs = mine.replace("level * 2", "level * 3")
    result = report_for(up, tmp_path, {"mod.py": mine}, {"mod.py": theirs})
    assert result.status.value == "upstream-version"
    landed = up.head("main")
    text = page_for(client, result)
    facts = text[text.index('class="facts"') : text.index("What needs a decision")]
    assert "the head has all 2 hunks, 1 of them in a different version" in facts
    assert f'href="https://github.com/{UPSTREAM}/commit/{landed}"' in facts
    assert "Upstream rewrites value 30 (#41)" in facts
    assert f'href="https://github.com/{UPSTREAM}/pull/41">#41</a>' in facts
    assert "added the lines upstream has" in facts
    sheet = text[text.index("What needs a decision") : text.index('id="evidence-title"')]
    assert "1 of 2 hunks needs work; the head already has the other 1" in sheet
    assert "Upstream's text there, against the patch's" in sheet
    assert '<span class="del">-    scaled = checked.scale(level * 2)</span>' in sheet
    assert '<span class="add">+    scaled = checked.scale(level * 3)</span>' in sheet
    name = result.patch.rsplit("/", 1)[-1]
    with dashboard(client) as url:
        stored = httpx.get(f"{url}/api/v1/series/{SERIES}/patches/{name}", timeout=10).json()
    assert [(c["sha"], c["pr"]) for c in stored["patch"]["upstream_commits"]] == [(landed, 41)]


def test_a_files_newest_commits_are_listed_once_per_file_not_once_per_hunk(
    make_repo, client, tmp_path
):
    """Hunks whose lines cannot be traced (no base, and upstream rewrote the file before the
    newest commits searched) get the file's newest commits: once on the sheet, not per hunk."""
    up = make_repo("upstream")
    up.commit("base", {"mod.py": BODY})
    up.checkout("main", new_branch="fix")
    mine = BODY
    for n in (5, 20, 35):
        mine = mine.replace(f"compute({n})", f"compute({n}, safe=True)")
    up.commit("Make three values safe", {"mod.py": mine})
    (made,) = patches_of(up, "main..fix", tmp_path / "patches")
    up.checkout("main")
    sha = made.data.split(b" ", 2)[1]
    made = type(made)(made.name, made.data.replace(sha, b"f" * 40, 1))  # a downstream commit
    rewritten = "".join(f"number_{i} = calculate_value({i})\n" for i in range(1, 41))
    up.commit("Rewrite the module", {"mod.py": rewritten})
    for i in range(25):
        rewritten += f"extra_{i} = more_values({i})\n"
        up.commit(f"Add extra {i}", {"mod.py": rewritten})
    engine = Engine(Mirror(str(up.path), tmp_path / "cache"))
    result = engine.check("main", [made]).patches[0]
    assert result.status.value == "conflict"
    hunks = result.conflict["hunks"]
    assert len(hunks) == 3 and all(h.get("recent_commits") for h in hunks)
    sheet = page_for(client, result)
    sheet = sheet[sheet.index("What needs a decision") : sheet.index('id="evidence-title"')]
    assert sheet.count("The newest upstream commits on <code>mod.py</code>") == 1
    assert sheet.count("Add extra 24") == 1
