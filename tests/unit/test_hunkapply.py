"""apply_hunks on a table of files and patches, with what `git apply --cached` makes of them
(each expected value was checked against git 2.39 once; this test runs no git)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from bot.core.hunkapply import FileApply, apply_hunks
from bot.core.patchfile import Hunk, parse_patch

NO_EOL = "\\ No newline at end of file"


def hunks_of(*body: str) -> tuple[Hunk, ...]:
    """Hunks of a one-file git diff whose lines after the header are `body` ('\\n' added)."""
    text = "diff --git a/f b/f\n--- a/f\n+++ b/f\n" + "".join(f"{line}\n" for line in body)
    return parse_patch(text.encode()).files[0].hunks


@dataclass(frozen=True)
class Case:
    id: str
    content: bytes
    body: tuple[str, ...]
    result: bytes | None  # None: the patch does not apply
    offsets: tuple[int, ...] = (0,)
    failed_hunk: int | None = None
    reverse: bool = False


ABCDE = b"a\nb\nc\nd\ne\n"
CHANGE_C = ("@@ -2,3 +2,3 @@", " b", "-c", "+C", " d")

CASES = [
    Case("in place", ABCDE, CHANGE_C, b"a\nb\nC\nd\ne\n"),
    Case("shifted down", b"x\ny\n" + ABCDE, CHANGE_C, b"x\ny\na\nb\nC\nd\ne\n", (2,)),
    Case("shifted up", b"b\nc\nd\ne\n", CHANGE_C, b"b\nC\nd\ne\n", (-1,)),
    Case(
        "equal distances: forward wins",
        b"z\nz\nk\nq\nk\nq\nk\nz\n",
        ("@@ -4,3 +4,3 @@", " k", "-q", "+Q", " k"),
        b"z\nz\nk\nq\nk\nQ\nk\nz\n",
        (1,),
    ),
    Case(
        "nearest wins over forward",
        b"z\nk\nq\nk\nz\nz\nz\nk\nq\nk\n",
        ("@@ -3,3 +3,3 @@", " k", "-q", "+Q", " k"),
        b"z\nk\nQ\nk\nz\nz\nz\nk\nq\nk\n",
        (-1,),
    ),
    Case(
        "line 1 hunk is anchored at the beginning",
        b"x\na\nb\nc\n",
        ("@@ -1,2 +1,2 @@", "-a", "+A", " b"),
        None,
        (),
        0,
    ),
    Case(
        "line 1 hunk at the beginning",
        b"a\nb\nc\n",
        ("@@ -1,2 +1,2 @@", "-a", "+A", " b"),
        b"A\nb\nc\n",
    ),
    Case(
        "no trailing context: anchored at the end",
        b"a\nb\nc\n",
        ("@@ -2,2 +2,2 @@", " a", "-b", "+B"),
        None,
        (),
        0,
    ),
    Case(
        "no trailing context: found at the end",
        b"x\nx\na\nb\n",
        ("@@ -2,2 +2,2 @@", " a", "-b", "+B"),
        b"x\nx\na\nB\n",
        (1,),
    ),
    Case("zero context, not at the end", b"a\nb\nc\n", ("@@ -2 +2 @@", "-b", "+B"), None, (), 0),
    Case("zero context, at the end", b"a\nb\n", ("@@ -2 +2 @@", "-b", "+B"), b"a\nB\n"),
    Case(
        "zero-context insertion lands at the end",
        b"a\nb\nc\n",
        ("@@ -2,0 +3 @@", "+n"),
        b"a\nb\nc\nn\n",
        (1,),
    ),
    Case(
        "zero-context insertion after line 1 only fits an empty file",
        b"a\nb\n",
        ("@@ -1,0 +2 @@", "+n"),
        None,
        (),
        0,
    ),
    Case("addition to an empty file", b"", ("@@ -0,0 +1,2 @@", "+a", "+b"), b"a\nb\n"),
    Case(
        "addition meant for an empty file",
        b"x\n",
        ("@@ -0,0 +1,2 @@", "+a", "+b"),
        None,
        (),
        0,
    ),
    Case(
        "adds the final newline",
        b"a\nb",
        ("@@ -1,2 +1,2 @@", " a", "-b", NO_EOL, "+b"),
        b"a\nb\n",
    ),
    Case(
        "removes the final newline",
        b"a\nb\n",
        ("@@ -1,2 +1,2 @@", " a", "-b", "+b", NO_EOL),
        b"a\nb",
    ),
    Case(
        "expects a final newline the file lacks",
        b"a\nb",
        ("@@ -1,2 +1,2 @@", " a", "-b", "+B"),
        None,
        (),
        0,
    ),
    Case(
        "context without newline on both sides",
        b"a\nb",
        ("@@ -1,2 +1,2 @@", "-a", "+A", " b", NO_EOL),
        b"A\nb",
    ),
    # git compares the bytes of an incomplete last line as a prefix of the file's line, and the
    # per-line hash skips whitespace: so it matches "b\n" and "b \n", and joins the next line.
    Case(
        "incomplete context matches a longer line",
        b"a\nb\nc\n",
        ("@@ -1,2 +1,2 @@", "-a", "+A", " b", NO_EOL),
        b"A\nbc\n",
    ),
    Case(
        "incomplete context matches a line with more whitespace",
        b"a\nb \nc\n",
        ("@@ -1,2 +1,2 @@", "-a", "+A", " b", NO_EOL),
        b"A\nbc\n",
    ),
    Case(
        "incomplete context does not match a line with more text",
        b"a\nbx\nc\n",
        ("@@ -1,2 +1,2 @@", "-a", "+A", " b", NO_EOL),
        None,
        (),
        0,
    ),
    Case(
        "CRLF lines",
        b"a\r\nb\r\nc\r\n",
        ("@@ -1,3 +1,3 @@", " a\r", "-b\r", "+B\r", " c\r"),
        b"a\r\nB\r\nc\r\n",
    ),
    Case(
        "LF patch on CRLF file",
        b"a\r\nb\r\nc\r\n",
        ("@@ -1,3 +1,3 @@", " a", "-b", "+B", " c"),
        None,
        (),
        0,
    ),
    Case(
        "whitespace is not fuzzed",
        b"a\nb \nc\nd\n",
        ("@@ -1,3 +1,3 @@", " a", "-b", "+B", " c"),
        None,
        (),
        0,
    ),
    Case(
        "second hunk expected after the first one's added lines",
        ABCDE + b"f\ng\nh\n",
        ("@@ -1,2 +1,4 @@", " a", "+n", "+n", " b", "@@ -6,3 +8,3 @@", " f", "-g", "+G", " h"),
        b"a\nn\nn\nb\nc\nd\ne\nf\nG\nh\n",
        (0, 0),
    ),
    Case(
        "second hunk moved by a drift between the hunks",
        b"a\nb\nc\nx\nd\ne\nf\ng\nh\n",
        ("@@ -1,2 +1,4 @@", " a", "+n", "+n", " b", "@@ -6,3 +8,3 @@", " f", "-g", "+G", " h"),
        b"a\nn\nn\nb\nc\nx\nd\ne\nf\nG\nh\n",
        (0, 1),
    ),
    Case(
        "second hunk fails",
        ABCDE + b"f\ng\nh\n",
        ("@@ -1,2 +1,4 @@", " a", "+n", "+n", " b", "@@ -6,3 +8,3 @@", " f", "-x", "+G", " h"),
        None,
        (0,),
        1,
    ),
    Case(
        "a later hunk never matches lines an earlier one wrote",
        b"s\nt\nu\nv\nw\n",
        (
            "@@ -2,2 +2,5 @@",
            " t",
            "+p",
            "+q",
            "+p",
            " u",
            "@@ -9,3 +12,3 @@",
            " p",
            "-q",
            "+Q",
            " p",
        ),
        None,
        (0,),
        1,
    ),
    Case(
        "reverse undoes the change",
        b"a\nb\nC\nd\ne\n",
        CHANGE_C,
        ABCDE,
        reverse=True,
    ),
    Case(
        "reverse, shifted",
        b"x\na\nb\nC\nd\ne\n",
        CHANGE_C,
        b"x\n" + ABCDE,
        (1,),
        reverse=True,
    ),
    Case(
        "reverse anchors on the new side's start",
        b"x\nA\nb\n",
        ("@@ -2,2 +1,2 @@", "-a", "+A", " b"),
        None,
        (),
        0,
        reverse=True,
    ),
    Case(
        "reverse of an addition to an empty file",
        b"a\nb\n",
        ("@@ -0,0 +1,2 @@", "+a", "+b"),
        b"",
        reverse=True,
    ),
    Case(
        "reverse does not apply the forward change",
        ABCDE,
        CHANGE_C,
        None,
        (),
        0,
        reverse=True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_apply_hunks_matches_git(case: Case):
    result = apply_hunks(case.content, hunks_of(*case.body), reverse=case.reverse)
    assert result == FileApply(
        ok=case.result is not None,
        content=case.result,
        offsets=case.offsets,
        failed_hunk=case.failed_hunk,
    )
    assert result.moved == any(case.offsets)


def hunk(*lines: bytes, old: tuple[int, int] = (1, 1), new: tuple[int, int] = (1, 1)) -> Hunk:
    return Hunk(old[0], old[1], new[0], new[1], b"", lines)


MARKER = b"\\ No newline at end of file\n"


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(hunk(b" a\n"), id="no change"),
        pytest.param(hunk(b"-a\n", b"+b\n", old=(1, 2)), id="old count wrong"),
        pytest.param(hunk(b"-a\n", b"+b\n", new=(1, 2)), id="new count wrong"),
        pytest.param(hunk(b"-a\n", b"+b"), id="line without newline"),
        pytest.param(hunk(b"-a\n", b"*b\n"), id="unknown line tag"),
        pytest.param(hunk(b"-a\n", b"+b\n", b"\\ x\n"), id="marker too short"),
        pytest.param(hunk(b"-a\n", b"+b\n", b"\\No newline\n"), id="marker without space"),
        pytest.param(hunk(b"-a\n", b"+b\n", b"\\ 12 bytes.\n"), id="marker git may leave out"),
        pytest.param(hunk(MARKER, b"-a\n", b"+b\n"), id="marker first"),
        pytest.param(hunk(b"-a\n", b"+b\n", MARKER, MARKER), id="two markers"),
        pytest.param(
            hunk(b"-a\n", b"+b\n", b" \n", MARKER, old=(1, 2), new=(1, 2)),
            id="empty line without newline",
        ),
    ],
)
def test_hunks_git_might_read_otherwise_are_refused(bad: Hunk):
    assert apply_hunks(b"a\n", [bad]) == FileApply(False, None, (), 0)


def test_well_formed_twin_of_the_refused_hunks_applies():
    assert apply_hunks(b"a\n", [hunk(b"-a\n", b"+b\n", MARKER)]).content == b"b"


def test_no_hunks_leave_the_content_as_it_is():
    assert apply_hunks(b"a\r\nb", []) == FileApply(True, b"a\r\nb", (), None)


def test_lines_split_on_newline_only():
    # git splits lines on b"\n" alone: a b"\r" inside a line is ordinary text.
    hunks = hunks_of("@@ -3,3 +3,3 @@", " c", "-d", "+D", " e")
    assert apply_hunks(b"a\nb\rc\nd\ne\n", hunks) == FileApply(False, None, (), 0)
    inner_cr = hunk(b"-a\rb\n", b"+X\n", b" c\n", old=(1, 2), new=(1, 2))
    assert apply_hunks(b"a\rb\nc\n", [inner_cr]).content == b"X\nc\n"
