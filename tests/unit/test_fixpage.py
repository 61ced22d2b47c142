"""Fix pages: parsing, every validation message, and the pure upstream-history update."""

from __future__ import annotations

from datetime import date

import pytest

from bot.core.fixpage import (
    STATE_CHOICES,
    PageProblem,
    PageUpdateError,
    PatchFiles,
    UpstreamEntry,
    UpstreamRef,
    parse_fix_page,
    parse_ref,
    parse_upstream,
    record_upstream_take,
    render_patches,
    render_upstream,
    update_upstream,
    validate_fix_page,
)

FILE = "patches/x/async-inputs.md"

VALID = """\
# async-inputs

Seed the device decode input ids from the host
before the async-scheduling scatter.

| Field | Value |
|---|---|
| Affects | every model served with async scheduling |
| Releases | v0.26.0, v0.30.0 |
| Patches | 0001-seed.patch: pkg/runner.py, pkg/util.py |
| Upstream | vllm-project/vllm-gaudi#1919 (open) |
| Test | none (covered by the end-to-end check) |

## Problem

Rows keep a stale token.

## Symptom

Repeated tokens.

## Who is affected

Async scheduling users.

## The fix

Seed the rows first.

```bash
## not a heading: inside a fence
# nor is this a title
```

## Verify

Compare concurrent and solo greedy outputs.
"""

# Line numbers in VALID.
AFFECTS, RELEASES, PATCHES, UPSTREAM, TEST, LAST = 8, 9, 10, 11, 12, 37


def with_row(field: str, value: str, text: str = VALID) -> str:
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(f"| {field} |"):
            lines[i] = f"| {field} | {value} |"
            return "\n".join(lines)
    raise AssertionError(field)


def messages(text: str, expected_name: str | None = "async-inputs") -> list[str]:
    return [str(p) for p in validate_fix_page(text, FILE, expected_name=expected_name)]


def at(line: int, message: str) -> list[str]:
    return [f"{FILE}:{line}: {message}"]


# ---------------------------------------------------------------- a valid page


def test_valid_page_parses_into_values() -> None:
    page, problems = parse_fix_page(VALID, FILE, expected_name="async-inputs")
    assert problems == ()
    assert page.name == "async-inputs"
    assert page.file == FILE
    assert page.summary == (
        "Seed the device decode input ids from the host before the async-scheduling scatter."
    )
    assert page.affects == "every model served with async scheduling"
    assert page.releases == ("v0.26.0", "v0.30.0")
    assert page.patches == (PatchFiles("0001-seed.patch", ("pkg/runner.py", "pkg/util.py")),)
    assert page.upstream == (UpstreamEntry("vllm-project/vllm-gaudi", 1919, "open"),)
    assert page.test == "none (covered by the end-to-end check)"
    assert [s.title for s in page.sections] == [
        "Problem",
        "Symptom",
        "Who is affected",
        "The fix",
        "Verify",
    ]
    assert page.field_lines == {
        "Affects": AFFECTS,
        "Releases": RELEASES,
        "Patches": PATCHES,
        "Upstream": UPSTREAM,
        "Test": TEST,
    }
    assert page.patch_names == ("0001-seed.patch",)
    assert page.files_for("0001-seed.patch") == ("pkg/runner.py", "pkg/util.py")
    assert page.files_for("0002-other.patch") is None
    assert page.section("Problem") == "Rows keep a stale token."
    assert page.section("Upstream history") is None
    assert page.upstream_text == "vllm-project/vllm-gaudi#1919 (open)"


def test_fenced_block_stays_in_its_section() -> None:
    page, _ = parse_fix_page(VALID, FILE)
    fix = page.section("The fix")
    assert fix is not None
    assert fix.splitlines() == [
        "Seed the rows first.",
        "",
        "```bash",
        "## not a heading: inside a fence",
        "# nor is this a title",
        "```",
    ]


