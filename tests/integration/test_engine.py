"""The patch engine on real git repositories built in tmp_path."""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

import pytest

from bot.core.classify import Decision, Status
from bot.git.engine import Engine, LinkedPr, PatchInput
from bot.git.mirror import Mirror
from harness.gitrepo import RepoBuilder, git
from tests.support.engine import BODY, FUNC
from tests.support.engine_checks import check, only, patches_of, signals


@pytest.fixture
def up(make_repo) -> RepoBuilder:
    repo = make_repo("upstream")
    repo.commit("base", {"mod.py": BODY, "other.py": "alpha = first_value()\nbeta = 2\n"})
    return repo


def carried(up: RepoBuilder, tmp_path: Path, files: dict, message: str = "Fix the value") -> list:
    """A downstream patch made on a branch from main, then main is checked out again."""
    up.checkout("main", new_branch=f"carry-{len(list(tmp_path.iterdir()))}")
    up.commit(message, files)
    patches = patches_of(up, "main..HEAD", tmp_path / f"p{len(list(tmp_path.iterdir()))}")
    up.checkout("main")
    return patches


def test_applies_as_is_keeps_the_file_byte_identical(up, tmp_path):
    patches = carried(
        up, tmp_path, {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
    )
    report = check(up, "main", patches, tmp_path)
    p = only(report)
    assert (p.status, p.decision) == (Status.APPLIES, Decision.KEEP)
    assert p.refreshed == patches[0].data
    assert not p.changed
    assert report.head == up.head("main")


def test_applies_moved_refreshes_only_context_and_is_idempotent(up, tmp_path):
    patches = carried(
        up, tmp_path, {"mod.py": BODY.replace("compute(20)", "compute(20, safe=True)")}
    )
    up.commit("upstream adds a header", {"mod.py": "import math\n\n" + BODY})
    p = only(check(up, "main", patches, tmp_path))
    assert (p.status, p.decision) == (Status.APPLIES_MOVED, Decision.KEEP)
    assert p.changed and p.refreshed is not None and p.refreshed != patches[0].data
    assert "-@@ -17,7 +17,7 @@" in p.interdiff and "+@@ -19,7 +19,7 @@" in p.interdiff
    again = only(check(up, "main", [PatchInput("refreshed.patch", p.refreshed)], tmp_path))
    assert again.status == Status.APPLIES
    assert again.refreshed == p.refreshed  # the refreshed file is stable: no diff, no push


def test_regeneration_is_deterministic_across_runs(up, tmp_path):
    patches = carried(up, tmp_path, {"mod.py": BODY.replace("compute(20)", "compute(21)")})
    up.commit("shift", {"mod.py": "# header\n" + BODY})
    first = only(check(up, "main", patches, tmp_path / "a"))
    second = only(check(up, "main", patches, tmp_path / "b"))
    assert first.refreshed == second.refreshed
    # A patch that applied at an offset is renumbered: only hunk headers and index lines move.
    old, new = patches[0].data.splitlines(), (first.refreshed or b"").splitlines()
    differing = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    assert differing and all(a[:2] == b[:2] and a[:2] in (b"@@", b"in") for a, b in differing)


def test_contained_when_upstream_took_the_same_change(up, tmp_path):
    change = {"mod.py": BODY.replace("compute(5)", "compute(5, fast=True)")}
    patches = carried(up, tmp_path, change)
    up.commit("Upstream fix", change)
    p = only(check(up, "main", patches, tmp_path))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)
    assert signals(p)["reverse-apply"]["result"] == "ok"
    assert p.refreshed is None


def test_contained_when_upstream_squashed_it_with_more(up, tmp_path):
    patches = carried(up, tmp_path, {"mod.py": BODY.replace("compute(5)", "compute(5, fast=True)")})
    bigger = BODY.replace("compute(5)", "compute(5, fast=True)").replace("compute(30)", "c(30)")
    up.commit("Squash: fix and cleanups (#42)", {"mod.py": bigger, "new.py": "x = 1\n"})
    p = only(check(up, "main", patches, tmp_path))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)


