"""What carry proposes for a series directory, as a pure function of state and files."""

from __future__ import annotations

from datetime import date

from bot.core.proposal import applied, build, same_patches
from bot.core.state import PatchState, SeriesState

PATCH = "0001-make-it-safe.patch"
PAGE = """# the-fix

Make it safe.

| Field | Value |
|---|---|
| Affects | everyone |
| Releases | v1 |
| Patches | 0001-make-it-safe.patch: mod.py |
| Upstream | up/engine#7 (open) |
| Test | unit |

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
HEAD = "a" * 40
CURRENT = {
    "series": f"{PATCH}\n".encode(),
    PATCH: b"old patch bytes\n",
    "the-fix.md": PAGE.encode(),
}
TODAY = date(2026, 11, 29)


def state(**patch: object) -> SeriesState:
    return SeriesState(id="s", checked_head=HEAD, patches=[PatchState(name=PATCH, **patch)])  # type: ignore[arg-type]


def test_unchanged_series_proposes_nothing():
    assert (
        build(CURRENT, state(status="applies", decision="keep"), {}, "20261129.1", TODAY).files
        == {}
    )


def test_refreshed_patch_moves_base_and_version():
    files = build(
        CURRENT,
        state(status="applies-moved", decision="keep", changed=True),
        {PATCH: b"new\n"},
        "20261129.1",
        TODAY,
    ).files
    assert files == {
        PATCH: b"new\n",
        "series": f"# base: {HEAD}\n{PATCH}\n".encode(),
        "VERSION": b"20261129.1\n",
    }


def test_conflict_keeps_the_last_good_file():
    proposal = build(
        CURRENT,
        state(status="conflict", decision="keep", changed=True),
        {PATCH: b"conflicted\n"},
        None,
        TODAY,
    )
    assert PATCH not in proposal.files


def test_drop_removes_file_and_entry_and_records_where_upstream_took_it():
    evidence = [{"signal": "patch-id-match", "commit": "b" * 40, "reverted_by": None}]
    prs = [{"ref": "up/engine#7", "state": "merged", "merge_commit": "c" * 40}]
    files = build(
        CURRENT,
        state(status="contained", decision="drop", evidence=evidence, upstream_prs=prs),
        {},
        "20261129.2",
        TODAY,
    ).files
    assert files[PATCH] is None
    assert PATCH.encode() not in files["series"]
    page = files["the-fix.md"].decode()
    assert "up/engine#7 (merged)" in page and f"2026-11-29: {PATCH} dropped" in page
    assert same_patches(applied(CURRENT, files), applied(CURRENT, files))


def test_observed_pr_state_is_written_to_the_page():
    prs = [{"ref": "up/engine#7", "state": "closed_unmerged", "merge_commit": None}]
    proposal = build(
        CURRENT, state(status="applies", decision="keep", upstream_prs=prs), {}, None, TODAY
    )
    assert "| Upstream | up/engine#7 (closed) |" in proposal.files["the-fix.md"].decode()


def test_a_drop_for_a_merged_declared_pr_records_its_merge_on_the_page():
    """Issue 35: the declared PR's merge is where upstream took the patch (no linked PR, no
    matching commit needed)."""
    merge = "d" * 40
    evidence = [
        {"signal": "declared-pr", "pr": "up/engine#7", "merged": True, "merge_commit": merge}
    ]
    files = build(
        CURRENT,
        state(status="upstream-version", decision="drop", evidence=evidence),
        {},
        None,
        TODAY,
    ).files
    page = files["the-fix.md"].decode()
    assert "up/engine#7 (merged)" in page
    assert f"upstream took it in up/engine@{merge} (up/engine#7)" in page
