"""Issue 35, reviews well spent: hunks a head "has" only because it never had the code the patch
edits are not upstream's version of the patch.

On vllm-gaudi's release branches, a main commit checked on a release tip often finds a few of
its hunks "present": a removal of lines main added after the fork (the branch never had them,
so the hunk's post-image is there), or a line the branch already had. Nothing on the branch
took the change, yet carry sent 19 such patches to review as `partial` or `upstream-version`
(e3966cce67 "fix ernie45-vl test" on releases/v0.15.1 to v0.19.1, 222c241fb6, b83b76d842,
ef4400bb3c, cac9b8ae87 "Back the latest transformers version", ...). When the range's history
was read whole and no commit in it brought any hunk the head has, and none matches the patch,
the patch is kept (a conflict to rebase by hand, or a 3-way refresh): keeping is never a wrong
drop. The counter-case, where a commit of the range did take a hunk, stays a review."""

from __future__ import annotations

from bot.core.classify import Decision, Status
from bot.git.engine import PatchInput
from harness.gitrepo import RepoBuilder
from tests.support.engine import check

ALPHA = "def alpha():\n    value = compute_alpha_value()\n    return value\n"
PAD = "".join(f"SETTING_{i} = configured_setting({i})\n" for i in range(12))
BETA = "def beta():\n    result = compute_beta_result()\n    return result\n"
LOG = "    log_alpha_details(value, verbose=True)\n"
FORK = ALPHA + "\n\n" + PAD + "\n\n" + BETA
LOGGED = FORK.replace("compute_alpha_value()\n", "compute_alpha_value()\n" + LOG)
FIXED = FORK.replace("compute_beta_result()", "compute_beta_result(strict=True)")
RELEASE = FORK.replace("    return result\n", "    return normalize_result(result)\n")


def signals(report) -> dict[str, dict]:
    return {e["signal"]: e for e in report.evidence}


def release_line(make_repo, tmp_path, *, took_removal: bool) -> tuple[RepoBuilder, PatchInput]:
    """main and a release branch forked before main added a log line; the patch, made on main,
    removes that log line again and makes beta strict. The release edits beta's return line
    (the patch conflicts there). With `took_removal`, the release had ported the log line and
    then removed it in its own commit: a hunk of the patch taken in range."""
    up = make_repo("upstream")
    up.commit("Add alpha and beta", {"mod.py": FORK})
    up.checkout("main", new_branch="release")
    if took_removal:
        up.commit("Port: log alpha details", {"mod.py": LOGGED})
        up.commit("Drop the alpha log line again", {"mod.py": FORK})
    up.commit("Normalize beta's result on the release", {"mod.py": RELEASE})
    up.checkout("main")
    up.commit("Log alpha details", {"mod.py": LOGGED})
    up.commit("Strict beta, alpha log line removed", {"mod.py": FIXED})
    (path,) = up.format_patch("main~1..main", tmp_path / "patches")
    return up, PatchInput(path.name, path.read_bytes())


def test_hunks_the_release_never_changed_are_no_landing(make_repo, tmp_path):
    up, patch = release_line(make_repo, tmp_path, took_removal=False)
    p = check(up, [patch], tmp_path, head="release")
    states = [h["state"] for h in signals(p)["hunks"]["hunks"]]
    assert states == ["applied", "absent"]  # the log line's removal looks done
    assert (p.status, p.decision) == (Status.CONFLICT, Decision.KEEP), p.reason
    assert "no upstream commit in range brought them" in p.reason
    assert signals(p)["present-hunks-predate-range"]["hunks"] == 1
    (work,) = p.conflict["hunks"]  # beta's hunk, the one left to rebase by hand
    assert "compute_beta_result(strict=True)" in work["diff"]