def test_table_without_header_row_is_accepted() -> None:
    text = VALID.replace("| Field | Value |\n|---|---|\n", "")
    assert messages(text) == []


def test_crlf_page_parses_like_lf() -> None:
    lf, _ = parse_fix_page(VALID, FILE)
    crlf, problems = parse_fix_page(VALID.replace("\n", "\r\n"), FILE)
    assert problems == ()
    assert crlf == lf


def test_subheadings_and_upstream_history_are_allowed() -> None:
    text = VALID.replace("Repeated tokens.", "Repeated tokens.\n\n### Lazy mode\n\nAlso.")
    text += "\n## Upstream history\n\n- 2026-09-01: something.\n"
    page, problems = parse_fix_page(text, FILE)
    assert problems == ()
    assert page.section("Upstream history") == "- 2026-09-01: something."


def test_problem_without_line_names_the_file_only() -> None:
    assert str(PageProblem("a.md", 0, "boom")) == "a.md: boom"
    assert str(PageProblem("a.md", 3, "boom")) == "a.md:3: boom"


# ---------------------------------------------------------------- title and summary


def test_missing_title() -> None:
    assert messages(VALID.replace("# async-inputs\n", "async-inputs\n", 1)) == at(
        1, "first line must be the title '# <fix-name>'"
    )


def test_bad_fix_name() -> None:
    text = VALID.replace("# async-inputs", "# Async Inputs", 1)
    assert messages(text) == at(
        1, "bad fix name 'Async Inputs' (expected lowercase letters, digits and '-')"
    )


def test_title_must_match_file_name() -> None:
    assert messages(VALID, expected_name="other") == at(
        1, "title '# async-inputs' does not match the file name (expected '# other')"
    )


def test_second_title_is_reported() -> None:
    text = VALID.replace("Repeated tokens.", "# Oops")
    assert messages(text) == at(20, "unexpected second title '# Oops' (sections use '## ')")


def test_missing_summary() -> None:
    text = VALID.replace(
        "Seed the device decode input ids from the host\nbefore the async-scheduling scatter.\n\n",
        "",
    )
    assert messages(text) == at(2, "missing summary paragraph after the title")


def test_summary_must_be_one_paragraph() -> None:
    text = VALID.replace("scatter.\n", "scatter.\n\nA second paragraph.\n")
    assert messages(text) == at(6, "the summary must be one paragraph")


# ---------------------------------------------------------------- field table


def test_missing_table() -> None:
    start = VALID.index("| Field")
    end = VALID.index("## Problem")
    text = VALID[:start] + VALID[end:]
    assert messages(text) == [
        f"{FILE}:6: missing field table (| Affects | ... |)",
        *(f"{FILE}:1: missing field '{f}'" for f in ("Affects", "Releases", "Patches")),
        f"{FILE}:1: missing field 'Upstream'",
        f"{FILE}:1: missing field 'Test'",
    ]


def test_missing_field() -> None:
    text = VALID.replace("| Test | none (covered by the end-to-end check) |\n", "")
    assert messages(text) == at(6, "missing field 'Test'")


def test_unknown_field() -> None:
    text = VALID.replace("| Test |", "| Tests |")
    assert messages(text) == [
        f"{FILE}:{TEST}: unknown field 'Tests' (expected one of: "
        "Affects, Releases, Patches, Upstream, Test, Owners)",
        f"{FILE}:6: missing field 'Test'",
    ]


def test_duplicate_field() -> None:
    text = VALID.replace("| Test |", "| Affects | again |\n| Test |")
    assert messages(text) == at(TEST, "duplicate field 'Affects' (first on line 8)")


def test_empty_field() -> None:
    assert messages(with_row("Affects", "")) == at(AFFECTS, "field 'Affects' is empty")


def test_row_with_three_columns() -> None:
    assert messages(with_row("Affects", "a | b")) == [
        f"{FILE}:{AFFECTS}: field row must have 2 columns (found 3)",
        f"{FILE}:6: missing field 'Affects'",
    ]


