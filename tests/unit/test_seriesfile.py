"""The `series` file: parsing, every problem with its line, deterministic writing."""

from __future__ import annotations

import pytest

from bot.core.fixpage import PageProblem
from bot.core.seriesfile import (
    SeriesFile,
    parse_series,
    render_series,
    validate_series,
    with_base,
    with_patches,
    without_patch,
)

FILE = "patches/x/series"
SHA = "b059f9c95d6a07f19eb00aa06d1ec8b87b296437"
CANONICAL = f"""\
# base: {SHA}
# keep 0002 until the fork picks it up
0001-first.patch
0002-second-one.patch
"""
AWAITING = (
    "vllm-project/vllm#53899 (head of the PR) + 0001 + 0002 semaphore reset; "
    "run: carry import --series ple-offload-pr53899 --pr vllm-project/vllm#53899"
)


def messages(text: str) -> list[str]:
    return [str(p) for p in parse_series(text, FILE)[1]]


def test_parse_canonical() -> None:
    series, problems = parse_series(CANONICAL, FILE)
    assert problems == ()
    assert series.patches == ("0001-first.patch", "0002-second-one.patch")
    assert series.base == SHA
    assert series.awaiting_import is None
    assert not series.is_awaiting_import
    assert series.import_command is None
    assert series.comments == ("keep 0002 until the fork picks it up",)
    assert series.line_of("0002-second-one.patch") == 4
    assert series.line_of("0009-absent.patch") == 0


def test_blank_lines_comments_and_crlf_are_tolerated() -> None:
    text = f"\r\n  # base: {SHA}  \r\n\r\n0001-first.patch\r\n#\r\n  0002-second-one.patch  \r\n"
    series, problems = parse_series(text, FILE)
    assert problems == ()
    assert series.patches == ("0001-first.patch", "0002-second-one.patch")
    assert series.comments == ("",)
    assert series.patch_lines == (4, 6)


def test_awaiting_import() -> None:
    series, problems = parse_series(f"# awaiting-import: {AWAITING}\n", FILE)
    assert problems == ()
    assert series.is_awaiting_import
    assert series.awaiting_import == AWAITING
    assert series.patches == ()
    assert series.base is None
    assert series.import_command == (
        "carry import --series ple-offload-pr53899 --pr vllm-project/vllm#53899"
    )


def test_awaiting_import_without_command() -> None:
    series, _ = parse_series("# awaiting-import: some PR\n", FILE)
    assert series.import_command is None


def test_empty_file_is_an_empty_series() -> None:
    assert parse_series("", FILE) == (SeriesFile(), ())
    assert render_series(SeriesFile()) == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "0001-first.patch -p1\n",
            "1: bad patch name '0001-first.patch -p1' (expected NNNN-slug.patch, one per line)",
        ),
        (
            "first.patch\n",
            "1: bad patch name 'first.patch' (expected NNNN-slug.patch, one per line)",
        ),
        (
            "1-first.patch\n",
            "1: bad patch name '1-first.patch' (expected NNNN-slug.patch, one per line)",
        ),
        (
            "0001-first.diff\n",
            "1: bad patch name '0001-first.diff' (expected NNNN-slug.patch, one per line)",
        ),
        (
            "0001-first.patch\n\n0001-first.patch\n",
            "3: duplicate entry '0001-first.patch' (first listed on line 1)",
        ),
        (
            "0001-first.patch\n0001-other.patch\n",
            "2: '0001-other.patch' reuses number 0001 of '0001-first.patch'",
        ),
        (
            "0002-b.patch\n0001-a.patch\n",
            "2: '0001-a.patch' is listed after '0002-b.patch' (keep numeric order)",
        ),
        ("# base: b059f9c\n", "1: bad base sha 'b059f9c' (expected 40 lowercase hex digits)"),
        (
            f"# base: {SHA.upper()}\n",
            f"1: bad base sha '{SHA.upper()}' (expected 40 lowercase hex digits)",
        ),
        ("# base:\n", "1: bad base sha '' (expected 40 lowercase hex digits)"),
        (f"# base: {SHA}\n# base: {SHA}\n", "2: duplicate '# base:' (first on line 1)"),
        (
            "# awaiting-import:   \n",
            "1: '# awaiting-import:' needs the source text and the import command",
        ),
        (
            "# awaiting-import: a\n# awaiting-import: b\n",
            "2: duplicate '# awaiting-import:' (first on line 1)",
        ),
        (
            "# awaiting-import: PR\n0001-a.patch\n",
            "2: the series is awaiting import but lists '0001-a.patch': "
            "run carry import, or remove the '# awaiting-import:' line",
        ),
    ],
)
def test_problems_name_the_line(text: str, expected: str) -> None:
    assert messages(text) == [f"{FILE}:{expected}"]


