"""patch_id on hand-written diffs, against ids real git printed for them.

Every id below was produced once with git 2.39.5, feeding the diff as carry does:
`printf 'commit %040x\\n' 1 | cat - diff | git patch-id --stable` (GIT_CONFIG_GLOBAL=/dev/null,
GIT_CONFIG_NOSYSTEM=1). tests/integration/test_patchid_vs_git.py compares with git live.
"""

from __future__ import annotations

import pytest

from bot.core.patchid import patch_id

SIMPLE = (
    b"diff --git a/f.txt b/f.txt\n"
    b"index 5626abf..8e4b0b7 100644\n"
    b"--- a/f.txt\n"
    b"+++ b/f.txt\n"
    b"@@ -1,3 +1,3 @@\n"
    b" one\n"
    b"-two\n"
    b"+TWO\n"
    b" three\n"
)
SIMPLE_ID = "fb2a55ab9ce359de61f99262159243d449434518"

OTHER = (
    b"diff --git a/dir/g.c b/dir/g.c\n"
    b"new file mode 100644\n"
    b"index 0000000..e69de29\n"
    b"--- /dev/null\n"
    b"+++ b/dir/g.c\n"
    b"@@ -0,0 +1,2 @@\n"
    b"+int x;\n"
    b"+int y;\n"
)
TWO_FILES_ID = "a6e40fa81b4da239972a5a86c50aee976274afca"

# Only whitespace differs from SIMPLE (spaces, tabs, CRLF, an index line with no mode): git
# drops all of it, and index lines altogether.
SIMPLE_WHITESPACE = (
    b"diff  --git a/f.txt b/f.txt\r\n"
    b"index 5626abf..8e4b0b7\n"
    b"--- a/f.txt\n"
    b"+++ b/f.txt\t\n"
    b"@@ -1,3 +1,3 @@\n"
    b" on e\r\n"
    b"-two\t\n"
    b"+ T W O\n"
    b"  three \n"
)

SIGNATURE = b"-- \n2.39.5\n\n"

NO_NEWLINE = (
    b"diff --git a/n.txt b/n.txt\n"
    b"index 3367afd..3e75765 100644\n"
    b"--- a/n.txt\n"
    b"+++ b/n.txt\n"
    b"@@ -1 +1 @@\n"
    b"-old\n"
    b"\\ No newline at end of file\n"
    b"+new\n"
    b"\\ No newline at end of file\n"
)
NO_NEWLINE_ID = "6bf2fd50b00f590f4442bb327be80a49c28a6685"

# A file with a mode change and no hunks shares its hash with the file after it (git 2.39), so
# here the order of files matters.
MODE_ONLY = b"diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"
MODE_THEN_SIMPLE_ID = "90a9cd1223f093ddf00cb4379fbb21b4ab0facb8"
SIMPLE_THEN_MODE_ID = "032c14a3367f6c0d6feddd68783251c242bde858"

BINARY_LITERAL = (
    b"diff --git a/pic.bin b/pic.bin\n"
    b"new file mode 100644\n"
    b"index 0000000000000000000000000000000000000000..4a1c1cd3b7bbd8d9fe3a2d5a0d1f3f4b6c0f1a2b\n"
    b"GIT binary patch\n"
    b"literal 3\n"
    b"KcmZQzWMT#Y01f~L\n"
    b"\n"
    b"literal 0\n"
    b"HcmV?d00001\n"
    b"\n"
)
BINARY_DIFFER = (
    b"diff --git a/pic.bin b/pic.bin\n"
    b"index 4a1c1cd..9e2e2b1 100644\n"
    b"Binary files a/pic.bin and b/pic.bin differ\n"
)


@pytest.mark.parametrize(
    ("diff", "expected"),
    [
        pytest.param(SIMPLE, SIMPLE_ID, id="simple"),
        pytest.param(SIMPLE + OTHER, TWO_FILES_ID, id="two-files"),
        pytest.param(OTHER + SIMPLE, TWO_FILES_ID, id="two-files-swapped"),
        pytest.param(SIMPLE_WHITESPACE, SIMPLE_ID, id="whitespace-only"),
        pytest.param(SIMPLE + SIGNATURE, SIMPLE_ID, id="signature"),
        pytest.param(SIMPLE + b"\n\n", SIMPLE_ID, id="trailing-blank-lines"),
        pytest.param(SIMPLE.rstrip(b"\n"), SIMPLE_ID, id="no-final-newline-in-diff"),
        pytest.param(NO_NEWLINE, NO_NEWLINE_ID, id="no-newline-at-eof"),
        pytest.param(NO_NEWLINE + SIGNATURE, NO_NEWLINE_ID, id="no-newline-at-eof-signature"),
        pytest.param(MODE_ONLY + SIMPLE, MODE_THEN_SIMPLE_ID, id="mode-then-change"),
        pytest.param(SIMPLE + MODE_ONLY + SIGNATURE, SIMPLE_THEN_MODE_ID, id="change-then-mode"),
    ],
)
def test_ids_git_printed(diff: bytes, expected: str):
    assert patch_id(diff) == expected


@pytest.mark.parametrize(
    "diff",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"Subject: only a message\n\nno diff here\n", id="message-only"),
        pytest.param(SIMPLE[SIMPLE.index(b"--- ") :], id="no-diff-git-line"),
    ],
)
def test_no_id_where_git_prints_none(diff: bytes):
    assert patch_id(diff) is None


@pytest.mark.parametrize(
    "diff",
    [
        pytest.param(BINARY_LITERAL, id="git-binary-patch"),
        pytest.param(BINARY_DIFFER, id="binary-files-differ"),
        pytest.param(SIMPLE + BINARY_DIFFER, id="text-and-binary"),
        pytest.param(SIMPLE.replace(b"TWO", b"T\0O"), id="nul-byte"),
        pytest.param(SIMPLE + b"commit " + b"ab" * 20 + b"\n" + SIMPLE, id="second-commit"),
        pytest.param(SIMPLE + b"\n" + OTHER, id="second-patch-after-blank-line"),
    ],
)
def test_unsure_gives_none(diff: bytes):
    assert patch_id(diff) is None