def test_row_must_end_with_a_pipe() -> None:
    text = VALID.replace("| Affects | every model served with async scheduling |", "| Affects | x")
    assert messages(text) == [
        f"{FILE}:{AFFECTS}: table row must start and end with '|'",
        f"{FILE}:6: missing field 'Affects'",
    ]


def test_delimiter_row_inside_table() -> None:
    text = VALID.replace("| Test |", "|---|---|\n| Test |")
    assert messages(text) == at(TEST, "unexpected delimiter row inside the field table")


def test_table_must_be_one_block() -> None:
    text = VALID.replace("| Test | none (covered by the end-to-end check) |", "\n| Test | x |")
    assert messages(text) == [
        f"{FILE}:13: table row outside the field table (the table must be one block)",
        f"{FILE}:6: missing field 'Test'",
    ]


def test_text_after_table() -> None:
    text = VALID.replace("check) |\n", "check) |\n\nStray text.\n")
    assert messages(text) == at(14, "unexpected text after the field table (start a '## ' section)")


# ---------------------------------------------------------------- Releases and Patches


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("v0.26.0,", "Releases: empty entry (releases are separated by ',')"),
        ("v0.26.0, v0.26.0", "Releases: duplicate release 'v0.26.0'"),
        (
            "v0.26.0 v0.30.0",
            "Releases: bad release 'v0.26.0 v0.30.0' (no spaces; separate with ',')",
        ),
    ],
)
def test_releases_problems(value: str, message: str) -> None:
    assert messages(with_row("Releases", value)) == at(RELEASES, message)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "pkg/runner.py",
            "Patches: entry 'pkg/runner.py' must be '<NNNN-slug.patch>: <file>, <file>'",
        ),
        ("seed.patch: a.py", "Patches: bad patch name 'seed.patch' (expected NNNN-slug.patch)"),
        ("0001-a.patch: a.py; 0001-a.patch: b.py", "Patches: duplicate patch '0001-a.patch'"),
        ("0001-a.patch:", "Patches: 0001-a.patch lists no files"),
        (
            "0001-a.patch: a.py,",
            "Patches: 0001-a.patch: empty file name (files are separated by ',')",
        ),
        ("0001-a.patch: a.py, a.py", "Patches: 0001-a.patch lists 'a.py' twice"),
        (
            "0001-a.patch: /abs/a.py",
            "Patches: 0001-a.patch: bad path '/abs/a.py' "
            "(expected a path relative to the upstream repository root)",
        ),
        (
            "0001-a.patch: ../a.py",
            "Patches: 0001-a.patch: bad path '../a.py' "
            "(expected a path relative to the upstream repository root)",
        ),
    ],
)
def test_patches_problems(value: str, message: str) -> None:
    assert messages(with_row("Patches", value)) == at(PATCHES, message)


def test_several_patches() -> None:
    page, problems = parse_fix_page(
        with_row("Patches", "0001-a.patch: a.py; 0002-b.patch: b/c.py"), FILE
    )
    assert problems == ()
    assert page.patches == (
        PatchFiles("0001-a.patch", ("a.py",)),
        PatchFiles("0002-b.patch", ("b/c.py",)),
    )
    assert render_patches(page.patches) == "0001-a.patch: a.py; 0002-b.patch: b/c.py"


# ---------------------------------------------------------------- Upstream


