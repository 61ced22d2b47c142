"""Issue 35: `carry check --series DIR` reads each fix page's upstream PR as a declared drop
condition: once the head's first-parent history merged it and the head has upstream's version
of every hunk, the patch goes to review with the PR leading the reason (no config opts in)."""

from __future__ import annotations

import json

from tests.support.carry_cli import FIX_PAGE, carry
from tests.support.engine import BODY

FUNC = (
    "def frobnicate(widget, level):\n"
    "    checked = validate_widget(widget)\n"
    "    scaled = checked.scale(level * 2)\n"
    "    return scaled.finish(mode='strict')\n"
)


def test_a_fix_pages_merged_pr_leads_the_review_in_text_and_json(make_repo, tmp_path):
    up = make_repo("upstream")
    up.commit("base", {"mod.py": BODY})
    base = up.head()
    up.checkout("main", new_branch="down")
    up.commit("Add frobnicate", {"mod.py": BODY.replace("(10)\n", "(10)\n" + FUNC)})
    (made,) = up.format_patch("main..down", tmp_path / "made")
    up.checkout("main")
    theirs = FUNC.replace("level * 2", "level * 3")
    landed = up.commit(
        "Add frobnicate, scaled by 3 (#123)", {"mod.py": BODY.replace("(10)\n", "(10)\n" + theirs)}
    )
    directory = tmp_path / "patches" / "frob"
    directory.mkdir(parents=True)
    (directory / made.name).write_bytes(made.read_bytes())
    page = FIX_PAGE.replace("{patches}", f"{made.name}: mod.py").replace(
        "| Upstream | not-filed |", "| Upstream | owner/upstream#123 (open) |"
    )
    (directory / "value-fix.md").write_text(page)
    (directory / "series").write_text(f"# base: {base}\n{made.name}\n")
    args = ["check", "--repo", str(up.path), "--head", "main", "--series", str(directory)]
    args += ["--cache-dir", str(tmp_path / "c")]
    text = carry(*args)
    assert text.returncode == 0, text.stderr
    assert f"merged upstream as #123 in {landed[:12]} (declared in the fix page)" in text.stdout
    report = json.loads(carry(*args, "--json").stdout)
    (patch,) = report["patches"]
    assert (patch["status"], patch["decision"]) == ("upstream-version", "review")
    assert patch["reason"].startswith(f"merged upstream as #123 in {landed[:12]}")
    (declared,) = [e for e in patch["evidence"] if e["signal"] == "declared-pr"]
    assert declared["pr"] == "owner/upstream#123" and declared["merged"] is True
    assert declared["detail"].startswith(f"merged upstream as #123 in {landed}; differences: ")
    assert patch["upstream_commits"][0]["how"] == "declared-pr"
