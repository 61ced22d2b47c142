"""Series directories: every reason a series is refused, diff headers, `carry fixes` rows,
and the real series under patches/."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.fixpage import UpstreamEntry, UpstreamRef
from bot.fixes import (
    NO_DECISION,
    NOT_CHECKED,
    Carrier,
    FixRow,
    PatchRow,
    Verdict,
    fix_rows,
    release_line,
    render_fix_table,
)
from bot.series_loader import (
    AWAITING_IMPORT,
    READY,
    LoadedSeries,
    SeriesInvalid,
    load_all,
    load_series,
)
from tests.support.paths import REPO_ROOT

SHA = "b059f9c95d6a07f19eb00aa06d1ec8b87b296437"
PATCH = "0001-seed.patch"

PAGE = """\
# async-inputs

Seed decode input ids before the scatter.

| Field | Value |
|---|---|
| Affects | async scheduling |
| Releases | v0.26.0 |
| Patches | {patches} |
| Upstream | vllm-project/vllm-gaudi#1919 ({state}) |
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
PATCHES_LINE = 9


def page(patches: str = f"{PATCH}: pkg/runner.py", state: str = "open", name: str = "") -> str:
    text = PAGE.format(patches=patches, state=state)
    return text.replace("# async-inputs", f"# {name}", 1) if name else text


def diff(*paths: str) -> str:
    blocks = [
        f"diff --git a/{p} b/{p}\nindex 1111111..2222222 100644\n--- a/{p}\n+++ b/{p}\n"
        "@@ -1 +1 @@\n-old\n+new\n"
        for p in paths
    ]
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: carry maintainers <carry@carry.invalid>\nSubject: [PATCH] x\n\n---\n"
        + "".join(blocks)
    )


def make(root: Path, files: dict[str, str | bytes], series_id: str = "x") -> Path:
    directory = root / "patches" / series_id
    directory.mkdir(parents=True)
    for name, content in files.items():
        target = directory / name
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    return directory


def valid_files() -> dict[str, str | bytes]:
    return {
        "series": f"# base: {SHA}\n{PATCH}\n",
        PATCH: diff("pkg/runner.py"),
        "async-inputs.md": page(),
    }


def refused(directory: Path, root: Path) -> list[str]:
    with pytest.raises(SeriesInvalid) as info:
        load_series(directory, root=root)
    return [str(p) for p in info.value.problems]


# ---------------------------------------------------------------- a valid series


def test_valid_series_loads(tmp_path: Path) -> None:
    directory = make(tmp_path, valid_files())
    loaded = load_series(directory)
    assert loaded.series_id == "x"
    assert loaded.directory == directory
    assert loaded.patch_paths == (directory / PATCH,)
    assert loaded.patch_names == (PATCH,)
    assert loaded.base == SHA
    assert loaded.awaiting_import is None
    assert loaded.state == READY
    assert loaded.describe() == "x: ready, 1 patch, verified on b059f9c95d6a"
    assert [p.name for p in loaded.pages] == ["async-inputs"]
    assert loaded.pages[0].file == "patches/x/async-inputs.md"
    assert loaded.page_for(PATCH) is loaded.pages[0]
    assert loaded.page_for("0002-none.patch") is None


def test_patch_paths_follow_series_order_not_names(tmp_path: Path) -> None:
    files = valid_files()
    files["series"] = f"{PATCH}\n0002-b.patch\n"
    files["0002-b.patch"] = diff("b.py")
    files["async-inputs.md"] = page(f"{PATCH}: pkg/runner.py; 0002-b.patch: b.py")
    loaded = load_series(make(tmp_path, files))
    assert loaded.patch_names == (PATCH, "0002-b.patch")
    assert loaded.describe() == "x: ready, 2 patches, never verified"


def test_other_files_are_left_alone(tmp_path: Path) -> None:
    files = valid_files()
    files["VERSION"] = "20260906.1\n"
    load_series(make(tmp_path, files))


# ---------------------------------------------------------------- refusals


