"""The patch file parser: a table of inputs and what it must read from them."""

from __future__ import annotations

import pytest

from bot.core.patchfile import PatchFileError, parse_patch

MAIL = (
    b"From 1234567890abcdef1234567890abcdef12345678 Mon Sep 17 00:00:00 2001\n"
    b"From: =?UTF-8?q?J=C3=BCrgen?= <j@example.com>\n"
    b"Date: Thu, 1 Jan 2026 10:00:00 +0200\n"
    b"Subject: [PATCH v2 2/3] Reset the semaphore\n"
    b" before launch\n"
    b"X-Mailer: hand\n"
    b"\n"
    b"Body line one.\n\nSigned-off-by: J <j@example.com>\n---\n x | 2 +-\n\n"
)
HUNK = b"diff --git a/x b/x\nindex 1111111..2222222 100644\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"


def test_mail_header_is_read():
    patch = parse_patch(MAIL + HUNK + b"-- \n2.39.5\n\n")
    meta = patch.meta
    assert (meta.author_name, meta.author_email) == ("Jürgen", "j@example.com")
    assert meta.subject == "Reset the semaphore before launch"
    assert meta.body == "Body line one.\n\nSigned-off-by: J <j@example.com>"
    assert meta.commit == "1234567890abcdef1234567890abcdef12345678"
    assert patch.touched_paths == ("x",)
    (hunk,) = patch.files[0].hunks
    assert (hunk.removed, hunk.added) == ([b"b\n"], [b"c\n"])


@pytest.mark.parametrize(
    ("diff", "paths"),
    [
        (
            b"diff --git a/with space.py b/with space.py\nold mode 100644\nnew mode 100755\n",
            ("with space.py",),
        ),
        (
            b'diff --git "a/caf\\303\\251.py" "b/caf\\303\\251.py"\nold mode 100644\nnew mode 100755\n',
            ("café.py",),
        ),
        (
            b"diff --git a/old dir/a.py b/new dir/a.py\nsimilarity index 100%\n"
            b"rename from old dir/a.py\nrename to new dir/a.py\n",
            ("old dir/a.py", "new dir/a.py"),
        ),
        (
            b"diff --git a/src.c b/copy.c\nsimilarity index 100%\ncopy from src.c\ncopy to copy.c\n",
            ("src.c", "copy.c"),
        ),
        (
            b"diff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\nindex 1111111..0000000\n",
            ("gone.txt",),
        ),
        (b"--- a/plain.txt\n+++ b/plain.txt\n@@ -1 +1 @@\n-x\n+y\n", ("plain.txt",)),
        (
            b"diff --git a/a.txt b/a.txt\r\nindex 1..2 100644\r\n--- a/a.txt\r\n+++ b/a.txt\r\n@@ -1 +1 @@\r\n-\xff\r\n+\xfe\r\n",
            ("a.txt",),
        ),
    ],
)
def test_touched_paths(diff, paths):
    assert parse_patch(diff).touched_paths == paths


def test_file_kinds():
    new = parse_patch(
        b"diff --git a/n b/n\nnew file mode 100755\nindex 0000000..1111111\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n"
    ).files[0]
    assert new.is_new and new.new_mode == "100755" and new.old_path is None
    binary = parse_patch(
        b"diff --git a/b b/b\nindex 1111111..2222222 100644\nGIT binary patch\nliteral 3\nKcmZ>A\n\nliteral 0\nKcmV+b\n\n"
    ).files[0]
    assert binary.binary and binary.new_oid == "2222222"