def test_every_problem_is_reported() -> None:
    text = "# base: nope\nbad name\n0001-a.patch\n0001-a.patch\n"
    assert parse_series(text, FILE)[1] == (
        PageProblem(FILE, 1, "bad base sha 'nope' (expected 40 lowercase hex digits)"),
        PageProblem(FILE, 2, "bad patch name 'bad name' (expected NNNN-slug.patch, one per line)"),
        PageProblem(FILE, 4, "duplicate entry '0001-a.patch' (first listed on line 3)"),
    )


# ---------------------------------------------------------------- writing


def test_render_is_canonical_round_trip() -> None:
    series, _ = parse_series(CANONICAL, FILE)
    assert render_series(series) == CANONICAL
    assert parse_series(render_series(series), FILE)[0] == series


def test_render_normalizes_layout_deterministically() -> None:
    messy = f"\n0001-first.patch\r\n# keep 0002 until the fork picks it up\n# base: {SHA}\n\n0002-second-one.patch"
    series, problems = parse_series(messy, FILE)
    assert problems == ()
    assert render_series(series) == CANONICAL
    assert render_series(series).encode() == render_series(parse_series(CANONICAL)[0]).encode()


def test_built_value_renders_like_parsed_value() -> None:
    built = SeriesFile(
        patches=("0001-first.patch", "0002-second-one.patch"),
        base=SHA,
        comments=("keep 0002 until the fork picks it up",),
    )
    assert built == parse_series(CANONICAL)[0]  # line numbers are not part of the value
    assert render_series(built) == CANONICAL


def test_render_awaiting_import() -> None:
    series = SeriesFile(awaiting_import=AWAITING)
    assert render_series(series) == f"# awaiting-import: {AWAITING}\n"
    assert parse_series(render_series(series))[0] == series


def test_updates() -> None:
    series, _ = parse_series(CANONICAL)
    new_base = "091bbadda10bee4fd3f6d0efc1844d2610dd2707"
    assert render_series(with_base(series, new_base)) == CANONICAL.replace(SHA, new_base)
    dropped = without_patch(series, "0001-first.patch")
    assert render_series(dropped) == CANONICAL.replace("0001-first.patch\n", "")
    assert dropped.line_of("0002-second-one.patch") == 0
    filled = with_patches(SeriesFile(awaiting_import=AWAITING), ["0001-a.patch", "0002-b.patch"])
    assert render_series(filled) == "0001-a.patch\n0002-b.patch\n"
    assert validate_series(filled) == []


def test_update_refusals() -> None:
    series, _ = parse_series(CANONICAL)
    with pytest.raises(ValueError, match="bad base sha 'abc'"):
        with_base(series, "abc")
    with pytest.raises(ValueError, match="not in the series"):
        without_patch(series, "0009-x.patch")
    with pytest.raises(ValueError, match="bad patch name 'x'"):
        with_patches(series, ["x"])
    with pytest.raises(ValueError, match="duplicate patch names"):
        with_patches(series, ["0001-a.patch", "0001-a.patch"])


def test_validate_built_value() -> None:
    bad = SeriesFile(patches=("0002-b.patch", "0001-a.patch"))
    assert validate_series(bad, FILE) == [
        PageProblem(FILE, 2, "'0001-a.patch' is listed after '0002-b.patch' (keep numeric order)")
    ]