def test_contained_with_3way_when_context_also_changed(up, tmp_path):
    change = BODY.replace("compute(5)", "compute(5, fast=True)")
    patches = carried(up, tmp_path, {"mod.py": change})
    up.commit("upstream fix plus context edit", {"mod.py": change.replace("compute(3)", "c3()")})
    p = only(check(up, "main", patches, tmp_path))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)
    sig = signals(p)
    assert sig["reverse-apply"]["result"] == "failed"
    assert sig["3way-apply"] == {"signal": "3way-apply", "result": "clean", "unchanged": True}


def test_change_present_with_adjacent_edit_goes_to_review_not_drop(up, tmp_path):
    change = BODY.replace("compute(5)", "compute(5, fast=True)")
    patches = carried(up, tmp_path, {"mod.py": change})
    up.commit("upstream fix plus neighbour edit", {"mod.py": change.replace("compute(4)", "c4()")})
    p = only(check(up, "main", patches, tmp_path))
    assert (p.status, p.decision) == (Status.UPSTREAM_VERSION, Decision.REVIEW)


def test_upstream_version_with_review_edits_is_never_dropped(up, tmp_path):
    mine = BODY.replace(
        "value_7 = compute(7)\n",
        "value_7 = compute(7)\nclamp_value(value_7, limit=99)\nlog_value(value_7)\n",
    )
    patches = carried(up, tmp_path, {"mod.py": mine})
    theirs = mine.replace("limit=99", "limit=LIMIT")
    up.commit("Clamp value 7 (reviewed)", {"mod.py": theirs})
    p = only(check(up, "main", patches, tmp_path))
    assert p.decision == Decision.REVIEW
    assert p.status in (Status.UPSTREAM_VERSION, Status.PARTIAL)


def test_duplicate_code_from_a_successful_3way_is_not_applies(up, tmp_path):
    """Upstream added the same function elsewhere: the patch still applies, but would duplicate."""
    patches = carried(
        up,
        tmp_path,
        {"mod.py": BODY.replace("value_3 = compute(3)\n", "value_3 = compute(3)\n" + FUNC)},
    )
    up.commit("Add frobnicate near the end", {"mod.py": BODY + "\n" + FUNC})
    p = only(check(up, "main", patches, tmp_path))
    assert (p.status, p.decision) == (Status.UPSTREAM_VERSION, Decision.REVIEW)
    assert signals(p)["added-lines-already-in-head"]["duplicate"] is True


def test_partial_when_upstream_took_one_file_of_two(up, tmp_path):
    patches = carried(
        up,
        tmp_path,
        {
            "mod.py": BODY.replace("compute(12)", "compute(12, strict=True)"),
            "other.py": "alpha = first_value(strict=True)\nbeta = 2\n",
        },
    )
    up.commit(
        "take only mod.py", {"mod.py": BODY.replace("compute(12)", "compute(12, strict=True)")}
    )
    p = only(check(up, "main", patches, tmp_path))
    assert (p.status, p.decision) == (Status.PARTIAL, Decision.REVIEW)
    states = {h["file"]: h["state"] for h in signals(p)["hunks"]["hunks"]}
    assert states == {"mod.py": "applied", "other.py": "pending"}