def test_unknown_state_message_is_exact() -> None:
    text = with_row("Upstream", "vllm-project/vllm-gaudi#1919 (mergd)")
    assert messages(text) == [
        f"{FILE}:{UPSTREAM}: Upstream: unknown state 'mergd' (expected one of: open, draft, merged, "
        "closed, superseded by <ref>, reverted, not-filed)"
    ]
    assert STATE_CHOICES in messages(text)[0]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "vllm-gaudi#1919 (open)",
            "Upstream: malformed PR ref 'vllm-gaudi#1919' (expected <owner>/<repo>#<number>)",
        ),
        (
            "vllm-project/vllm-gaudi#0 (open)",
            "Upstream: malformed PR ref 'vllm-project/vllm-gaudi#0' "
            "(expected <owner>/<repo>#<number>)",
        ),
        (
            "vllm-project/vllm-gaudi#1919",
            "Upstream: entry 'vllm-project/vllm-gaudi#1919' must be "
            "'<owner>/<repo>#<number> (<state>)'",
        ),
        (
            "o/r#1 (superseded)",
            "Upstream: state 'superseded' must name the replacing PR: 'superseded by <ref>'",
        ),
        (
            "o/r#1 (superseded by #2)",
            "Upstream: malformed PR ref '#2' (expected <owner>/<repo>#<number>)",
        ),
        (
            "o/r#1 (open, superseded by o/r#2)",
            "Upstream: 'open, superseded by ...': only a closed PR can be superseded",
        ),
        ("o/r#1 (open); o/r#1 (merged)", "Upstream: duplicate entry 'o/r#1'"),
        ("o/r#1 (open);", "Upstream: empty entry (entries are separated by ';')"),
        (
            "o/r#1 (not-filed)",
            "Upstream: 'o/r#1 (not-filed)': a not-filed entry names a repository, "
            "not a PR ('<owner>/<repo>')",
        ),
    ],
)
def test_upstream_problems(value: str, message: str) -> None:
    assert messages(with_row("Upstream", value)) == at(UPSTREAM, message)


@pytest.mark.parametrize("state", ["open", "draft", "merged", "closed", "reverted"])
def test_every_plain_state_parses(state: str) -> None:
    entries, errors = parse_upstream(f"o/r#7 ({state})")
    assert errors == []
    assert entries == (UpstreamEntry("o/r", 7, state),)
    assert render_upstream(entries) == f"o/r#7 ({state})"


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        (
            "o/r#1 (superseded by o/r#2)",
            UpstreamEntry("o/r", 1, "superseded", UpstreamRef("o/r", 2)),
        ),
        (
            "vllm-project/vllm#53899 (closed, superseded by vllm-project/vllm#54371)",
            UpstreamEntry(
                "vllm-project/vllm", 53899, "closed", UpstreamRef("vllm-project/vllm", 54371)
            ),
        ),
        ("not-filed", UpstreamEntry(None, None, "not-filed")),
        ("o/r (not-filed)", UpstreamEntry("o/r", None, "not-filed")),
    ],
)
def test_special_states_round_trip(text: str, entry: UpstreamEntry) -> None:
    entries, errors = parse_upstream(text)
    assert errors == []
    assert entries == (entry,)
    assert render_upstream(entries) == text


def test_several_upstream_entries() -> None:
    entries, errors = parse_upstream("o/r#1 (closed, superseded by o/r#2); o/r#2 (merged)")
    assert errors == []
    assert [str(e.ref) for e in entries] == ["o/r#1", "o/r#2"]
    assert entries[1].ref == parse_ref("o/r#2")


def test_parse_ref() -> None:
    assert parse_ref(" vllm-project/vllm#53899 ") == UpstreamRef("vllm-project/vllm", 53899)
    assert str(UpstreamRef("vllm-project/vllm", 53899)) == "vllm-project/vllm#53899"
    for bad in ("vllm#1", "a/b#", "a/b#x", "a/b/c#1", "#1"):
        assert parse_ref(bad) is None, bad


# ---------------------------------------------------------------- sections


def test_missing_section() -> None:
    text = VALID.replace("## Symptom\n\nRepeated tokens.\n\n", "")
    assert messages(text) == at(LAST - 4, "missing section '## Symptom'")