@pytest.mark.parametrize(
    ("data", "line", "message"),
    [
        (b"", 0, "empty"),
        (b"hello\nworld\n", 0, "not a patch"),
        (b"--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n", 3, "truncated"),
        (b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,1 +1,1 @@\n a\n-b\n+c\n", 4, "more lines"),
        (b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n?oops\n", 5, "unexpected line"),
        (b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -x +1 @@\n", 4, "malformed hunk header"),
        # Paths git apply refuses: they would read or write outside the work tree.
        (
            b"diff --git a/../../x b/../../x\n--- a/../../x\n+++ b/../../x\n@@ -1 +1 @@\n-a\n+b\n",
            1,
            "leaves the repository",
        ),
        (
            b"--- a//etc/passwd\n+++ b//etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",
            1,
            "leaves the repository",
        ),
        (
            b"diff --git a/.git/hooks/x b/.git/hooks/x\nnew file mode 100755\n--- /dev/null\n+++ b/.git/hooks/x\n@@ -0,0 +1 @@\n+boom\n",
            1,
            "inside .git",
        ),
    ],
)
def test_bad_files_name_the_line(data, line, message):
    with pytest.raises(PatchFileError) as err:
        parse_patch(data)
    assert err.value.line == line and message in err.value.message


def test_empty_commit_is_a_valid_empty_patch():
    patch = parse_patch(MAIL)
    assert patch.is_empty and patch.meta.subject == "Reset the semaphore before launch"


def test_a_context_line_without_its_space_is_accepted_only_as_a_bare_newline():
    # git apply takes "\n" as an empty context line, but calls "\r\n" without the space corrupt.
    good = b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n"
    hunk = parse_patch(good).files[0].hunks[0]
    assert hunk.lines[1] == b" \n"
    with pytest.raises(PatchFileError) as caught:
        parse_patch(good.replace(b" a\n\n", b" a\n\r\n"))
    assert caught.value.line == 5


# The header block of a mail patch: (block, whether the plain reader takes it). Every row is
# read by the plain reader and by the email package; where the plain reader takes a block, both
# must read the same fields, and a block it does not take goes to the email package.
HEADER_ROWS = [
    (
        b"From: Ada Lovelace <ada@example.com>\nDate: Thu, 1 Jan 2026 10:00:00 +0200\n"
        b"Subject: [PATCH 1/2] Fix the loader\n",
        True,
    ),
    (b"From: ada@example.com\nSubject: [PATCH] One\n", True),
    (
        b"From: Ada <ada@example.com>\nSubject: [PATCH v2 2/3] Reset the semaphore\n"
        b" before launch\n\tand after\nX-Mailer: hand\n",
        True,
    ),
    (
        b"from: O'Neil Smith-Jones <o.neil+tag@mail.example.org>\nsubject:   two   spaces  \n"
        b"date:  Fri,  2 Jan 2026 10:00:00 +0000\n",
        True,
    ),
    (b"Subject: only a subject\n", True),
    (b"From: Ada <ada@example.com>\n", True),
    (b"X-Other: no sender, no subject\n", True),
    (b"From: Ada <ada@example.com>\nFrom: Bob <bob@example.com>\nSubject: first wins\n", True),
    (b"From: Ada <ada@example.com>\nSubject: [PATCH]\n", True),
    (b"From: Ada <ada@example.com>\nSubject:\n", True),
    (b"From: =?UTF-8?q?J=C3=BCrgen?= <j@example.com>\nSubject: encoded name\n", False),
    (b"From: Ada <ada@example.com>\nSubject: =?UTF-8?q?caf=C3=A9?=\n", False),
    (b'From: "Lovelace, Ada" <ada@example.com>\nSubject: quoted\n', False),
    (b"From: A. Lovelace <ada@example.com>\nSubject: a dot\n", False),
    (b"From: ada@example.com (Ada)\nSubject: a comment\n", False),
    (b"From: Ada <ada@example.com>\r\nSubject: CRLF\r\n", False),
    (b"From: J\xc3\xbcrgen <j@example.com>\nSubject: raw UTF-8\n", False),
    (b"From: Ada <ada@example.com>\nSubject: caf\xc3\xa9\n", False),
    (b"From: Ada  Lovelace <ada@example.com>\nSubject: two spaces in the name\n", True),
    (b"From: Ada\n Lovelace <ada@example.com>\nSubject:x\nDate:d\n", True),
    (b"From: <ada@example.com>\nSubject: angle brackets alone\n", True),
    (b"From: undisclosed-recipients:;\nSubject: a group\n", False),
]


@pytest.mark.parametrize(("block", "plain"), HEADER_ROWS)
def test_the_plain_header_reader_reads_what_the_email_package_reads(block, plain):
    from bot.core.patchfile import _mail_headers, _plain_headers

    fast = _plain_headers(block)
    assert (fast is not None) == plain
    if fast is not None:
        assert fast == _mail_headers(block)
    # and the whole parse of a patch with that header is the same either way
    lines = (
        b"From 1234567890abcdef1234567890abcdef12345678 Mon Sep 17 00:00:00 2001\n"
        + block
        + b"\nBody.\n---\n"
        + HUNK
    )
    meta = parse_patch(lines).meta
    expected = _mail_headers(block.replace(b"\r\n", b"\n"))
    if expected[0]:
        assert (meta.author_name, meta.author_email) == expected[1:3]