def test_page_problem_message_is_exact(tmp_path: Path) -> None:
    files = valid_files()
    files["async-inputs.md"] = page(state="mergd")
    assert refused(make(tmp_path, files), tmp_path) == [
        "patches/x/async-inputs.md:10: Upstream: unknown state 'mergd' (expected one of: "
        "open, draft, merged, closed, superseded by <ref>, reverted, not-filed)"
    ]


def test_page_title_must_match_file_name(tmp_path: Path) -> None:
    files = valid_files()
    files["async-inputs.md"] = page(name="other")
    assert refused(make(tmp_path, files), tmp_path) == [
        "patches/x/async-inputs.md:1: title '# other' does not match the file name "
        "(expected '# async-inputs')"
    ]


def test_series_problem_is_reported(tmp_path: Path) -> None:
    files = valid_files()
    files["series"] = f"# base: 123\n{PATCH}\n"
    assert refused(make(tmp_path, files), tmp_path) == [
        "patches/x/series:1: bad base sha '123' (expected 40 lowercase hex digits)"
    ]


def test_missing_series_file(tmp_path: Path) -> None:
    files = valid_files()
    del files["series"]
    assert refused(make(tmp_path, files), tmp_path) == [
        "patches/x/0001-seed.patch: patch file is not listed in series "
        "(list it in series or delete it)",
        f"patches/x/async-inputs.md:{PATCHES_LINE}: Patches: {PATCH} is not in series",
        "patches/x/series: missing series file (one patch file name per line)",
    ]


def test_listed_patch_must_exist(tmp_path: Path) -> None:
    files = valid_files()
    del files[PATCH]
    assert refused(make(tmp_path, files), tmp_path) == [
        f"patches/x/series:2: patch '{PATCH}' is listed but the file does not exist"
    ]


def test_unlisted_patch_is_never_ignored(tmp_path: Path) -> None:
    files = valid_files()
    files["0002-stray.patch"] = diff("a.py")
    files["fix.patch"] = diff("a.py")
    assert refused(make(tmp_path, files), tmp_path) == [
        "patches/x/0002-stray.patch: patch file is not listed in series "
        "(list it in series or delete it)",
        "patches/x/fix.patch: patch file is not named NNNN-slug.patch and is not in series",
    ]


def test_patch_named_by_no_page(tmp_path: Path) -> None:
    files = valid_files()
    del files["async-inputs.md"]
    assert refused(make(tmp_path, files), tmp_path) == [
        "patches/x/0001-seed.patch: no fix page names this patch (add it to a page's Patches field)"
    ]


def test_patch_named_by_two_pages(tmp_path: Path) -> None:
    files = valid_files()
    files["zz-other.md"] = page(name="zz-other")
    assert refused(make(tmp_path, files), tmp_path) == [
        f"patches/x/zz-other.md:{PATCHES_LINE}: Patches: {PATCH} is already named by "
        f"async-inputs.md:{PATCHES_LINE}"
    ]


def test_page_names_patch_not_in_series(tmp_path: Path) -> None:
    files = valid_files()
    files["async-inputs.md"] = page(f"{PATCH}: pkg/runner.py; 0002-later.patch: b.py")
    assert refused(make(tmp_path, files), tmp_path) == [
        f"patches/x/async-inputs.md:{PATCHES_LINE}: Patches: 0002-later.patch is not in series"
    ]


def test_page_files_must_match_the_diff(tmp_path: Path) -> None:
    files = valid_files()
    files["async-inputs.md"] = page(f"{PATCH}: pkg/runner.py, pkg/gone.py")
    files[PATCH] = diff("pkg/runner.py", "pkg/extra.py")
    assert refused(make(tmp_path, files), tmp_path) == [
        f"patches/x/async-inputs.md:{PATCHES_LINE}: Patches: {PATCH}: files differ from the "
        "patch's diff (listed but not in the diff: pkg/gone.py; "
        "in the diff but not listed: pkg/extra.py)"
    ]