def test_empty_section() -> None:
    text = VALID.replace("Repeated tokens.\n", "   \n")
    assert messages(text) == at(18, "section 'Symptom' is empty")


def test_duplicate_section() -> None:
    text = VALID + "\n## Problem\n\nAgain.\n"
    assert messages(text) == at(LAST + 2, "duplicate section 'Problem' (first on line 14)")


def test_unknown_section() -> None:
    text = VALID + "\n## Notes\n\nMore.\n"
    assert messages(text) == at(
        LAST + 2,
        "unknown section 'Notes' (expected one of: Problem, Symptom, Who is affected, "
        "The fix, Verify, Upstream history)",
    )


def test_unclosed_fence() -> None:
    text = VALID.replace("Compare concurrent", "```\nCompare concurrent")
    assert messages(text) == at(LAST, "code fence is never closed")


def test_empty_text_reports_everything_missing() -> None:
    found = messages("", expected_name=None)
    assert found[0] == f"{FILE}:1: first line must be the title '# <fix-name>'"
    assert f"{FILE}:1: missing section '## Verify'" in found
    assert len(found) == 3 + 5 + 5  # title, summary, table; 5 fields; 5 sections


# ---------------------------------------------------------------- updates (pure)

SHA = "0123456789abcdef0123456789abcdef01234567"
ENTRY = (
    f"- 2026-09-10: 0001-seed.patch dropped; upstream took it in vllm-project/vllm-gaudi@{SHA} "
    "(vllm-project/vllm-gaudi#1919)."
)


def take(
    text: str,
    pr: str | UpstreamRef = "vllm-project/vllm-gaudi#1919",
    *,
    patch: str = "0001-seed.patch",
    commit: str = SHA,
) -> str:
    return record_upstream_take(text, FILE, patch=patch, commit=commit, pr=pr, on=date(2026, 9, 10))


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    pairs = zip(before.splitlines(), after.splitlines(), strict=False)
    return [(a, b) for a, b in pairs if a != b]


def test_record_take_sets_merged_and_appends_history() -> None:
    after = take(VALID)
    expected = VALID.replace("#1919 (open)", "#1919 (merged)")
    assert after == f"{expected}\n## Upstream history\n\n{ENTRY}\n"
    page, problems = parse_fix_page(after, FILE)
    assert problems == ()
    assert page.upstream == (UpstreamEntry("vllm-project/vllm-gaudi", 1919, "merged"),)
    assert page.section("Upstream history") == ENTRY


def test_record_take_is_idempotent() -> None:
    once = take(VALID, UpstreamRef("vllm-project/vllm-gaudi", 1919))
    assert take(once) == once


def test_record_take_appends_to_existing_history_byte_stable() -> None:
    before = VALID + "\n## Upstream history\n\n- 2026-01-01: earlier entry.\n\n"
    expected = before.replace("#1919 (open)", "#1919 (merged)").replace(
        "- 2026-01-01: earlier entry.\n", f"- 2026-01-01: earlier entry.\n{ENTRY}\n"
    )
    assert take(before) == expected


def test_record_take_with_history_in_the_middle() -> None:
    before = VALID.replace("## Verify", "## Upstream history\n\n- old.\n\n## Verify")
    assert f"- old.\n{ENTRY}\n\n## Verify" in take(before)


def test_record_take_without_final_newline() -> None:
    after = take(VALID.rstrip("\n"))
    assert after.endswith(f"outputs.\n\n## Upstream history\n\n{ENTRY}\n")


def test_record_take_by_another_pr_supersedes_open_entries() -> None:
    after = take(VALID, "vllm-project/vllm-gaudi#2001")
    assert changed_lines(VALID, after) == [
        (
            "| Upstream | vllm-project/vllm-gaudi#1919 (open) |",
            "| Upstream | vllm-project/vllm-gaudi#1919 (superseded by vllm-project/vllm-gaudi#2001); "
            "vllm-project/vllm-gaudi#2001 (merged) |",
        )
    ]
    assert after.endswith("(vllm-project/vllm-gaudi#2001).\n")


