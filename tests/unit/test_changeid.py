"""changeid.change_id: the same changed lines in the same functions, whatever their context."""

from __future__ import annotations

from bot.core.changeid import change_id
from bot.core.patchid import patch_id


def diff(context: str, heading: str = "def decode(batch):", added: str = "cap=MAX") -> bytes:
    return (
        "diff --git a/runner.py b/runner.py\n"
        "index 1111111..2222222 100644\n"
        "--- a/runner.py\n"
        "+++ b/runner.py\n"
        f"@@ -10,4 +10,5 @@ {heading}\n"
        "     tokens = batch.tokens\n"
        f"     {context}\n"
        "-    limit = compute_limit(batch)\n"
        f"+    limit = compute_limit(batch, {added})\n"
        "+    check_limit(limit)\n"
        "     return run(tokens, limit)\n"
    ).encode()


RELEASE = diff("# the release line's own note")
MAIN = diff("# main's note, reworded")


def test_the_same_changes_with_other_context_have_one_id_where_patch_ids_differ():
    assert patch_id(RELEASE) != patch_id(MAIN)  # git's id hashes the context
    assert change_id(RELEASE) is not None
    assert change_id(RELEASE) == change_id(MAIN)


def test_the_same_changes_in_another_function_differ():
    assert change_id(diff("# note", heading="def prefill(batch):")) != change_id(diff("# note"))


def test_an_import_heading_stands_for_the_top_of_the_file():
    top = diff("# note", heading="import torch")
    assert change_id(diff("# note", heading="import torch.nn.functional as F")) == change_id(top)
    assert change_id(diff("# note", heading="from torch import nn")) == change_id(top)
    assert change_id(diff("# note", heading="def decode(batch):")) != change_id(top)


def test_another_changed_line_differs():
    assert change_id(diff("# note", added="cap=MIN")) != change_id(diff("# note"))


def test_whitespace_inside_lines_does_not_count_as_git_patch_id_does_not():
    spaced = RELEASE.replace(b"compute_limit(batch, cap=MAX)", b"compute_limit(batch,  cap=MAX)")
    assert change_id(spaced) == change_id(RELEASE)


def test_a_mail_around_the_diff_is_not_part_of_it():
    mail = b"From 0123 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] Cap the limit\n\n---\n"
    assert change_id(mail + MAIN + b"-- \n2.43.0\n\n") == change_id(MAIN)


def test_the_order_of_files_does_not_count():
    other = MAIN.replace(b"runner.py", b"worker.py")
    assert change_id(MAIN + other) == change_id(other + MAIN)
    assert change_id(MAIN + other) != change_id(MAIN)


def test_a_file_mode_or_new_file_header_counts():
    new = MAIN.replace(b"index 1111111", b"new file mode 100644\nindex 1111111")
    assert change_id(new) != change_id(MAIN)


def test_nothing_to_compare_gives_none():
    blank = b"diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n x\n-\n+  \n"
    binary = (
        b"diff --git a/a.bin b/a.bin\nindex 1..2 100644\nBinary files a/a.bin and b/a.bin differ\n"
    )
    short = MAIN.rsplit(b"\n", 3)[0] + b"\ndiff --git a/b b/b\n"  # a hunk cut short
    assert change_id(blank) is None
    assert change_id(binary) is None
    assert change_id(short) is None
    assert change_id(b"") is None