def test_rename_counts_both_sides(tmp_path: Path) -> None:
    rename = (
        "diff --git a/old/name.py b/new/name.py\nsimilarity index 90%\n"
        "rename from old/name.py\nrename to new/name.py\n"
    )
    files = valid_files()
    files[PATCH] = diff() + rename
    files["async-inputs.md"] = page(f"{PATCH}: new/name.py")
    assert refused(make(tmp_path / "a", files), tmp_path / "a") == [
        f"patches/x/async-inputs.md:{PATCHES_LINE}: Patches: {PATCH}: files differ from the "
        "patch's diff (in the diff but not listed: old/name.py)"
    ]
    files["async-inputs.md"] = page(f"{PATCH}: old/name.py, new/name.py")
    load_series(make(tmp_path / "b", files))


def test_patch_without_diff(tmp_path: Path) -> None:
    files = valid_files()
    files[PATCH] = diff()
    assert refused(make(tmp_path, files), tmp_path) == [
        "patches/x/0001-seed.patch: the patch touches no files"
    ]


def test_page_that_is_not_utf8(tmp_path: Path) -> None:
    files = valid_files()
    files["async-inputs.md"] = b"# async-inputs\n\xff\xfe\n"
    assert refused(make(tmp_path, files), tmp_path) == [
        "patches/x/0001-seed.patch: no fix page names this patch "
        "(add it to a page's Patches field)",
        "patches/x/async-inputs.md: not valid UTF-8 (invalid start byte at byte 15)",
    ]


def test_bad_series_id(tmp_path: Path) -> None:
    directory = make(tmp_path, valid_files(), series_id="Bad Id")
    assert refused(directory, tmp_path) == [
        "patches/Bad Id/series: bad series id 'Bad Id' (expected lowercase letters, digits, '.-_')"
    ]


def test_missing_directory(tmp_path: Path) -> None:
    assert refused(tmp_path / "patches" / "nope", tmp_path) == [
        "patches/nope: series directory does not exist"
    ]


def test_all_problems_come_together_sorted(tmp_path: Path) -> None:
    files = valid_files()
    files["series"] = f"# base: 123\n{PATCH}\n"
    files["async-inputs.md"] = page(state="mergd")
    files["0002-stray.patch"] = diff("a.py")
    with pytest.raises(SeriesInvalid) as info:
        load_series(make(tmp_path, files), root=tmp_path)
    assert [(p.file, p.line) for p in info.value.problems] == [
        ("patches/x/0002-stray.patch", 0),
        ("patches/x/async-inputs.md", 10),
        ("patches/x/series", 1),
    ]
    assert str(info.value).startswith("3 problems in carried patches:\n  patches/x/0002-stray")


# ---------------------------------------------------------------- awaiting import

AWAITING = (
    "# awaiting-import: o/r#53899 (head of the PR) + 0001 + 0002 semaphore reset; "
    "run: carry import --series x --pr o/r#53899\n"
)


