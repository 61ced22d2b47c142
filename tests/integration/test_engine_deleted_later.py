"""Issue 35: a landing with the patch's very diff, then a file it changes deleted whole by
upstream. vllm-gaudi's Coverity fix (966ad369f9 on releases/v0.17.1, main's 1ddc974a "#1164")
also simplified `extension/unified_batch.py`; main later removed Unified Attention as dead code
(22264a62, #1226), file and all, so the patch went to review as `partial` although a rebase by
hand can only leave it empty. Dropped when the deleting commit was made on top of the landing
(the file it deleted had the fix) and does not say it reverts; a review when a revert deleted
it, or when the deletion came from a branch forked before the landing."""

from __future__ import annotations

import pytest

from bot.core.classify import Decision, Status
from bot.git.engine import PatchInput
from tests.support.engine import check

BATCH = (
    "def store(cache, key, value):\n"
    "    # Flatten based on type\n"
    "    if isinstance(value, Tensor):\n"
    "        flat_value = value.flatten()\n"
    "    else:\n"
    "        flat_value = value.flatten()\n"
    "    cache[key] = flat_value\n"
)
BATCH_FIXED = (
    "def store(cache, key, value):\n    flat_value = value.flatten()\n    cache[key] = flat_value\n"
)
RUNNER = "def run(model):\n    config = model.config\n    return model.forward(config)\n"
RUNNER_FIXED = (
    "def run(model):\n    config = model.config\n"
    "    if config is None:\n        raise ValueError('model has no config')\n"
    "    return model.forward(config)\n"
)
TITLE = "Coverity fix including security, null-like values, duplicates (#1164)"
BEFORE = {"pkg/unified_batch.py": BATCH, "pkg/runner.py": RUNNER}
AFTER = {"pkg/unified_batch.py": BATCH_FIXED, "pkg/runner.py": RUNNER_FIXED}


@pytest.fixture
def landed(make_repo, tmp_path):
    down = make_repo("downstream")
    down.commit("Base", BEFORE)
    down.commit(TITLE, AFTER)
    patches = [
        PatchInput(str(p), p.read_bytes())
        for p in down.format_patch("HEAD~1..HEAD", tmp_path / "patches")
    ]
    up = make_repo("upstream")
    up.commit("Base", BEFORE)
    base = up.head("main")
    landing = up.commit(TITLE, AFTER)
    return up, patches, base, landing


@pytest.mark.parametrize("anchor", ["base", "none"])
def test_a_file_deleted_whole_on_top_of_the_landing_is_dropped(landed, tmp_path, anchor):
    up, patches, base, landing = landed
    dead = up.commit("Remove dead Unified Attention code (#1226)", {"pkg/unified_batch.py": None})
    up.commit("Unrelated upstream work", {"pkg/other.py": "alpha = first_value()\n"})
    p = check(up, patches, tmp_path, **({"base": base} if anchor == "base" else {}))
    found = {e["signal"]: e for e in p.evidence}
    assert found["patch-id-match"]["commit"] == landing
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP), p.reason
    assert found["added-lines-edited-later"]["deleted_files"] == [
        {"path": "pkg/unified_batch.py", "commit": dead}
    ]
    assert f"upstream later deleted whole: pkg/unified_batch.py ({dead[:12]})" in p.reason


def test_a_file_deleted_by_a_revert_keeps_it_a_review(landed, tmp_path):
    up, patches, base, landing = landed
    up.commit('Revert "Unified batch preparation" (#1230)', {"pkg/unified_batch.py": None})
    p = check(up, patches, tmp_path, base=base)
    assert {e["signal"]: e for e in p.evidence}["patch-id-match"]["commit"] == landing
    assert p.decision == Decision.REVIEW, p.reason


def test_a_file_deleted_on_a_branch_forked_before_the_landing_keeps_it_a_review(landed, tmp_path):
    """The deletion was made on a tree without the fix and came in by a merge: its code may
    live on elsewhere without the fix, so a human looks."""
    up, patches, base, landing = landed
    up.checkout(base, new_branch="refactor")
    up.commit("Move batch preparation into the runner (#1226)", {"pkg/unified_batch.py": None})
    up.checkout("main")
    up.git("merge", "-q", "--no-ff", "-s", "ours", "--no-commit", "refactor")
    up.git("rm", "-q", "pkg/unified_batch.py")
    up.git("commit", "-q", "-m", "Merge branch 'refactor'")
    p = check(up, patches, tmp_path, base=base)
    assert {e["signal"]: e for e in p.evidence}["patch-id-match"]["commit"] == landing
    assert p.decision == Decision.REVIEW, p.reason
