"""Issue 35: a fix upstream took with the patch's very changed lines in the same function, but
around other code (a port between a release line and main: vllm-gaudi 89b5aa3bbe on
releases/v0.24.0 and main's 540fdb28 "Port: ... (#1631)"). git's patch id hashes the context,
so the two ids differ; the changes' own id (bot.core.changeid) finds the landing, and the
same-diff rules decide: dropped when the head has every line the patch adds and nothing it
removes came back, a review when a later commit added a removed line back."""

from __future__ import annotations

import pytest

from bot.core.classify import Decision, Status
from bot.git.engine import PatchInput
from tests.support.engine import check


def runner(note: str, fixed: bool) -> str:
    limit = (
        "    limit = compute_limit(batch, cap=MAX_DECODE_BLOCKS)\n    check_limit(limit)\n"
        if fixed
        else "    limit = compute_limit(batch)\n"
    )
    return (
        "def prefill(batch):\n    return run(batch.tokens, None)\n\n\n"
        "def decode(batch):\n    tokens = batch.tokens\n"
        f"    # {note}\n{limit}    return run(tokens, limit)\n"
    )


RELEASE_NOTE = "decode on the release line's scheduler"
MAIN_NOTE = "decode through main's bucketing manager"
TITLE = "Fix decode throughput regression"


@pytest.fixture
def ported(make_repo, tmp_path):
    """A downstream release line (its own repository: upstream never had its file) fixes
    decode; upstream main ports the same changed lines into its own version of the function."""
    down = make_repo("downstream")
    down.commit("Release line", {"runner.py": runner(RELEASE_NOTE, False)})
    down.checkout("HEAD", new_branch="fix")
    down.commit(TITLE, {"runner.py": runner(RELEASE_NOTE, True)})
    patches = [
        PatchInput(str(p), p.read_bytes())
        for p in down.format_patch("HEAD~1..fix", tmp_path / "patches")
    ]
    up = make_repo("upstream")
    up.commit("Runner", {"runner.py": runner(MAIN_NOTE, False)})
    base = up.head("main")
    landing = up.commit(f"Port: {TITLE} #1609 (#1631)", {"runner.py": runner(MAIN_NOTE, True)})
    up.commit("Unrelated upstream work", {"other.py": "alpha = first_value()\n"})
    return up, patches, base, landing


@pytest.mark.parametrize("anchor", ["base", "none"])
def test_a_port_with_the_same_changed_lines_and_other_context_is_dropped(ported, tmp_path, anchor):
    up, patches, base, landing = ported
    p = check(up, patches, tmp_path, **({"base": base} if anchor == "base" else {}))
    found = {e["signal"]: e for e in p.evidence}
    assert "patch-id-match" not in found  # git's patch id sees the other context
    assert found["changes-match"]["commit"] == landing
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP), p.reason
    assert "the same changed lines in the same functions, with other context" in p.reason
    assert p.upstream_commits is not None
    assert (p.upstream_commits[0]["sha"], p.upstream_commits[0]["pr"]) == (landing, 1631)
    assert p.upstream_commits[0]["how"] == "changes"


def test_a_removed_line_added_back_after_the_port_keeps_it_a_review(ported, tmp_path):
    up, patches, base, landing = ported
    back = runner(MAIN_NOTE, True).replace(
        "def prefill(batch):\n", "def prefill(batch):\n    limit = compute_limit(batch)\n"
    )
    again = up.commit("Limit prefill too (#1700)", {"runner.py": back})
    p = check(up, patches, tmp_path, base=base)
    found = {e["signal"]: e for e in p.evidence}
    assert found["changes-match"]["commit"] == landing
    assert found["removed-lines-added-back"]["commits"] == [again]
    assert p.decision == Decision.REVIEW


def test_the_same_lines_changed_in_another_function_are_no_landing(make_repo, tmp_path):
    """Upstream made the same edit to prefill, not decode: no match, and nothing drops."""
    down = make_repo("downstream")
    down.commit("Release line", {"runner.py": runner(RELEASE_NOTE, False)})
    down.commit(TITLE, {"runner.py": runner(RELEASE_NOTE, True)})
    patches = [
        PatchInput(str(p), p.read_bytes())
        for p in down.format_patch("HEAD~1..HEAD", tmp_path / "patches")
    ]
    up = make_repo("upstream")
    both = runner(MAIN_NOTE, False).replace(
        "    return run(batch.tokens, None)\n",
        "    tokens = batch.tokens\n    limit = compute_limit(batch)\n    return run(tokens, limit)\n",
    )
    up.commit("Runner", {"runner.py": both})
    base = up.head("main")
    elsewhere = both.replace(
        "    limit = compute_limit(batch)\n    return run(tokens, limit)\n",
        "    limit = compute_limit(batch, cap=MAX_DECODE_BLOCKS)\n    check_limit(limit)\n"
        "    return run(tokens, limit)\n",
        1,
    )
    up.commit(f"Cap prefill ({TITLE}) (#1632)", {"runner.py": elsewhere})
    p = check(up, patches, tmp_path, base=base)
    assert "changes-match" not in {e["signal"] for e in p.evidence}
    assert p.decision != Decision.DROP
