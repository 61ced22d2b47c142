"""The id `git patch-id --stable` prints for one diff, computed without running git.

The model is git 2.39.5's builtin/patch-id.c, read line by line as git reads its standard input.
The diff is taken as one record of the feed `bot.git.history.SeriesHistory` builds: it follows a
`commit <40 hex>` line and is followed by a newline and the next record's `commit` line, or by
the end of the input.

What git does, and this module with it:

* lines before the first `diff ` line are ignored (a commit message, a mail header);
* in a file's header `index ` lines are skipped, every other line is hashed until a `--- ` line
  opens the hunks; a header line that does not start with an ASCII letter ends the patch;
* hunk lines are counted down with the counts of their `@@ -a,b +c,d @@` header (a count left
  out is 1); once both counts reach 0, a line that is neither `@@ -` nor `diff ` ends the patch
  (so a mail signature `-- ` after the last hunk is not hashed);
* `\\ ` lines longer than 12 bytes ("\\ No newline at end of file") are dropped everywhere;
* every hashed line loses its spaces, tabs, CRs and LFs (git's own isspace());
* each file (each `diff ` line that follows a finished hunk) is hashed on its own with SHA-1 and
  the 20-byte digests are summed as little-endian numbers, so the order of files is irrelevant;
  a file without hunks (a mode change, an empty new file) shares its hash with the next file;
* nothing is printed when no `diff ` line was hashed.

Whenever the answer depends on something this module cannot be sure to read as git does, the
result is None and the caller asks git: binary patches (git hashes the abbreviated blob names of
the `index` line), NUL bytes (git's C strings stop there), a line git would take for the start of
another commit, text after the end of the patch that git would print an id of its own for, hunk
counts that overflow a C int, or a last line whose missing newline could change the result.
"""

from __future__ import annotations

import hashlib

__all__ = ["patch_id"]

_GIT_SPACE = b" \t\n\r"  # git's isspace(): \v and \f are not spaces
_C_SPACE = b" \t\n\v\f\r"  # what atoi() skips (the C locale's isspace())
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ALPHA = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_DIGITS = frozenset(b"0123456789")
_OID_HEX = 40  # SHA-1
_ID_BYTES = 20
_ID_MASK = (1 << (8 * _ID_BYTES)) - 1
_INT_MAX = 2**31 - 1
_MARKER_MIN_LEN = 13  # git drops "\ " lines when 12 < strlen(line)
_BINARY = (b"GIT binary patch", b"Binary files")


class _Unsure(Exception):
    """The input takes a path where this model might not print what git prints."""


def patch_id(diff: bytes) -> str | None:
    """The 40-hex id `git patch-id --stable` prints for `diff`, the bytes that follow a
    `commit <40 hex>` line in git's input; None when git prints no id for it (no diff at all),
    and None as well when the answer is not certain (binary patches, unusual input)."""
    if b"\0" in diff:
        return None
    parts = diff.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    tail = parts[-1]
    try:
        if not tail:
            # The newline that joins records adds a blank line, which git never hashes: an
            # unfinished header ends there either way, a finished hunk ends, an open hunk
            # gains nothing.
            return _record_id(lines)
        # A last line without newline is completed by the joining newline, unless the record is
        # the last one: the answer must not depend on where the record stands.
        joined = _record_id([*lines, tail + b"\n"])
        alone = _record_id([*lines, tail])
    except _Unsure:
        return None
    return joined if joined == alone else None


def _record_id(lines: list[bytes]) -> str | None:
    """What git prints for the commit whose diff lines these are: the id of the first patch it
    reads, provided the rest of the lines yields no id of its own."""
    if any(line.startswith(_BINARY) for line in lines):
        raise _Unsure
    patchlen, result, pos = _one_patch(lines, 0)
    while pos < len(lines):
        more, _, pos = _one_patch(lines, pos)
        if more:
            raise _Unsure  # git would print a second id, for the zero commit name
    return result.to_bytes(_ID_BYTES, "little").hex() if patchlen else None


def _one_patch(lines: list[bytes], pos: int) -> tuple[int, int, int]:
    """git's get_one_patchid() from line `pos` on: (hashed length, id as an integer, next pos)."""
    ctx = hashlib.sha1()
    result = 0
    patchlen = 0
    before = after = -1
    while pos < len(lines):
        line = lines[pos]
        pos += 1
        if line.startswith(b"commit "):
            name = line[7:]
        elif line.startswith(b"From "):
            name = line[5:]
        elif line.startswith(b"\\ ") and len(line) >= _MARKER_MIN_LEN:
            continue
        else:
            name = line
        if len(name) >= _OID_HEX and all(c in _HEX for c in name[:_OID_HEX]):
            raise _Unsure  # git starts the next commit's patch here

        if not patchlen and not line.startswith(b"diff "):
            continue  # commit message

        if before == -1:  # in a file's header
            if line.startswith(b"index "):
                continue
            if line.startswith(b"--- "):
                before = after = 1
            elif line[0] not in _ALPHA:
                break

        if before == 0 and after == 0:  # between hunks
            if line.startswith(b"@@ -"):
                before, after = _scan_hunk_header(line, before, after)
                continue
            if not line.startswith(b"diff "):
                break
            result = _add_digest(result, ctx.digest())
            ctx = hashlib.sha1()
            before = after = -1

        first = line[0]
        if first in b"- ":
            before -= 1
        if first in b"+ ":
            after -= 1
        kept = line.translate(None, _GIT_SPACE)
        patchlen += len(kept)
        ctx.update(kept)
    result = _add_digest(result, ctx.digest())
    return patchlen, result, pos


def _add_digest(result: int, digest: bytes) -> int:
    """git's flush_one_hunk(): the 20-byte sum, with carry, of the id so far and one digest."""
    return (result + int.from_bytes(digest, "little")) & _ID_MASK


def _scan_hunk_header(line: bytes, before: int, after: int) -> tuple[int, int]:
    """git's scan_hunk_header() on `@@ -...`: the new (before, after) counts. Like git, it keeps
    a count it never reached when the header is malformed, and sets before even then."""
    q = 4
    n = _span_digits(line, q)
    if _at(line, q + n) == ord(","):
        q += n + 1
        before = _atoi(line, q)
        n = _span_digits(line, q)
    else:
        before = 1
    if n == 0 or _at(line, q + n) != ord(" ") or _at(line, q + n + 1) != ord("+"):
        return before, after
    r = q + n + 2
    n = _span_digits(line, r)
    if _at(line, r + n) == ord(","):
        r += n + 1
        after = _atoi(line, r)
    else:
        after = 1
    return before, after


def _at(line: bytes, index: int) -> int:
    """The byte at `index`, or 0 past the end, like reading a C string."""
    return line[index] if index < len(line) else 0


def _span_digits(line: bytes, start: int) -> int:
    end = start
    while end < len(line) and line[end] in _DIGITS:
        end += 1
    return end - start


def _atoi(line: bytes, start: int) -> int:
    """C's atoi(); values that do not fit an int (undefined behaviour) are not guessed."""
    i = start
    while i < len(line) and line[i] in _C_SPACE:
        i += 1
    sign = 1
    if i < len(line) and line[i] in b"+-":
        sign = -1 if line[i] == ord("-") else 1
        i += 1
    digits = line[i : i + _span_digits(line, i)].lstrip(b"0") or b"0"
    if len(digits) > len(str(_INT_MAX)) or int(digits) > _INT_MAX:
        raise _Unsure
    return sign * int(digits)
