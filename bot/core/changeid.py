"""An id for the changes a diff makes, without their context lines.

Pure. git's patch id hashes each hunk's context with its changes, so a fix cherry-picked onto a
line whose surrounding code differs (a release branch, a fork) gets another id although it
changes exactly the same lines. This id keeps, for each file, every hunk's section heading (the
enclosing function git names after the second `@@`) and its added and removed lines in order,
without whitespace: two diffs with the same id make the same changes to the same functions of
the same files, in the same order. Section headings come from the diff driver of whoever made
the diff; where they differ the ids differ, and a caller falls back to what it did before. A
heading that is an import (git's default names the last unindented line above a hunk, at the
top of a file an import that differs between two lines of a project) stands for the top of the
file, whichever import it names.

None when there is nothing to compare safely: no changed line with text, a binary diff, or a
hunk header that cannot be read.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["change_id"]

_HUNK = re.compile(rb"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@(.*)$")
_SKIPPED_HEADERS = (b"index ", b"similarity index ", b"dissimilarity index ", b"--- ", b"+++ ")
_BINARY = (b"GIT binary patch", b"Binary files ")
_IMPORTS = (b"import ", b"from ", b"#include", b"#import", b"use ", b"using ", b"package ")


def change_id(diff: bytes) -> str | None:
    """The changes-without-context id of `diff` (one or more `diff --git` sections, text before
    the first ignored, a mail signature after the last hunk ignored), or None."""
    files: dict[bytes, list[bytes]] = {}
    current: list[bytes] | None = None
    old = new = 0  # lines still to read in the current hunk, per side
    changed = False
    for line in diff.split(b"\n"):
        line = line.rstrip(b"\r")
        if line.startswith(b"diff --git ") and old <= 0 and new <= 0:
            current = files.setdefault(line, [])
            old = new = 0
            continue
        if current is None:
            continue
        if old > 0 or new > 0:
            sign, text = line[:1], b"".join(line[1:].split())
            if sign == b" " or line == b"":
                old, new = old - 1, new - 1
            elif sign == b"-":
                old -= 1
            elif sign == b"+":
                new -= 1
            elif sign == b"\\":
                continue
            else:
                return None  # a hunk shorter than its header says, or not a diff
            if sign in (b"-", b"+") and text:
                current.append(sign + text)
                changed = True
            continue
        if line.startswith(b"@@"):
            hunk = _HUNK.match(line)
            if hunk is None:
                return None
            old = int(hunk.group(1)) if hunk.group(1) is not None else 1
            new = int(hunk.group(2)) if hunk.group(2) is not None else 1
            heading = hunk.group(3).strip()
            current.append(
                b"@" + (b"" if heading.startswith(_IMPORTS) else b"".join(heading.split()))
            )
            continue
        if line.startswith(_BINARY):
            return None
        if line and not line.startswith(_SKIPPED_HEADERS) and not _after_hunks(current):
            current.append(b"#" + line)  # new file mode, deleted file, rename from, ...
    if not changed or old > 0 or new > 0:
        return None
    digest = hashlib.sha1()
    for header in sorted(files):
        digest.update(header + b"\n" + b"\n".join(files[header]) + b"\n")
    return digest.hexdigest()


def _after_hunks(lines: list[bytes]) -> bool:
    """The file's hunks have begun: a line now is trailing text (a mail signature), not a
    header."""
    return any(entry.startswith(b"@") for entry in lines)