def test_conflict_names_hunks_commits_and_reproduces(up, tmp_path):
    patches = carried(
        up, tmp_path, {"mod.py": BODY.replace("compute(25)", "compute(25, mine=True)")}
    )
    upstream_change = up.commit(
        "Rework value 25", {"mod.py": BODY.replace("compute(25)", "other(25)")}
    )
    up.commit("Unrelated", {"other.py": "alpha = 1\n"})
    base = up.head("main~2")
    report = check(up, "main", patches, tmp_path, base=base)
    p = only(report)
    assert (p.status, p.decision) == (Status.CONFLICT, Decision.KEEP)
    assert p.refreshed is None  # a conflicted result is never written as a refreshed patch
    hunk = p.conflict["hunks"][0]
    assert hunk["file"] == "mod.py" and hunk["hunk"].startswith("@@ -22,7")
    assert [c["sha"] for c in hunk["upstream_commits"]] == [upstream_change]
    commands = p.conflict["reproduce"]
    assert commands[-1].startswith("git am -3 ") and patches[0].name in commands[-1]
    # The commands really reproduce it: git am -3 stops on this patch.
    work = tmp_path / "repro"
    work.mkdir()
    script = " && ".join(commands[:-1]) + " && " + commands[-1]
    proc = subprocess.run(
        ["bash", "-c", script],
        cwd=work,
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
            "HOME": str(tmp_path),
        },
    )
    assert proc.returncode != 0 and "Patch failed" in proc.stdout + proc.stderr


def test_conflict_is_not_resolved_with_ours_or_theirs(up, tmp_path):
    """Failure story 2: never silently overwrite newer upstream code."""
    patches = carried(
        up, tmp_path, {"mod.py": BODY.replace("compute(8)", "compute(8, legacy=True)")}
    )
    up.commit("newer upstream", {"mod.py": BODY.replace("compute(8)", "compute_v2(8)")})
    report = check(up, "main", patches, tmp_path)
    assert only(report).status == Status.CONFLICT
    assert report.result_tree == git(up.path, "rev-parse", "main^{tree}")  # head untouched


def test_invalid_patch_file_names_the_line(up, tmp_path):
    patches = carried(up, tmp_path, {"mod.py": BODY.replace("compute(9)", "compute(99)")})
    broken = patches[0].data.replace(b"@@ -6,7 +6,7 @@", b"@@ -6,9 +6,7 @@")
    garbage = PatchInput("garbage.patch", b"this is not a patch\n")
    report = check(up, "main", [PatchInput("broken.patch", broken), garbage], tmp_path)
    first, second = report.patches
    assert first.status == Status.INVALID and "hunk" in first.reason and "line" in first.reason
    assert second.status == Status.INVALID and "not a patch" in second.reason
    assert {first.decision, second.decision} == {Decision.REVIEW}


def test_revert_upstream_brings_the_patch_back(up, tmp_path):
    """A patch-id match alone is not enough: upstream took it and reverted it."""
    change = {"mod.py": BODY.replace("compute(15)", "compute(15, cached=True)")}
    patches = carried(up, tmp_path, change, message="Cache value 15")
    base = up.head("main")
    taken = up.commit("Cache value 15", change)
    up.git("revert", "--no-edit", taken)
    p = only(check(up, "main", patches, tmp_path, base=base))
    assert (p.status, p.decision) == (Status.APPLIES, Decision.KEEP)
    match = signals(p)["patch-id-match"]
    assert match["commit"] == taken and match["reverted_by"] == up.head("main")


def test_reapplied_after_revert_is_contained(up, tmp_path):
    change = {"mod.py": BODY.replace("compute(15)", "compute(15, cached=True)")}
    patches = carried(up, tmp_path, change, message="Cache value 15")
    base = up.head("main")
    taken = up.commit("Cache value 15", change)
    up.git("revert", "--no-edit", taken)
    up.git("revert", "--no-edit", "HEAD")
    p = only(check(up, "main", patches, tmp_path, base=base))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)


def test_merged_pr_not_in_head_is_not_taken_as_merged(up, tmp_path):
    """Failure story 14: only a merge commit reachable from the watched head counts."""
    patches = carried(up, tmp_path, {"mod.py": BODY.replace("compute(2)", "compute(2, q=1)")})
    up.checkout("main", new_branch="merge-queue")
    queued = up.commit(
        "Merge queue build of the PR", {"mod.py": BODY.replace("compute(2)", "compute(2, q=1)")}
    )
    up.checkout("main")
    links = {Path(patches[0].name).name: [LinkedPr("o/r#7", "merged", queued)]}
    p = only(check(up, "main", patches, tmp_path, links=links))
    assert (p.status, p.decision) == (Status.APPLIES, Decision.KEEP)
    assert signals(p)["linked-pr"]["ancestor_of_head"] is False


