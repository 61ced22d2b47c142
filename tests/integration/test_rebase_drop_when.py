"""Issue 35: carry's rebase reads the fix page's upstream PR as a declared drop condition. Real
git, real Redis, carry's rebase in this process; the test upstream's page names
upstream-org/engine#7."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.carry_env import BODY, SERIES, one_fix_in_this_process
from workers import runtime as runtime_module
from workers.rebase import rebase_series

# Upstream's review-edited version of the carried fix (compute(10, safe=True)): its neighbours
# made safe too, so the patch neither applies nor reverse-applies, and the head has its line.
REVIEWED = {
    "mod.py": BODY.replace("compute(9)", "compute(9, safe=True)")
    .replace("compute(10)", "compute(10, safe=True)")
    .replace("compute(11)", "compute(11, safe=True)")
}


@pytest.mark.parametrize("opted_in", [False, True])
def test_a_merged_pr_the_fix_page_declares_is_reviewed_or_dropped_as_the_policy_says(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, opted_in: bool
) -> None:
    policy = {"policy": {"drop_when_merged": True}} if opted_in else {}
    with one_fix_in_this_process(tmp_path, redis_url, monkeypatch, **policy) as carry:
        runtime_module.reset()
        rt = runtime_module.runtime()
        merged = carry.upstream.commit("Make values 9 to 11 safe (#7)", REVIEWED)
        assert rebase_series(rt, SERIES, merged, "refs/heads/main") is not None
        (patch,) = carry.state().patches
    assert patch.status == "upstream-version"
    assert patch.decision == ("drop" if opted_in else "review")
    assert patch.reason.startswith(f"merged upstream as #7 in {merged[:12]} (declared in the fix")
    (declared,) = [e for e in patch.evidence if e["signal"] == "declared-pr"]
    assert declared["pr"] == "upstream-org/engine#7" and declared["merge_commit"] == merged