def test_a_hunk_a_commit_of_the_range_took_stays_a_review(make_repo, tmp_path):
    up, patch = release_line(make_repo, tmp_path, took_removal=True)
    p = check(up, [patch], tmp_path, head="release")
    states = [h["state"] for h in signals(p)["hunks"]["hunks"]]
    assert states == ["applied", "absent"]
    assert (p.status, p.decision) == (Status.PARTIAL, Decision.REVIEW), p.reason
    assert "present-hunks-predate-range" not in signals(p)
    assert [c["subject"] for c in p.upstream_commits] == ["Drop the alpha log line again"]


STEPS = (
    "    prepare_gamma_inputs(batch)\n"
    "    gamma_buffers = allocate_gamma_buffers(batch)\n"
    "    warm_gamma_kernels(gamma_buffers)\n"
    "    record_gamma_shapes(gamma_buffers, batch)\n"
)
GAMMA = (
    "".join(f"LIMIT_{i} = configured_limit({i})\n" for i in range(8))
    + "\n\ndef gamma(batch):\n"
    + STEPS
    + "    return run_gamma(batch)\n"
)


def reverted_on_main(make_repo, tmp_path, *, tuned: int) -> tuple[RepoBuilder, PatchInput]:
    """Like vllm-gaudi dd47274258 (a revert on main of a change the release never had): main
    removed gamma's set-up steps after the fork; the patch puts them back and makes beta
    strict. The release always had the steps; its own commit tunes `tuned` of the four (and
    edits beta's return line, where the patch conflicts)."""
    up = make_repo("upstream")
    up.commit("Add alpha, beta and gamma", {"mod.py": FORK + "\n\n" + GAMMA})
    up.checkout("main", new_branch="release")
    steps = STEPS.splitlines(keepends=True)
    for i in range(tuned):
        steps[i] = steps[i].replace(")\n", ", tuned=True)\n")
    edited = (FORK + "\n\n" + GAMMA.replace(STEPS, "".join(steps))).replace(
        "return result\n", "return ok(result)\n"
    )
    up.commit("Release tuning", {"mod.py": edited})
    up.checkout("main")
    up.commit("Drop gamma's set-up", {"mod.py": FORK + "\n\n" + GAMMA.replace(STEPS, "")})
    up.commit("Revert: gamma set-up; strict beta", {"mod.py": FIXED + "\n\n" + GAMMA})
    (path,) = up.format_patch("main~1..main", tmp_path / "patches")
    return up, PatchInput(path.name, path.read_bytes())


def test_one_line_of_a_hunk_edited_on_the_release_is_no_landing(make_repo, tmp_path):
    up, patch = reverted_on_main(make_repo, tmp_path, tuned=1)
    p = check(up, [patch], tmp_path, head="release")
    states = [h["state"] for h in signals(p)["hunks"]["hunks"]]
    assert states == ["absent", "similar"]  # the release has 3 of the 4 steps as is
    assert (p.status, p.decision) == (Status.CONFLICT, Decision.KEEP), p.reason
    assert "present-hunks-predate-range" in signals(p)


def test_most_of_a_hunk_written_on_the_release_is_a_landing(make_repo, tmp_path):
    """Counter-case: the release commit wrote 3 of the 4 steps as the head has them."""
    up, patch = reverted_on_main(make_repo, tmp_path, tuned=3)
    p = check(up, [patch], tmp_path, head="release")
    states = [h["state"] for h in signals(p)["hunks"]["hunks"]]
    assert states == ["absent", "similar"]
    assert (p.status, p.decision) == (Status.PARTIAL, Decision.REVIEW), p.reason
    assert "present-hunks-predate-range" not in signals(p)
    assert [c["subject"] for c in p.upstream_commits] == ["Release tuning"]


def test_without_a_range_nothing_is_assumed(make_repo, tmp_path):
    """Without a From line or base there is no range base to have been that way at: review."""
    up, patch = release_line(make_repo, tmp_path, took_removal=False)
    bare = PatchInput(patch.name, patch.data.split(b"\n", 1)[1])
    p = check(up, [bare], tmp_path, head="release")
    assert p.decision == Decision.REVIEW, p.reason
    assert "present-hunks-predate-range" not in signals(p)
