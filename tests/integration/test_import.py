"""`carry import` on local repositories: commit ranges, PR refs and patch files become series
that load and apply; every refusal names its reason and leaves the directory byte-identical."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from bot.core.fixpage import is_patch_name
from bot.core.seriesfile import parse_series
from bot.importer import patch_name, slug
from bot.series_loader import load_series
from harness.gitrepo import RepoBuilder, git
from tests.support.carry_import import (
    check_statuses,
    do_import,
    feature,
    run_cli,
    snapshot,
    up,
)
from tests.support.paths import REPO_ROOT

__all__ = ["feature", "up"]  # fixtures, used by name

FIX_NAME = "0002-Fix-the-frobnicator-keep-the-level.patch"
PAGE = """\
# widget-fix

Keep the frobnicator's level.

| Field | Value |
|---|---|
| Affects | every widget |
| Releases | v1.0 |
| Patches | {patches} |
| Upstream | acme/widget#7 (open) |
| Test | none |

## Problem

P.

## Symptom

S.

## Who is affected

W.

## The fix

F.

## Verify

V.
"""
PLE_DIR = REPO_ROOT / "patches" / "ple-offload-pr53899"


def make_series(root: Path, files: dict[str, str | bytes], series_id: str = "widget") -> Path:
    directory = root / "patches" / series_id
    directory.mkdir(parents=True)
    for name, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        (directory / name).write_bytes(data)
    return directory


def awaiting(patches: str = f"{FIX_NAME}: mod.py") -> dict[str, str | bytes]:
    """A series waiting for import whose page already names the fix it expects."""
    return {
        "series": "# awaiting-import: acme/widget#7; run: carry import --series widget --pr x\n",
        "widget-fix.md": PAGE.format(patches=patches),
    }


# ----------------------------------------------------------------------------- sources


def test_range_import_writes_one_patch_per_commit_that_loads_and_applies(
    feature: RepoBuilder, tmp_path: Path, capsys
) -> None:
    both = f"0001-Add-the-helper.patch: helper.py; {FIX_NAME}: mod.py"
    directory = make_series(tmp_path, awaiting(both))
    code, out, err = do_import(
        capsys, directory, tmp_path, "--repo", str(feature.path), "--range", "main..feature"
    )
    assert (code, err) == (0, ""), err
    git_names = [p.name for p in feature.format_patch("main..feature", tmp_path / "fp")]
    assert git_names == ["0001-Add-the-helper.patch", FIX_NAME]  # named like git format-patch

    loaded = load_series(directory)
    assert loaded.patch_names == tuple(git_names)
    assert loaded.base == feature.head("main")
    assert not loaded.is_awaiting_import
    assert "0001-Add-the-helper.patch" in out and "imported 2 patches" in out
    statuses = check_statuses(capsys, directory, feature.path, "main", tmp_path)
    assert statuses == ["applies", "applies"]


def test_range_without_a_page_for_every_patch_needs_page_and_page_records_files(
    feature: RepoBuilder, tmp_path: Path, capsys
) -> None:
    directory = make_series(tmp_path, awaiting())
    before = snapshot(directory)
    args = ("--repo", str(feature.path), "--range", "main..feature")
    code, _, err = do_import(capsys, directory, tmp_path, *args)
    assert code == 2
    assert "0001-Add-the-helper.patch (commit " in err and "--page NAME" in err
    assert snapshot(directory) == before

    code, out, err = do_import(capsys, directory, tmp_path, *args, "--page", "widget-fix")
    assert code == 0, err
    (page,) = load_series(directory).pages
    assert page.files_for("0001-Add-the-helper.patch") == ("helper.py",)
    assert page.files_for(FIX_NAME) == ("mod.py",)
    assert "(added by --page)" in out


def test_pr_import_takes_merge_base_to_pull_head(
    feature: RepoBuilder, tmp_path: Path, capsys
) -> None:
    fork_point = feature.head("main")
    feature.git("update-ref", "refs/pull/7/head", feature.head("feature"))
    feature.git("branch", "-D", "feature")  # only the pull ref names the commits now
    feature.commit("Upstream moves on", {"other.py": "alpha = 2\n"})
    directory = make_series(tmp_path, awaiting())

    code, out, err = do_import(
        capsys,
        directory,
        tmp_path,
        "--pr",
        "acme/widget#7",
        "--repo",
        str(feature.path),
        "--page",
        "widget-fix",
    )
    assert code == 0, err
    loaded = load_series(directory)
    assert loaded.patch_names == ("0001-Add-the-helper.patch", FIX_NAME)
    assert loaded.base == fork_point  # merge-base(main, pull head), not main's tip
    assert "acme/widget#7 on main" in out
    assert check_statuses(capsys, directory, feature.path, "main", tmp_path) == [
        "applies",
        "applies",
    ]


def test_files_import_copies_mail_and_plain_diff_bytes_as_is(
    feature: RepoBuilder, tmp_path: Path, capsys
) -> None:
    mails = feature.format_patch("main..feature", tmp_path / "mails")
    plain = tmp_path / "0007-tune-other.diff"
    plain.write_bytes(b"--- a/other.py\n+++ b/other.py\n@@ -1 +1 @@\n-alpha = 1\n+alpha = 10\n")
    directory = make_series(tmp_path, awaiting())

    files = [str(p) for p in (*mails, plain)]
    code, _, err = do_import(capsys, directory, tmp_path, "--files", *files, "--page", "widget-fix")
    assert code == 0, err
    loaded = load_series(directory)
    assert loaded.patch_names == ("0001-Add-the-helper.patch", FIX_NAME, "0003-tune-other.patch")
    assert loaded.base is None  # plain files do not say what they apply on
    for source, name in zip((*mails, plain), loaded.patch_names, strict=True):
        assert (directory / name).read_bytes() == source.read_bytes()
    statuses = check_statuses(capsys, directory, feature.path, "main", tmp_path)
    assert statuses == ["applies", "applies", "applies"]


def test_commits_and_files_in_one_command_number_the_files_after_the_commits(
    feature: RepoBuilder, tmp_path: Path, capsys
) -> None:
    extra = tmp_path / "tune.patch"
    extra.write_bytes(b"--- a/other.py\n+++ b/other.py\n@@ -1 +1 @@\n-alpha = 1\n+alpha = 4\n")
    directory = make_series(tmp_path, awaiting())
    code, out, err = do_import(
        capsys,
        directory,
        tmp_path,
        *("--repo", str(feature.path), "--range", "main..feature", "--files", str(extra)),
        *("--page", "widget-fix"),
    )
    assert code == 0, err
    assert "range main..feature of" in out and "+ 1 patch file" in out
    loaded = load_series(directory)
    assert loaded.patch_names == ("0001-Add-the-helper.patch", FIX_NAME, "0003-tune.patch")
    assert loaded.base == feature.head("main")
    statuses = check_statuses(capsys, directory, feature.path, "main", tmp_path)
    assert statuses == ["applies", "applies", "applies"]


def test_numbering_continues_after_the_series_and_keeps_its_base(
    feature: RepoBuilder, tmp_path: Path, capsys
) -> None:
    directory = make_series(tmp_path, awaiting())
    repo = ("--repo", str(feature.path))
    code, _, err = do_import(
        capsys, directory, tmp_path, *repo, "--range", "main..feature~1", "--page", "widget-fix"
    )
    assert code == 2 and f"{FIX_NAME} is not in series" in err  # the page waits for 0002 too

    code, _, err = do_import(
        capsys, directory, tmp_path, *repo, "--range", "main..feature", "--page", "widget-fix"
    )
    assert code == 0, err
    feature.checkout("feature")
    feature.commit("Tune other", {"other.py": "alpha = 3\n"})
    code, out, err = do_import(
        capsys,
        directory,
        tmp_path,
        *repo,
        "--range",
        "feature~1..feature",
        "--numbering-from",
        "5",
        "--page",
        "widget-fix",
    )
    assert code == 0, err
    assert "imported 1 patch into" in out
    loaded = load_series(directory)
    assert loaded.patch_names[-1] == "0005-Tune-other.patch"
    assert loaded.base == feature.head("main")
    assert check_statuses(capsys, directory, feature.path, "main", tmp_path) == ["applies"] * 3


def test_dry_run_prints_the_plan_and_writes_nothing(
    feature: RepoBuilder, tmp_path: Path, capsys
) -> None:
    directory = make_series(tmp_path, awaiting())
    before = snapshot(directory)
    code, out, err = do_import(
        capsys,
        directory,
        tmp_path,
        *("--repo", str(feature.path), "--range", "main..feature"),
        *("--page", "widget-fix", "--dry-run"),
    )
    assert code == 0, err
    assert "would import 2 patches" in out and FIX_NAME in out
    assert "would write: 0001-Add-the-helper.patch" in out and "dry run" in out
    assert snapshot(directory) == before


def test_import_is_deterministic_and_leaves_the_source_untouched(
    feature: RepoBuilder, tmp_path: Path, capsys
) -> None:
    source_state = (git(feature.path, "for-each-ref"), git(feature.path, "status", "--porcelain"))
    results = []
    for attempt in ("a", "b"):
        directory = make_series(tmp_path / attempt, awaiting())
        code, _, err = run_cli(
            capsys,
            "import",
            *("--series", str(directory), "--cache-dir", str(tmp_path / attempt / "cache")),
            *("--repo", str(feature.path), "--range", "main..feature", "--page", "widget-fix"),
        )
        assert code == 0, err
        results.append(snapshot(directory))
    assert results[0] == results[1]
    assert len(results[0]) == 4  # series, page, two patches
    after = (git(feature.path, "for-each-ref"), git(feature.path, "status", "--porcelain"))
    assert after == source_state


def test_the_ple_operator_command_fills_the_real_series(make_repo, tmp_path: Path, capsys) -> None:
    """The command in the PLE series' awaiting-import line, with the two GitHub repositories
    replaced by local ones: upstream holds refs/pull/53899/head, the fork refs/pull/13/head."""
    upstream = make_repo("vllm")
    connector = "".join(f"step_{i} = prepare({i})\n" for i in range(1, 21))
    upstream.commit("Base", {"vllm/v1/ple_offload/connector.py": connector})
    upstream.checkout("main", new_branch="ple")
    upstream.commit("Support PLE offload", {"vllm/v1/ple_offload/worker.py": "run = 1\n"})
    pr_head = upstream.head()
    upstream.git("update-ref", "refs/pull/53899/head", pr_head)
    upstream.checkout("main")
    upstream.commit("Upstream moves on", {"README": "vllm\n"})

    fork = RepoBuilder(tmp_path / "fork")
    fork.git("fetch", "-q", str(upstream.path), f"{pr_head}:refs/heads/ple")
    fork.checkout("ple")
    fork.commit(
        "Carry the PLE offload worker changes", {"vllm/v1/ple_offload/worker.py": "run = 2\n"}
    )
    reset = connector.replace("step_3 = prepare(3)", "step_3 = prepare(3)\nreset_semaphores()")
    fork.commit(
        "[Bugfix] Reset the PLE offload semaphore", {"vllm/v1/ple_offload/connector.py": reset}
    )
    fork.git("update-ref", "refs/pull/13/head", fork.head())

    directory = tmp_path / "patches" / "ple-offload-pr53899"
    shutil.copytree(PLE_DIR, directory)
    command = load_series(directory).import_command
    assert command is not None
    argv = shlex.split(command)
    assert argv[:2] == ["carry", "import"]
    argv[argv.index("--base-repo") + 1] = str(upstream.path)
    code, out, err = run_cli(
        capsys,
        *argv[1:],
        *("--patches-dir", str(tmp_path / "patches"), "--cache-dir", str(tmp_path / "cache")),
        *("--repo", str(fork.path)),  # the operator's default is github.com/peakcrosser7/vllm
    )
    assert code == 0, err
    assert "peakcrosser7/vllm#13 on refs/pull/53899/head" in out

    loaded = load_series(directory)
    assert loaded.base == pr_head
    assert loaded.patch_names == (
        "0001-Carry-the-PLE-offload-worker-changes.patch",
        "0002-ple-offload-reset-semaphore.patch",  # the name the fix page waits for
    )
    (page,) = loaded.pages
    assert page.files_for("0001-Carry-the-PLE-offload-worker-changes.patch") == (
        "vllm/v1/ple_offload/worker.py",
    )
    assert page.files_for("0002-ple-offload-reset-semaphore.patch") == (
        "vllm/v1/ple_offload/connector.py",
    )
    statuses = check_statuses(capsys, directory, upstream.path, "refs/pull/53899/head", tmp_path)
    assert statuses == ["applies", "applies"]


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("rev_range", "message"),
    [
        ("feature", "bad range 'feature': expected BASE..TIP"),
        ("main...feature", "bad range 'main...feature'"),
        ("feature..feature", "range feature..feature has no commits to import"),
        ("main..no-such-branch", "revision 'no-such-branch' not found"),
    ],
)
def test_bad_range_is_refused(
    feature: RepoBuilder, tmp_path: Path, capsys, rev_range: str, message: str
) -> None:
    directory = make_series(tmp_path, awaiting())
    before = snapshot(directory)
    code, out, err = do_import(
        capsys, directory, tmp_path, "--repo", str(feature.path), "--range", rev_range
    )
    assert (code, out) == (2, "")
    assert message in err and err.count("\n") == 1
    assert snapshot(directory) == before


def test_range_whose_base_is_not_an_ancestor_is_refused(
    feature: RepoBuilder, tmp_path: Path, capsys
) -> None:
    feature.commit("Main moves on", {"other.py": "alpha = 5\n"})
    directory = make_series(tmp_path, awaiting())
    code, _, err = do_import(
        capsys, directory, tmp_path, "--repo", str(feature.path), "--range", "main..feature"
    )
    assert code == 2 and "main is not an ancestor of feature" in err


def test_merge_commit_in_range_is_refused(feature: RepoBuilder, tmp_path: Path, capsys) -> None:
    feature.checkout("main", new_branch="side")
    feature.commit("Side change", {"other.py": "alpha = 9\n"})
    feature.checkout("feature")
    feature.git("merge", "-q", "--no-ff", "-m", "Merge side", "side")
    merge = feature.head()
    directory = make_series(tmp_path, awaiting())
    before = snapshot(directory)
    code, _, err = do_import(
        capsys, directory, tmp_path, "--repo", str(feature.path), "--range", "main..feature"
    )
    assert code == 2
    assert f"contains merge commit {merge[:12]} ('Merge side')" in err
    assert "cannot import a merge" in err
    assert snapshot(directory) == before


def test_unparseable_file_is_refused_with_file_and_line(
    up: RepoBuilder, tmp_path: Path, capsys
) -> None:
    bad = tmp_path / "broken.patch"
    bad.write_bytes(b"--- a/mod.py\n+++ b/mod.py\n@@ -1,2 +1,2 @@\n-value_1\n?garbage\n")
    directory = make_series(tmp_path, awaiting())
    before = snapshot(directory)
    code, _, err = do_import(capsys, directory, tmp_path, "--files", str(bad))
    assert code == 2
    assert f"{bad}:5: not a usable patch: unexpected line inside a hunk" in err
    assert snapshot(directory) == before


def test_name_collisions_are_refused(feature: RepoBuilder, tmp_path: Path, capsys) -> None:
    directory = make_series(tmp_path, awaiting())
    args = ("--repo", str(feature.path), "--page", "widget-fix")
    code, _, err = do_import(capsys, directory, tmp_path, *args, "--range", "main..feature")
    assert code == 0, err
    before = snapshot(directory)

    code, _, err = do_import(
        capsys, directory, tmp_path, *args, "--range", "main..feature~1", "--name", FIX_NAME
    )
    assert code == 2 and f"name collision: {FIX_NAME} is already in the series" in err
    code, _, err = do_import(
        capsys,
        directory,
        tmp_path,
        *args,
        *("--range", "main..feature~1", "--name", "0002-other.patch"),
    )
    assert code == 2 and "0002-other.patch reuses number 0002 of " + FIX_NAME in err
    code, _, err = do_import(
        capsys, directory, tmp_path, *args, "--range", "main..feature", "--name", "0003-a.patch"
    )
    assert code == 2 and "--name is given 1 time but the import has 2 patches" in err
    code, _, err = do_import(
        capsys, directory, tmp_path, *args, "--range", "main..feature", "--numbering-from", "2"
    )
    assert code == 2 and "the series already ends at 0002" in err
    assert snapshot(directory) == before

    (directory / "0003-Add-the-helper.patch").write_bytes(b"stray")
    before = snapshot(directory)
    code, _, err = do_import(capsys, directory, tmp_path, *args, "--range", "main..feature~1")
    assert code == 2 and "0003-Add-the-helper.patch already exists" in err
    assert snapshot(directory) == before


def test_failed_validation_leaves_the_directory_byte_identical(
    feature: RepoBuilder, tmp_path: Path, capsys
) -> None:
    """The page lists the wrong file for the patch it waits for: load_series refuses the
    result, so neither the patches nor the series file are written."""
    directory = make_series(tmp_path, awaiting(f"{FIX_NAME}: other.py"))
    before = snapshot(directory)
    code, _, err = do_import(
        capsys,
        directory,
        tmp_path,
        *("--repo", str(feature.path), "--range", "main..feature", "--page", "widget-fix"),
    )
    assert code == 2
    assert "the series would not load after the import" in err
    assert f"Patches: {FIX_NAME}: files differ from the patch's diff" in err
    assert snapshot(directory) == before
    assert not list(tmp_path.joinpath("patches").glob(".*"))


def test_pr_errors_name_the_ref(feature: RepoBuilder, tmp_path: Path, capsys) -> None:
    directory = make_series(tmp_path, awaiting())
    repo = ("--repo", str(feature.path))
    code, _, err = do_import(capsys, directory, tmp_path, *repo, "--pr", "acme-widget-7")
    assert code == 2 and "bad pull request 'acme-widget-7' (expected OWNER/REPO#NUMBER)" in err
    code, _, err = do_import(capsys, directory, tmp_path, *repo, "--pr", "acme/widget#8")
    assert code == 2 and "ref 'refs/pull/8/head' does not exist" in err


# ----------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        ("[ci] Fix: the..thing -- now!  ", "0001-ci-Fix-the.thing-now.patch"),
        ("Reset every layer's semaphore", "0001-Reset-every-layer-s-semaphore.patch"),
        ("!!!", "0001-patch.patch"),
        ("x" * 80, "0001-" + "x" * 52 + ".patch"),
    ],
)
def test_names_follow_git_format_patch(
    subject: str, expected: str, make_repo, tmp_path: Path
) -> None:
    assert patch_name(1, subject) == expected
    if slug(subject):
        repo = make_repo("names")
        repo.commit("Base", {"a": "1\n"})
        repo.commit(subject, {"a": "2\n"})
        assert [p.name for p in repo.format_patch("HEAD~1..HEAD", tmp_path / "o")] == [expected]


@pytest.mark.parametrize(
    ("subject", "git_cuts_to", "expected"),
    [
        (
            "[Bugfix] Seed decode input ids before async scatte (#1609)",
            "0001-Bugfix-Seed-decode-input-ids-before-async-scatte-160.patch",
            "0001-Bugfix-Seed-decode-input-ids-before-async-scatt-1609.patch",
        ),
        (
            "[Bugfix] Seed decode input ids before the async scatter on HPU (#12).",
            "0001-Bugfix-Seed-decode-input-ids-before-the-async-scatte.patch",
            "0001-Bugfix-Seed-decode-input-ids-before-the-async-sca-12.patch",
        ),
    ],
)
def test_a_cut_name_keeps_the_pr_number_whole(
    subject: str, git_cuts_to: str, expected: str, make_repo, tmp_path: Path
) -> None:
    """git format-patch cuts names to 63 characters, whatever they end with: `(#1609)` became
    `160`, `(#12)` went. carry cuts the words before the PR number instead (a name that fits
    is git's)."""
    repo = make_repo("cut")
    repo.commit("Base", {"a": "1\n"})
    repo.commit(subject, {"a": "2\n"})
    assert [p.name for p in repo.format_patch("HEAD~1..HEAD", tmp_path / "o")] == [git_cuts_to]
    name = patch_name(1, subject)
    assert name == expected
    assert len(name) == len(git_cuts_to) and is_patch_name(name)
    assert patch_name(1, "Short subject (#1609)") == "0001-Short-subject-1609.patch"


def test_series_file_is_rewritten_without_the_awaiting_line(
    feature: RepoBuilder, tmp_path: Path, capsys
) -> None:
    directory = make_series(tmp_path, awaiting())
    code, _, err = do_import(
        capsys,
        directory,
        tmp_path,
        *("--repo", str(feature.path), "--range", "main..feature", "--page", "widget-fix"),
    )
    assert code == 0, err
    text = (directory / "series").read_text()
    series, problems = parse_series(text)
    assert problems == ()
    assert text == f"# base: {feature.head('main')}\n0001-Add-the-helper.patch\n{FIX_NAME}\n"
    assert series.awaiting_import is None