def test_merged_pr_whose_content_differs_needs_review(up, tmp_path):
    patches = carried(up, tmp_path, {"mod.py": BODY.replace("compute(2)", "compute(2, q=1)")})
    merged = up.commit("Merge PR 7 (a different approach)", {"other.py": "alpha = 0\nbeta = 2\n"})
    links = {Path(patches[0].name).name: [LinkedPr("o/r#7", "merged", merged)]}
    p = only(check(up, "main", patches, tmp_path, links=links))
    assert (p.status, p.decision) == (Status.UPSTREAM_VERSION, Decision.REVIEW)


def test_series_patch_n_applies_on_base_plus_earlier_patches(up, tmp_path):
    up.checkout("main", new_branch="series")
    up.commit("one", {"mod.py": BODY.replace("compute(3)", "compute(3, a=1)")})
    up.commit("two", {"mod.py": BODY.replace("compute(3)", "compute(3, a=1, b=2)")})
    patches = patches_of(up, "main..series", tmp_path / "series")
    up.checkout("main")
    report = check(up, "main", patches, tmp_path, commit_result=True)
    assert [p.status for p in report.patches] == [Status.APPLIES, Status.APPLIES]
    assert git(up.path, "show", f"{report.result_commit}:mod.py") == git(
        up.path, "show", "series:mod.py"
    )
    up.commit("upstream took patch one", {"mod.py": BODY.replace("compute(3)", "compute(3, a=1)")})
    report = check(up, "main", patches, tmp_path)
    assert [(p.status, p.decision) for p in report.patches] == [
        (Status.CONTAINED, Decision.DROP),
        (Status.APPLIES, Decision.KEEP),
    ]


def test_crlf_files_apply_cleanly(make_repo, tmp_path):
    """Failure story 11: no false conflict on CRLF line endings."""
    repo = make_repo("crlf")
    text = "".join(f"line {i}\r\n" for i in range(30))
    repo.commit("base", {"win.txt": text})
    patches = carried(repo, tmp_path, {"win.txt": text.replace("line 12\r\n", "line twelve\r\n")})
    repo.commit("move", {"win.txt": "first\r\n" + text})
    p = only(check(repo, "main", patches, tmp_path))
    assert (p.status, p.decision) == (Status.APPLIES_MOVED, Decision.KEEP)
    assert b"+line twelve\r\n" in (p.refreshed or b"")


@pytest.mark.parametrize(
    "files",
    [
        pytest.param({"new_file.py": "brand_new = True\n"}, id="new-file"),
        pytest.param({"other.py": None}, id="deleted-file"),
        pytest.param({"logo.bin": bytes(range(256)) * 4}, id="binary-new"),
    ],
)
def test_file_level_changes_apply_and_are_detected_as_contained(up, tmp_path, files):
    patches = carried(up, tmp_path, files)
    assert only(check(up, "main", patches, tmp_path)).status == Status.APPLIES
    up.commit("upstream does the same", files)
    p = only(check(up, "main", patches, tmp_path))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)


def test_binary_modification_rename_and_mode_change(up, tmp_path):
    up.commit("add blob and script", {"data.bin": bytes(range(200)), "run.sh": "echo hi\n"})
    up.checkout("main", new_branch="meta")
    up.write("data.bin", bytes(reversed(range(200))))
    up.git("mv", "other.py", "renamed.py")
    (up.path / "run.sh").chmod(0o755)
    up.commit("binary, rename and mode")
    patches = patches_of(up, "main..meta", tmp_path / "meta")
    up.checkout("main")
    assert b"GIT binary patch" in patches[0].data and b"rename from other.py" in patches[0].data
    report = check(up, "main", patches, tmp_path, commit_result=True)
    assert only(report).status == Status.APPLIES
    tree = git(up.path, "ls-tree", "-r", report.result_commit or "")
    assert "100755 blob" in tree and "renamed.py" in tree and "other.py" not in tree
    assert git(up.path, "rev-parse", f"{report.result_commit}:data.bin") == git(
        up.path, "rev-parse", "meta:data.bin"
    )


