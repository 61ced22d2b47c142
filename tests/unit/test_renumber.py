"""Renumbering a patch whose hunks landed at an offset: plain tables, no git."""

from __future__ import annotations

import pytest

from bot.core.patchfile import parse_patch
from bot.core.renumber import FileMove, blob_id, renumber

PATCH = (
    b"From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001\n"
    b"From: Ada <ada@example.com>\n"
    b"Subject: [PATCH] Fix two things\n"
    b"\n"
    b"---\n"
    b" m.py | 4 ++--\n"
    b"\n"
    b"diff --git a/m.py b/m.py\n"
    b"index 0123456..89abcde 100644\n"
    b"--- a/m.py\n"
    b"+++ b/m.py\n"
    b"@@ -2,3 +2,3 @@ def top():\n"
    b" a\n"
    b"-b\n"
    b"+B\n"
    b" c\n"
    b"@@ -10,2 +10,3 @@ def low():\n"
    b" x\n"
    b"+y\n"
    b" z\n"
    b"-- \n"
    b"2.39.5\n"
)


@pytest.mark.parametrize(
    ("offsets", "first", "second"),
    [
        ((0, 0), b"@@ -2,3 +2,3 @@ def top():\n", b"@@ -10,2 +10,3 @@ def low():\n"),
        ((3, 3), b"@@ -5,3 +5,3 @@ def top():\n", b"@@ -13,2 +13,3 @@ def low():\n"),
        ((-1, 2), b"@@ -1,3 +1,3 @@ def top():\n", b"@@ -12,2 +12,3 @@ def low():\n"),
    ],
)
def test_hunk_headers_follow_the_offsets(offsets, first, second) -> None:
    move = FileMove(offsets, b"old\n", b"new\n")
    out = renumber(PATCH, parse_patch(PATCH), {"m.py": move})
    lines = out.splitlines(keepends=True)
    assert [line for line in lines if line.startswith(b"@@")] == [first, second]
    # Nothing else moves but the index line.
    changed = [a for a, b in zip(PATCH.splitlines(), out.splitlines(), strict=True) if a != b]
    assert all(line.startswith((b"@@", b"index ")) for line in changed)


def test_index_line_names_the_new_blobs_at_the_same_length() -> None:
    move = FileMove((1, 1), b"before\n", b"after\n")
    out = renumber(PATCH, parse_patch(PATCH), {"m.py": move})
    index = next(line for line in out.splitlines() if line.startswith(b"index "))
    old, new = blob_id(b"before\n")[:7], blob_id(b"after\n")[:7]
    assert index == f"index {old}..{new} 100644".encode()


def test_single_line_ranges_are_written_without_a_count() -> None:
    patch = b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -3 +3 @@\n-old\n+new\n"
    out = renumber(patch, parse_patch(patch), {"f": FileMove((4,), b"", b"")})
    assert b"@@ -7 +7 @@\n" in out


def test_a_file_without_a_move_keeps_its_bytes() -> None:
    assert renumber(PATCH, parse_patch(PATCH), {}) == PATCH


def test_blob_id_is_gits() -> None:
    # `printf 'hello\n' | git hash-object --stdin`
    assert blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