def test_awaiting_import_accepts_pages_naming_future_patches(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {
        "series": AWAITING,
        "async-inputs.md": page("0002-reset.patch: vllm/v1/ple_offload/connector.py"),
    }
    loaded = load_series(make(tmp_path, files))
    assert loaded.state == AWAITING_IMPORT == "awaiting import"
    assert loaded.is_awaiting_import
    assert loaded.patch_paths == ()
    assert loaded.import_command == "carry import --series x --pr o/r#53899"
    assert loaded.describe() == (
        "x: awaiting import (not filled yet; run: carry import --series x --pr o/r#53899)"
    )


def test_awaiting_import_still_refuses_stray_patches_and_double_naming(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {
        "series": AWAITING,
        "0002-reset.patch": diff("a.py"),
        "async-inputs.md": page("0002-reset.patch: a.py"),
        "b.md": page("0002-reset.patch: a.py", name="b"),
    }
    assert refused(make(tmp_path, files), tmp_path) == [
        "patches/x/0002-reset.patch: patch file is not listed in series "
        "(list it in series or delete it)",
        f"patches/x/b.md:{PATCHES_LINE}: Patches: 0002-reset.patch is already named by "
        f"async-inputs.md:{PATCHES_LINE}",
    ]


# ---------------------------------------------------------------- load_all


def test_load_all_collects_problems_of_every_series(tmp_path: Path) -> None:
    make(tmp_path, valid_files(), series_id="a")
    bad = valid_files()
    del bad[PATCH]
    make(tmp_path, bad, series_id="b")
    (tmp_path / "patches" / ".hidden").mkdir()
    with pytest.raises(SeriesInvalid) as info:
        load_all(tmp_path / "patches")
    assert [str(p) for p in info.value.problems] == [
        f"patches/b/series:2: patch '{PATCH}' is listed but the file does not exist"
    ]


def test_load_all_sorted(tmp_path: Path) -> None:
    make(tmp_path, valid_files(), series_id="b")
    make(tmp_path, valid_files(), series_id="a")
    assert [s.series_id for s in load_all(tmp_path / "patches")] == ["a", "b"]


def test_load_all_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(SeriesInvalid, match="directory does not exist"):
        load_all(tmp_path / "nope")


# ---------------------------------------------------------------- carry fixes


def fixes_series(tmp_path: Path) -> list[LoadedSeries]:
    make(tmp_path, valid_files(), series_id="gaudi-main")
    make(
        tmp_path,
        {"series": AWAITING, "ple.md": page("0002-reset.patch: c.py", "closed", "ple")},
        series_id="ple-pr",
    )
    return load_all(tmp_path / "patches")


def test_fix_rows(tmp_path: Path) -> None:
    rows = fix_rows(fixes_series(tmp_path))
    assert rows == [
        FixRow(
            "async-inputs",
            "gaudi-main",
            "vllm-project/vllm-gaudi#1919 (open)",
            "v0.26.0",
            (PatchRow(PATCH, NOT_CHECKED, NO_DECISION),),
        ),
        FixRow(
            "ple",
            "ple-pr (awaiting import)",
            "vllm-project/vllm-gaudi#1919 (closed)",
            "v0.26.0",
            (PatchRow("0002-reset.patch", "awaiting import", "-"),),
        ),
    ]


def test_fix_rows_verdicts(tmp_path: Path) -> None:
    loaded = fixes_series(tmp_path)
    verdicts = {f"gaudi-main/{PATCH}": Verdict("conflict", "keep"), PATCH: Verdict("x", "y")}
    assert fix_rows(loaded, verdicts)[0].patches == (PatchRow(PATCH, "conflict", "keep"),)
    assert fix_rows(loaded, {PATCH: Verdict("contained", "drop")})[0].patches[0].decision == (
        "drop"
    )
    unknown = fix_rows(loaded, unknown=True)
    assert unknown[0].patches == (PatchRow(PATCH, "unknown", "unknown"),)
    assert Verdict.shown("pending", "none") == Verdict(NOT_CHECKED, NO_DECISION)


def test_render_fix_table(tmp_path: Path) -> None:
    verdicts = {f"gaudi-main/{PATCH}": Verdict("conflict", "keep")}
    table = render_fix_table(fix_rows(fixes_series(tmp_path), verdicts))
    assert table == (
        "FIX / SERIES / PATCH  STATUS           DECISION\n"
        "async-inputs: upstream vllm-project/vllm-gaudi#1919 (open); releases v0.26.0\n"
        "  gaudi-main\n"
        "    0001-seed.patch   conflict         keep\n"
        "\n"
        "ple: upstream vllm-project/vllm-gaudi#1919 (closed); releases v0.26.0\n"
        "  ple-pr (awaiting import)\n"
        "    0002-reset.patch  awaiting import  -\n"
    )
    assert render_fix_table([]).endswith("(no fix pages)\n")


def test_fix_table_fits_100_columns() -> None:
    """Long names and notes wrap or move to lines of their own; the verdicts stay aligned."""
    long_name = "0001-" + "x" * 80 + ".patch"  # 95 columns with its indent
    row = FixRow(
        "fix",
        "series",
        "owner/repo#1 (closed, superseded by owner/repo#2) " + "and a long story " * 8,
        "v1.0 (not carried)",
        (PatchRow(long_name, "upstream-version", "review"), PatchRow(PATCH, "applies", "keep")),
        ("fix v1.0: not carried: " + "a reason in many words " * 10,),
    )
    table = render_fix_table([row])
    assert max(len(line) for line in table.splitlines()) <= 100, table
    lines = table.splitlines()
    at = lines.index(f"    {long_name}")
    assert lines[at + 1].split() == ["upstream-version", "review"]
    status_column = lines[0].index("STATUS")
    assert lines[at + 1].index("upstream-version") == status_column
    assert lines[at + 2].index("applies") == status_column


# ---------------------------------------------------------------- the real series in patches/

REAL = REPO_ROOT / "patches"
ASYNC_PATCH = "0001-seed-decode-input-ids-before-async-scatter.patch"


def test_real_series_load_and_validate() -> None:
    loaded = {s.series_id: s for s in load_all(REAL, root=REPO_ROOT)}
    assert set(loaded) >= {"async-inputs-v0.26.0", "async-inputs-main", "ple-offload-pr53899"}

    release = loaded["async-inputs-v0.26.0"]
    assert release.state == READY
    assert release.base == "b059f9c95d6a07f19eb00aa06d1ec8b87b296437"  # v0.26.0^{commit}
    assert release.patch_names == (ASYNC_PATCH,)
    assert loaded["async-inputs-main"].patch_names == (ASYNC_PATCH,)
    assert loaded["async-inputs-main"].base == "091bbadda10bee4fd3f6d0efc1844d2610dd2707"

    ple = loaded["ple-offload-pr53899"]
    assert ple.state == "awaiting import"
    assert ple.import_command == (
        "carry import --series ple-offload-pr53899 --pr peakcrosser7/vllm#13 "
        "--base-repo https://github.com/vllm-project/vllm.git "
        "--base-branch refs/pull/53899/head --page ple-offload-semaphore"
    )


@pytest.mark.parametrize("series_id", ["async-inputs-v0.26.0", "async-inputs-main"])
def test_real_async_inputs_page(series_id: str) -> None:
    loaded = load_series(REAL / series_id, root=REPO_ROOT)
    (fix,) = loaded.pages
    assert fix.name == "async-inputs"
    assert fix.releases == ("v0.26.0", "v0.30.0")
    assert fix.upstream == (UpstreamEntry("vllm-project/vllm-gaudi", 1919, "open"),)
    assert fix.files_for(ASYNC_PATCH) == ("vllm_gaudi/v1/worker/hpu_model_runner.py",)
    patch = (REAL / series_id / ASYNC_PATCH).read_text()
    assert "\nUpstream-PR: vllm-project/vllm-gaudi#1919\n" in patch
    assert "From: carry maintainers <carry@carry.invalid>\n" in patch


def test_real_ple_page_never_calls_53899_merged() -> None:
    (fix,) = load_series(REAL / "ple-offload-pr53899", root=REPO_ROOT).pages
    assert fix.name == "ple-offload-semaphore"
    assert fix.affects == "PLE CPU offload with CUDA graphs"
    assert fix.releases == ("20260906.1",)
    assert fix.patch_names == ("0002-ple-offload-reset-semaphore.patch",)
    assert fix.upstream == (
        UpstreamEntry(
            "vllm-project/vllm", 53899, "closed", UpstreamRef("vllm-project/vllm", 54371)
        ),
    )


@pytest.mark.parametrize(
    ("carriers", "mark", "note"),
    [
        ([Carrier("a", "dir-a", "v1")], "", None),
        ([Carrier("a", "dir-a", "v1", waiting_for="refs/tags/v1")], "waiting", "a waits for"),
        (
            [Carrier("a", "dir-a", "v1", waiting_for="refs/tags/v1"), Carrier("b", "dir-b", "v1")],
            "",
            None,
        ),
        ([Carrier("a", "dir-a", "v0.9")], "not carried", "no configured series"),
        ([], "not carried", "no configured series"),
        # A series on a PR head carries the fix (issue 36: the demo's pages said "not carried")
        (
            [Carrier("a", "dir-a", None, pull=7)],
            "on a PR",
            "a carries it on upstream PR #7; a PR names no release",
        ),
        ([Carrier("a", "dir-a", "v1"), Carrier("b", "dir-b", None, pull=7)], "", None),
    ],
)
def test_a_listed_release_is_carried_waited_for_or_not_carried(
    carriers: list[Carrier], mark: str, note: str | None
) -> None:
    line = release_line("fix", "v1", carriers)
    assert (line.release, line.mark) == ("v1", mark)
    assert (line.reason is None) if note is None else (note in (line.reason or ""))