def test_empty_patch_is_classified_not_swallowed(up, tmp_path):
    """Failure story 4: an empty patch is reported with evidence, never a silent success."""
    empty = PatchInput(
        "0001-empty.patch",
        b"From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001\n"
        b"From: Dev <dev@example.com>\nDate: Thu, 1 Jan 2026 00:00:00 +0000\n"
        b"Subject: [PATCH] Marker commit\n\nNothing to see.\n",
    )
    p = only(check(up, "main", [empty], tmp_path))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.REVIEW)
    assert signals(p)["empty-patch"]["detail"] == "no file is changed"


def test_extra_headers_non_utf8_and_plain_diff(up, tmp_path):
    latin = "caf\xe9 = 'cr\xe8me'\n".encode("latin-1")
    up.commit("latin-1 file", {"legacy.py": latin})
    patches = carried(up, tmp_path, {"legacy.py": latin + "ol\xe9 = 1\n".encode("latin-1")})
    data = patches[0].data.replace(
        b"Subject: [PATCH]",
        b"X-Mailer: hand\nCc: a@b.example\nMessage-Id: <1@x>\nSubject: [PATCH v2 1/1]",
    )
    plain = subprocess.run(
        ["diff", "-u", "--label", "a/mod.py", "--label", "b/mod.py", "-", str(tmp_path / "new.py")],
        input=BODY.encode(),
        capture_output=True,
        check=False,
    )
    (tmp_path / "new.py").write_text(BODY.replace("compute(33)", "compute(33, z=0)"))
    plain = subprocess.run(
        ["diff", "-u", "--label", "a/mod.py", "--label", "b/mod.py", "-", str(tmp_path / "new.py")],
        input=BODY.encode(),
        capture_output=True,
        check=False,
    )
    report = check(
        up,
        "main",
        [PatchInput("mail.patch", data), PatchInput("plain.diff", plain.stdout)],
        tmp_path,
    )
    assert [p.status for p in report.patches] == [Status.APPLIES, Status.APPLIES]
    assert (
        report.patches[0].subject == "latin-1 file" or report.patches[0].subject == "Fix the value"
    )


@pytest.mark.parametrize("head_kind", ["tag", "sha", "short-sha", "pull-ref", "branch-expression"])
def test_head_can_be_any_revision(up, tmp_path, head_kind):
    patches = carried(up, tmp_path, {"mod.py": BODY.replace("compute(1)", "compute(1, x=1)")})
    target = up.commit("target", {"other.py": "alpha = 3\n"})
    up.commit("later", {"other.py": "alpha = 4\n"})
    up.git("tag", "v1.0", target)
    up.git("update-ref", "refs/pull/7/head", target)
    rev = {
        "tag": "v1.0",
        "sha": target,
        "short-sha": target[:10],
        "pull-ref": "refs/pull/7/head",
        "branch-expression": "main~1",
    }[head_kind]
    report = check(up, rev, patches, tmp_path)
    assert report.head == target
    assert only(report).status == Status.APPLIES


def test_source_repository_is_never_changed(up, tmp_path):
    patches = carried(up, tmp_path, {"mod.py": BODY.replace("compute(6)", "compute(66)")})
    up.write("dirty.txt", "uncommitted\n")
    before = (
        git(up.path, "for-each-ref"),
        (up.path / ".git" / "config").read_bytes(),
        git(up.path, "status", "--porcelain"),
    )
    check(up, "main", patches, tmp_path)
    after = (
        git(up.path, "for-each-ref"),
        (up.path / ".git" / "config").read_bytes(),
        git(up.path, "status", "--porcelain"),
    )
    assert before == after