def test_record_take_keeps_crlf() -> None:
    after = take(VALID.replace("\n", "\r\n"))
    assert "\n" not in after.replace("\r\n", "")
    assert after.endswith(f"\r\n## Upstream history\r\n\r\n{ENTRY}\r\n")


def test_record_take_refuses_bad_arguments() -> None:
    with pytest.raises(PageUpdateError, match="malformed PR ref '1919'"):
        take(VALID, "1919")
    with pytest.raises(PageUpdateError, match="bad commit 'xyz'"):
        take(VALID, commit="xyz")
    with pytest.raises(PageUpdateError, match=r"does not name patch '0009-other\.patch'"):
        take(VALID, patch="0009-other.patch")


def test_record_take_refuses_a_page_with_problems() -> None:
    with pytest.raises(PageUpdateError, match="cannot update a fix page with problems"):
        take(with_row("Upstream", "vllm-project/vllm-gaudi#1919 (mergd)"))


def test_update_upstream_rewrites_only_the_cell() -> None:
    entries = [UpstreamEntry("vllm-project/vllm-gaudi", 1919, "reverted")]
    after = update_upstream(VALID, FILE, entries)
    assert after == VALID.replace("#1919 (open)", "#1919 (reverted)")


# ---------------------------------------------------------------- links


def test_http_links_are_accepted_anywhere_on_the_page() -> None:
    text = VALID.replace(
        "Rows keep a stale token.",
        "Rows keep a [stale token](https://github.com/vllm-project/vllm/issues/1).\n"
        "See <http://example.com/log> and ![plot](https://example.com/p.png).",
    )
    assert messages(text) == []


@pytest.mark.parametrize(
    ("markdown", "target"),
    [
        ("[log](javascript:alert(1))", "javascript:alert(1)"),
        ("<JavaScript:alert(1)>", "JavaScript:alert(1)"),
        ("![x](data:text/html,hi)", "data:text/html,hi"),
        ("[notes](../other/page.md)", "../other/page.md"),
        ("[mail](mailto:dev@example.com)", "mailto:dev@example.com"),
        ("[ref]\n\n[ref]: vbscript:msgbox", "vbscript:msgbox"),
    ],
)
def test_a_link_that_is_not_http_is_refused_on_its_line(markdown: str, target: str) -> None:
    text = VALID.replace("Rows keep a stale token.", f"Rows keep a stale token.\n{markdown}")
    line = 17 if "\n\n[ref]:" not in markdown else 19  # the link's or the definition's
    assert messages(text) == at(
        line,
        f"link {target!r} is not an http(s) URL: only http:// and https:// links are accepted",
    )


def test_a_link_shown_as_code_is_not_a_link() -> None:
    text = VALID.replace("Rows keep a stale token.", "Write `[x](javascript:y)` nowhere.")
    assert messages(text) == []


# ---------------------------------------------------------------- owners (optional)


def with_owners(value: str) -> str:
    test_row = "| Test | none (covered by the end-to-end check) |\n"
    return VALID.replace(test_row, f"{test_row}| Owners | {value} |\n")


def test_owners_are_optional_github_logins_each_once() -> None:
    page, problems = parse_fix_page(VALID, FILE, expected_name="async-inputs")
    assert problems == () and page.owners == ()
    page, problems = parse_fix_page(with_owners("@alice, bob-2, @Alice"), FILE)
    assert problems == () and page.owners == ("alice", "bob-2")


def test_a_bad_owner_is_named_with_its_line() -> None:
    assert messages(with_owners("@alice, @-bob, @c d")) == [
        f"{FILE}:13: bad owner '@-bob' (expected '@login, @login': GitHub logins)",
        f"{FILE}:13: bad owner '@c d' (expected '@login, @login': GitHub logins)",
    ]