def test_mirror_is_bare_and_has_no_work_tree(up, tmp_path):
    patches = carried(up, tmp_path, {"mod.py": BODY.replace("compute(6)", "compute(66)")})
    mirror = Mirror(str(up.path), tmp_path / "cache")
    Engine(mirror).check("main", patches)
    assert git(mirror.path, "rev-parse", "--is-bare-repository") == "true"
    assert not any(p.name == "mod.py" for p in mirror.path.rglob("*"))


def test_engine_writes_no_files_outside_the_mirror(up, tmp_path, monkeypatch):
    """A conflicted or file-adding 3-way apply must not spill files into the current directory."""
    patches = carried(
        up,
        tmp_path,
        {"mod.py": BODY.replace("compute(8)", "compute(8, a=1)"), "added.py": "x = 1\n"},
    )
    up.commit(
        "conflicting upstream",
        {"mod.py": BODY.replace("compute(8)", "c8()"), "added.py": "x = 2\n"},
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert only(check(up, "main", patches, tmp_path)).status == Status.CONFLICT
    assert list(cwd.iterdir()) == []


def test_removal_reverse_applies_but_code_moved_elsewhere_goes_to_review(up, tmp_path):
    """Reverse-apply alone must not drop a removal whose code upstream moved, not deleted."""
    block = "def legacy_path(x):\n    warn_legacy(x)\n    return convert_legacy(x)\n"
    up.commit(
        "add legacy",
        {"mod.py": BODY.replace("value_5 = compute(5)\n", "value_5 = compute(5)\n" + block)},
    )
    with_block = up.read("mod.py").decode()
    patches = carried(up, tmp_path, {"mod.py": with_block.replace(block, "")})
    up.commit("move legacy to the end", {"mod.py": with_block.replace(block, "") + "\n" + block})
    p = only(check(up, "main", patches, tmp_path))
    assert (p.status, p.decision) == (Status.UPSTREAM_VERSION, Decision.REVIEW)
    assert signals(p)["removed-lines-still-in-head"]["suspicious"] is True


def test_removing_code_the_head_never_had_is_not_a_drop(up, tmp_path):
    """A head that never had the removed code did not 'take' the removal: a human confirms."""
    fork = up.head()
    up.checkout("main", new_branch="release")
    up.commit("release work", {"other.py": "alpha = 9\n"})
    up.checkout("main")
    block = "def workaround(x):\n    cap_blocks(x)\n    return limit_context(x)\n"
    up.commit("add a workaround", {"mod.py": BODY + block})
    removal = patches_of_commit(up, {"mod.py": BODY}, "remove the workaround", tmp_path)
    p = only(check(up, "release", removal, tmp_path))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.REVIEW)
    assert signals(p)["post-image-at-range-base"]["base"] == fork


def test_removing_code_never_had_is_review_even_when_the_context_moved(up, tmp_path):
    """Seen on vllm-gaudi: a main commit reverting docs of a later release, checked on an older
    release branch. The branch never had those lines, but it picked up the context edit, so the
    exact reverse-apply at the range base fails; the removed lines being absent there decides."""
    fork = up.head()
    context_edit = BODY.replace("compute(39)", "compute(39, v=2)")
    up.checkout("main", new_branch="release")
    up.commit("release: pick the context edit", {"mod.py": context_edit})
    up.checkout("main")
    up.commit("context edit", {"mod.py": context_edit})
    block = "def release_notes_v9():\n    describe_the_release(9)\n    return list_models(9)\n"
    up.commit("add v9 notes", {"mod.py": context_edit + block})
    removal = patches_of_commit(up, {"mod.py": context_edit}, "Revert v9 notes", tmp_path)
    p = only(check(up, "release", removal, tmp_path))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.REVIEW)
    assert "post-image-at-range-base" not in signals(p)  # the exact check cannot see it
    assert signals(p)["removed-code-never-in-range"] == {
        "signal": "removed-code-never-in-range",
        "base": fork,
        "removed_lines": 3,
        "never_seen": 3,
        "history_complete": True,
    }


def test_removing_code_upstream_added_and_removed_in_range_is_a_drop(up, tmp_path):
    """The counterpart: the branch had the lines (added after the range base) and removed
    them itself, so it did take the removal."""
    context_edit = BODY.replace("compute(39)", "compute(39, v=2)")
    block = "def release_notes_v9():\n    describe_the_release(9)\n    return list_models(9)\n"
    up.checkout("main", new_branch="release")
    up.commit("release: context edit", {"mod.py": context_edit})
    up.commit("release: add v9 notes", {"mod.py": context_edit + block})
    up.commit("release: drop v9 notes", {"mod.py": context_edit})
    up.checkout("main")
    up.commit("context edit", {"mod.py": context_edit})
    up.commit("add v9 notes", {"mod.py": context_edit + block})
    removal = patches_of_commit(up, {"mod.py": context_edit}, "Revert v9 notes", tmp_path)
    p = only(check(up, "release", removal, tmp_path))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)
    assert "removed-code-never-in-range" not in signals(p)


def patches_of_commit(up, files, message, tmp_path):
    """A format-patch of a commit made on main (its From line names a commit upstream has)."""
    sha = up.commit(message, files)
    return [
        PatchInput(str(p), p.read_bytes())
        for p in up.format_patch(f"{sha}~1..{sha}", tmp_path / "one")
    ]


def test_upstream_merging_the_patch_commit_itself_is_a_drop(up, tmp_path):
    """The From line names a commit upstream then merged unchanged: that is containment."""
    up.checkout("main", new_branch="topic")
    sha = up.commit(
        "Make value 4 safe", {"mod.py": BODY.replace("compute(4)", "compute(4, safe=True)")}
    )
    patch = [
        PatchInput(str(p), p.read_bytes())
        for p in up.format_patch(f"{sha}~1..{sha}", tmp_path / "own")
    ]
    up.checkout("main")
    up.git("merge", "-q", "--no-ff", "-m", "Merge topic", "topic")
    p = only(check(up, "main", patch, tmp_path))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)


def test_removal_only_patch_without_any_history_goes_to_review(up, tmp_path):
    """With no base and an unknown From commit, absent code proves nothing: review, not drop."""
    block = "def workaround(x):\n    cap_blocks(x)\n    return limit_context(x)\n"
    data = (
        b"From: Dev <dev@example.com>\nSubject: [PATCH] remove the workaround\n\n---\n"
        b"diff --git a/mod.py b/mod.py\n--- a/mod.py\n+++ b/mod.py\n@@ -39,5 +39,2 @@\n"
        b" value_39 = compute(39)\n value_40 = compute(40)\n"
        + b"".join(b"-" + line.encode() + b"\n" for line in block.splitlines())
    )
    p = only(check(up, "main", [PatchInput("removal.patch", data)], tmp_path))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.REVIEW)
    assert "removal-without-history" in signals(p)


def test_mostly_removal_without_history_goes_to_review(up, tmp_path):
    """One added line is not enough to show the change itself when nothing anchors history."""
    block = "def workaround(x):\n    cap_blocks(x)\n    return limit_context(x)\n"
    data = (
        b"From: Dev <dev@example.com>\nSubject: [PATCH] replace the workaround\n\n---\n"
        b"diff --git a/mod.py b/mod.py\n--- a/mod.py\n+++ b/mod.py\n@@ -39,5 +39,3 @@\n"
        b" value_39 = compute(39)\n value_40 = compute(40)\n"
        + b"".join(b"-" + line.encode() + b"\n" for line in block.splitlines())
        + b"+workaround = None\n"
    )
    up.commit("upstream line", {"mod.py": BODY + "workaround = None\n"})
    p = only(check(up, "main", [PatchInput("removal.patch", data)], tmp_path))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.REVIEW)
    assert signals(p)["removal-without-history"]["added_lines"] == 1


def test_remote_refs_work_on_a_cold_cache(up, tmp_path):
    """The poller's first ls-remote happens before any fetch created the mirror."""
    refs = Mirror(str(up.path), tmp_path / "cold-cache").remote_refs("refs/heads/main")
    assert refs == {"refs/heads/main": up.head("main")}


def test_one_engine_survives_its_mirror_being_recreated(up, tmp_path):
    """A worker keeps its engine between rebases; the mirror may be re-created meanwhile (by
    damage repair, or another process). Cached answers about its objects must not outlive it."""
    mail = carried(up, tmp_path, {"mod.py": BODY.replace("compute(7)", "compute(7, safe=True)")})
    diff = mail[0].data[mail[0].data.index(b"diff --git") :]  # a plain diff: nothing to widen for
    patches = [PatchInput("fix.diff", diff)]
    up.commit("upstream adds a header", {"mod.py": "import math\n\n" + BODY})
    head = up.head("main")
    mirror = Mirror(str(up.path), tmp_path / "cache")
    engine = Engine(mirror)
    first = engine.check(head, patches, base=up.head("main~1"))
    engine.check(head, patches, base=up.head("main~1"))  # now every answer is cached
    shutil.rmtree(mirror.path)
    mirror.ensure()  # empty again: every object has to be fetched anew
    second = engine.check(head, patches, base=up.head("main~1"))
    engine.close()
    assert [(p.status, p.decision) for p in second.patches] == [
        (p.status, p.decision) for p in first.patches
    ]
    assert first.patches[0].status == Status.APPLIES_MOVED
    assert second.result_tree == first.result_tree
    # The new mirror really holds what the second check read: it was fetched again.
    assert mirror.git.run("cat-file", "-e", f"{head}^{{tree}}", check=False).ok


def test_a_conflict_report_asks_each_files_history_once(up, tmp_path, caplog):
    """Without a base the report names the recent commits that touched each hunk's lines,
    reading the file's recent history once per file and head, not once per conflicting hunk
    (a big patch conflicts in one file many times), and from the commits the touch index names
    rather than a `git log -n20 -- <file>` walk of the whole history (14 s for a 40-file patch
    over 40,000 commits in bench/engine.py's distant row)."""
    mine = BODY
    theirs = BODY
    for n in (5, 20, 35):
        mine = mine.replace(f"compute({n})", f"compute({n}, mine=True)")
        theirs = theirs.replace(f"compute({n})", f"other({n})")
    (made,) = carried(up, tmp_path, {"mod.py": mine})
    # made elsewhere: its commit is not upstream's, so there is no range to read history from
    sha = made.data.split(b" ", 2)[1]
    patches = [PatchInput(made.name, made.data.replace(sha, b"f" * 40, 1))]
    rework = up.commit("Rework three values", {"mod.py": theirs})
    engine = Engine(Mirror(str(up.path), tmp_path / "cache"))
    with caplog.at_level(logging.DEBUG, logger="carry.git"):
        first = only(engine.check("main", patches))
        again = only(engine.check("main", patches))
    assert first.status == again.status == Status.CONFLICT
    hunks = first.conflict["hunks"]
    assert len(hunks) == 3
    assert all([c["sha"] for c in h["upstream_commits"]] == [rework] for h in hunks)
    assert again.conflict["hunks"] == hunks
    asked = [r.getMessage() for r in caplog.records if r.getMessage().startswith("git log")]
    # read from the touch index's answer (no walk of the whole history for one file), once
    assert len([m for m in asked if m.startswith("git log --no-walk=unsorted -U0")]) == 1
    assert not [m for m in asked if m.startswith("git log -n20")]
