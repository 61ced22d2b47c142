"""Parse patch files (git format-patch mbox or plain unified diff) into values.

Pure: bytes in, values out. Lines are kept as bytes, so CRLF endings and non-UTF-8 content
survive untouched. Every problem is a `PatchFileError` that names the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# typing.TYPE_CHECKING without importing typing: the email package (about a third of what
# `carry check` imports) is loaded only for a header the plain reader below cannot take.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import email.message

_HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_DIFF_GIT = re.compile(rb"^diff --git (\S+) (\S+)")
_MAIL_FROM_LINE = re.compile(rb"^From [0-9a-f]{40} ")
_SUBJECT_PREFIX = re.compile(r"^\s*(\[[^\]]*\]\s*)+")
_ZERO_OID = re.compile(r"^0+$")
# A header block the plain reader takes as the email package would: ASCII, no encoded words
# (=?...?=), no CR, and a From of atoms and an address `git format-patch` writes for most
# authors. Anything else (quoted or encoded names, comments, groups) goes to the email package.
_NAMED_ADDRESS = re.compile(r"^(?:(.+) )?<([^<>]+)>$")
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_'-]+(?: [A-Za-z0-9_'-]+)*$")
_PLAIN_ADDRESS = re.compile(
    r"^[A-Za-z0-9_+-]+(?:\.[A-Za-z0-9_+-]+)*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*$"
)


class PatchFileError(ValueError):
    """The patch file cannot be used. `line` is 1-based, 0 when the whole file is at fault."""

    def __init__(self, line: int, message: str):
        self.line = line
        self.message = message
        super().__init__(f"line {line}: {message}" if line else message)


@dataclass(frozen=True)
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    section: bytes  # text after the second @@ (function context), without the newline
    lines: tuple[bytes, ...]  # body lines with their ' ', '-', '+' or '\\' prefix and line ending

    @property
    def header(self) -> str:
        old = f"{self.old_start},{self.old_len}"
        new = f"{self.new_start},{self.new_len}"
        return f"@@ -{old} +{new} @@"

    def side(self, which: str) -> list[bytes]:
        """Lines of one side, without prefix: which='-' gives the pre-image, '+' the post-image."""
        keep = {" ", which}
        return [line[1:] for line in self.lines if line[:1].decode("latin-1") in keep]

    @property
    def removed(self) -> list[bytes]:
        return [line[1:] for line in self.lines if line.startswith(b"-")]

    @property
    def added(self) -> list[bytes]:
        return [line[1:] for line in self.lines if line.startswith(b"+")]


@dataclass(frozen=True)
class FileDiff:
    old_path: str | None  # None for a new file
    new_path: str | None  # None for a deleted file
    header: tuple[bytes, ...]  # extended header lines (index, mode, rename, similarity, ...)
    hunks: tuple[Hunk, ...]
    binary: bool = False
    binary_body: tuple[bytes, ...] = ()
    old_oid: str | None = None
    new_oid: str | None = None
    old_mode: str | None = None
    new_mode: str | None = None

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""

    @property
    def is_new(self) -> bool:
        return self.old_path is None

    @property
    def is_deleted(self) -> bool:
        return self.new_path is None

    @property
    def is_rename(self) -> bool:
        return (
            self.old_path is not None
            and self.new_path is not None
            and (self.old_path != self.new_path)
        )

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for p in (self.old_path, self.new_path) if p))


@dataclass(frozen=True)
class PatchMeta:
    author_name: str
    author_email: str
    date: str | None  # RFC 2822 date as written, None for a plain diff
    subject: str
    body: str  # message after the subject, without the trailing '---' part
    commit: str | None  # the SHA in a format-patch "From <sha>" line, if any


@dataclass(frozen=True)
class PatchFile:
    meta: PatchMeta
    files: tuple[FileDiff, ...]
    diff_offset: int  # index of the first diff line in the file's lines
    has_mail_header: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not self.files

    @property
    def touched_paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for f in self.files for p in f.paths))


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their endings kept (b'\\r\\n' stays inside the line)."""
    return data.splitlines(keepends=True)


def strip_eol(line: bytes) -> bytes:
    return line.rstrip(b"\n")


def parse_patch(data: bytes, *, name: str = "patch") -> PatchFile:
    if not data.strip():
        raise PatchFileError(0, "the file is empty")
    lines = split_lines(data)
    diff_start = _find_diff_start(lines)
    meta, has_mail = _parse_meta(lines[: diff_start if diff_start >= 0 else len(lines)], name)
    if diff_start < 0:
        if not has_mail:
            raise PatchFileError(0, "no diff and no mail header found: not a patch file")
        return PatchFile(meta, (), len(lines), has_mail)
    files = _parse_files(lines, diff_start)
    return PatchFile(meta, tuple(files), diff_start, has_mail)


def _find_diff_start(lines: list[bytes]) -> int:
    for i, line in enumerate(lines):
        if line.startswith(b"diff --git "):
            return i
        if (
            line.startswith(b"--- ")
            and i + 1 < len(lines)
            and lines[i + 1].startswith(b"+++ ")
            and i + 2 < len(lines)
            and lines[i + 2].startswith(b"@@ ")
        ):
            return i
    return -1


def _parse_meta(head: list[bytes], name: str) -> tuple[PatchMeta, bool]:
    commit = None
    start = 0
    if head and _MAIL_FROM_LINE.match(head[0]):
        commit = head[0].split()[1].decode("ascii")
        if _ZERO_OID.match(commit):
            commit = None
        start = 1
    header_end = _header_end(head, start)
    if header_end < 0:
        return _plain_meta(head, name), False
    raw_headers = b"".join(head[start:header_end])
    fields = _plain_headers(raw_headers) or _mail_headers(raw_headers)
    is_mail, author_name, author_email, subject, date = fields
    if not is_mail:
        return _plain_meta(head, name), False
    subject = _SUBJECT_PREFIX.sub("", subject)
    body = _message_body(head[header_end + 1 :])
    # The in-body "From:" and "Date:" lines that format-patch writes for other authors win.
    return PatchMeta(author_name, author_email, date, subject, body, commit), True


# (a mail header: it has a From or a Subject; author name, author email, subject with its
# whitespace collapsed, date as written)
_Headers = tuple[bool, str, str, str, "str | None"]


def _plain_headers(raw: bytes) -> _Headers | None:
    """The header fields read without the email package, for a block it would read the same
    (see _PLAIN_NAME); None when the block needs the email package."""
    if not raw.isascii() or b"\r" in raw or b"=?" in raw:
        return None
    values: dict[str, str] = {}
    current: str | None = None
    for line in raw.decode("ascii").split("\n"):
        if line[:1] in (" ", "\t"):
            if current is not None:
                values[current] += " " + line
            continue
        key, colon, value = line.partition(":")
        current = None
        if colon and key.lower() not in values:
            current = key.lower()
            values[current] = value
    sender = " ".join(values.get("from", "").split())
    subject = " ".join(values.get("subject", "").split())
    author_name, author_email = "", ""
    if sender:
        named = _NAMED_ADDRESS.match(sender)
        author_name, author_email = named.groups("") if named else ("", sender)
        if author_name and not _PLAIN_NAME.match(author_name):
            return None
        if not _PLAIN_ADDRESS.match(author_email):
            return None
    date = values.get("date")
    written = " ".join(date.split()) if date is not None else None
    return bool(sender or subject), author_name, author_email, subject, written


def _mail_headers(raw: bytes) -> _Headers:
    """The header fields as the email package reads them (encoded words, quoted names)."""
    import email.parser
    import email.policy
    import email.utils

    msg = email.parser.BytesHeaderParser(policy=email.policy.default).parsebytes(raw)
    is_mail = bool(msg.get("From") or msg.get("Subject"))
    author_name, author_email = email.utils.parseaddr(str(msg.get("From", "")))
    subject = " ".join(str(msg.get("Subject", "")).split())
    return is_mail, author_name, author_email, subject, _raw_header(msg, "Date")


def _raw_header(msg: email.message.Message, name: str) -> str | None:
    """A header as written: the parsed form raises on absurd dates, and carry only copies it."""
    for key, value in msg.raw_items():
        if key.lower() == name.lower():
            return " ".join(str(value).split())
    return None


def _header_end(lines: list[bytes], start: int) -> int:
    """Index of the blank line that ends an RFC 822 header block starting at `start`, or -1."""
    if start >= len(lines) or not re.match(rb"^[A-Za-z][A-Za-z0-9-]*:", lines[start]):
        return -1
    for i in range(start, len(lines)):
        if not lines[i].strip():
            return i
        if not (re.match(rb"^[A-Za-z][A-Za-z0-9-]*:", lines[i]) or lines[i][:1] in b" \t"):
            return -1
    return -1


def _message_body(lines: list[bytes]) -> str:
    text: list[str] = []
    for line in lines:
        if line.rstrip(b"\r\n") == b"---":
            break
        text.append(line.decode("utf-8", "replace").rstrip("\r\n"))
    return "\n".join(text).strip("\n")


def _plain_meta(head: list[bytes], name: str) -> PatchMeta:
    text = b"".join(head).decode("utf-8", "replace").strip()
    first, _, rest = text.partition("\n")
    subject = first.strip() or name
    return PatchMeta("", "", None, subject, rest.strip(), None)


def _parse_files(lines: list[bytes], start: int) -> list[FileDiff]:
    files: list[FileDiff] = []
    i = start
    while i < len(lines):
        line = lines[i]
        if line.startswith(b"diff --git "):
            fdiff, end = _parse_git_file(lines, i)
        elif line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            fdiff, end = _parse_plain_file(lines, i)
        elif _is_trailer(lines, i):
            break
        else:
            i += 1  # text between file diffs (e.g. "Only in ..." lines of plain diff output)
            continue
        _check_paths(fdiff, i)
        files.append(fdiff)
        i = end
    if not files:
        raise PatchFileError(start + 1, "a diff starts here but no file diff could be read")
    return files


def _check_paths(fdiff: FileDiff, i: int) -> None:
    """git apply refuses a path that is absolute or climbs out of the tree; so does carry,
    before anything reads or writes it."""
    for path in (fdiff.old_path, fdiff.new_path):
        if path is None:
            continue
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or "" in parts:
            raise PatchFileError(i + 1, f"invalid path {path!r}: it leaves the repository")
        if ".git" in parts:
            raise PatchFileError(i + 1, f"invalid path {path!r}: it is inside .git")


def _is_trailer(lines: list[bytes], i: int) -> bool:
    """The format-patch signature ("-- " then a version line) ends the diff."""
    return strip_eol(lines[i]).rstrip(b"\r") == b"-- " and i + 1 <= len(lines)


def _strip_prefix(path: bytes) -> str:
    text = path.decode("utf-8", "surrogateescape")
    if text.startswith('"') and text.endswith('"'):
        text = _unquote_c_style(text[1:-1])
    if text == "/dev/null":
        return text
    return text.split("/", 1)[1] if "/" in text else text


def _unquote_c_style(text: str) -> str:
    raw = text.encode("latin-1", "surrogateescape").decode("unicode_escape").encode("latin-1")
    return raw.decode("utf-8", "surrogateescape")


def _parse_git_file(lines: list[bytes], i: int) -> tuple[FileDiff, int]:
    first = strip_eol(lines[i]).rstrip(b"\r")
    old_path, new_path = _git_header_paths(first, i)
    header: list[bytes] = []
    info: dict[str, str] = {}
    binary = False
    binary_body: list[bytes] = []
    j = i + 1
    while j < len(lines) and not lines[j].startswith((b"@@ ", b"diff --git ")):
        line = strip_eol(lines[j]).rstrip(b"\r")
        if line.startswith(b"--- "):
            path = _strip_prefix(line[4:].split(b"\t")[0])
            old_path = None if path == "/dev/null" else path
        elif line.startswith(b"+++ "):
            path = _strip_prefix(line[4:].split(b"\t")[0])
            new_path = None if path == "/dev/null" else path
        elif line == b"GIT binary patch" or line.startswith(b"Binary files "):
            binary = True
            header.append(lines[j])
            j, binary_body = _read_binary(lines, j + 1)
            continue
        elif _is_trailer(lines, j) or not line:
            break
        else:
            _read_extended(line, info)
        header.append(lines[j])
        j += 1
    if "new_file_mode" in info:
        old_path = None
    if "deleted_file_mode" in info:
        new_path = None
    if "rename_from" in info and old_path is not None:
        old_path = info["rename_from"]
    if "rename_to" in info and new_path is not None:
        new_path = info["rename_to"]
    hunks, j = _parse_hunks(lines, j)
    old_oid, new_oid = info.get("old_oid"), info.get("new_oid")
    fdiff = FileDiff(
        old_path,
        new_path,
        tuple(header),
        tuple(hunks),
        binary,
        tuple(binary_body),
        None if old_oid is None or _ZERO_OID.match(old_oid) else old_oid,
        None if new_oid is None or _ZERO_OID.match(new_oid) else new_oid,
        info.get("old_mode") or info.get("deleted_file_mode") or info.get("index_mode"),
        info.get("new_mode") or info.get("new_file_mode") or info.get("index_mode"),
    )
    return fdiff, j


def _git_header_paths(first: bytes, i: int) -> tuple[str | None, str | None]:
    """Paths from 'diff --git a/X b/Y'; names with spaces split where both halves agree."""
    rest = first[len(b"diff --git ") :]
    if rest.startswith(b'"') or rest.endswith(b'"'):
        match = re.match(rb'^("(?:[^"\\]|\\.)*"|\S+) ("(?:[^"\\]|\\.)*"|\S+)$', rest)
        if match:
            return _strip_prefix(match.group(1)), _strip_prefix(match.group(2))
    half = (len(rest) - 1) // 2
    if len(rest) % 2 == 1 and rest[half : half + 1] == b" ":
        old, new = rest[:half], rest[half + 1 :]
        if old[2:] == new[2:]:
            return _strip_prefix(old), _strip_prefix(new)
    match = _DIFF_GIT.match(first)
    if not match:
        raise PatchFileError(i + 1, "malformed 'diff --git' line")
    return _strip_prefix(match.group(1)), _strip_prefix(match.group(2))


def _read_extended(line: bytes, info: dict[str, str]) -> None:
    text = line.decode("utf-8", "surrogateescape")
    for key in ("old mode ", "new mode ", "deleted file mode ", "new file mode "):
        if text.startswith(key):
            info[key.strip().replace(" ", "_")] = text[len(key) :].strip()
            return
    if text.startswith("rename from "):
        info["rename_from"] = _maybe_unquote(text[len("rename from ") :])
    elif text.startswith("rename to "):
        info["rename_to"] = _maybe_unquote(text[len("rename to ") :])
    elif text.startswith("index "):
        parts = text.split()
        oids = parts[1].split("..")
        if len(oids) == 2:
            info["old_oid"], info["new_oid"] = oids
        if len(parts) > 2:
            info["index_mode"] = parts[2]


def _maybe_unquote(text: str) -> str:
    text = text.strip()
    if text.startswith('"') and text.endswith('"'):
        return _unquote_c_style(text[1:-1])
    return text


def _read_binary(lines: list[bytes], j: int) -> tuple[int, list[bytes]]:
    """Skips the base85 blocks of a 'GIT binary patch' (literal/delta, forward and reverse)."""
    body: list[bytes] = []
    blank_runs = 0
    while j < len(lines):
        line = strip_eol(lines[j]).rstrip(b"\r")
        if line.startswith(b"diff --git ") or _is_trailer(lines, j):
            break
        body.append(lines[j])
        j += 1
        if not line:
            blank_runs += 1
            if blank_runs == 2:
                break
    return j, body


def _parse_plain_file(lines: list[bytes], i: int) -> tuple[FileDiff, int]:
    old = strip_eol(lines[i][4:]).rstrip(b"\r").split(b"\t")[0]
    new = strip_eol(lines[i + 1][4:]).rstrip(b"\r").split(b"\t")[0]
    old_path = None if old == b"/dev/null" else _strip_prefix(old)
    new_path = None if new == b"/dev/null" else _strip_prefix(new)
    hunks, j = _parse_hunks(lines, i + 2)
    if not hunks:
        raise PatchFileError(i + 1, f"file diff for {new_path or old_path} has no hunks")
    return FileDiff(old_path, new_path, (lines[i], lines[i + 1]), tuple(hunks)), j


def _parse_hunks(lines: list[bytes], j: int) -> tuple[list[Hunk], int]:
    hunks: list[Hunk] = []
    while j < len(lines) and lines[j].startswith(b"@@ "):
        match = _HUNK_HEADER.match(strip_eol(lines[j]).rstrip(b"\r"))
        if not match:
            raise PatchFileError(j + 1, "malformed hunk header")
        old_start, new_start = int(match.group(1)), int(match.group(3))
        old_len = int(match.group(2)) if match.group(2) is not None else 1
        new_len = int(match.group(4)) if match.group(4) is not None else 1
        header_line = j + 1
        body, j = _read_hunk_body(lines, j + 1, old_len, new_len)
        if j < len(lines) and _looks_like_hunk_line(lines, j):
            raise PatchFileError(header_line, "hunk has more lines than its header announces")
        section = match.group(5).strip()
        hunks.append(Hunk(old_start, old_len, new_start, new_len, section, tuple(body)))
    return hunks, j


def _looks_like_hunk_line(lines: list[bytes], j: int) -> bool:
    line = strip_eol(lines[j]).rstrip(b"\r")
    if line == b"-- " or (
        line.startswith(b"--- ") and j + 1 < len(lines) and lines[j + 1].startswith(b"+++ ")
    ):
        return False  # the format-patch signature, or the next file of a plain diff
    return line[:1] in (b"-", b"+") or (line[:1] == b" " and line != b" ")


def _read_hunk_body(
    lines: list[bytes], j: int, old_len: int, new_len: int
) -> tuple[list[bytes], int]:
    header_line = j
    old_seen = new_seen = 0
    body: list[bytes] = []
    while old_seen < old_len or new_seen < new_len:
        if j >= len(lines):
            raise PatchFileError(
                header_line,
                f"hunk is truncated: expected {old_len} old and {new_len} new lines, "
                f"found {old_seen} and {new_seen}",
            )
        line = lines[j]
        tag = line[:1]
        if tag == b" " or line == b"\n":
            # Some tools strip the space of empty context lines; git apply accepts that (only
            # for a bare newline: it calls "\r\n" without the space a corrupt patch).
            old_seen += 1
            new_seen += 1
            body.append(line if tag == b" " else b" " + line)
        elif tag == b"-":
            old_seen += 1
            body.append(line)
        elif tag == b"+":
            new_seen += 1
            body.append(line)
        elif tag == b"\\":
            body.append(line)
        else:
            raise PatchFileError(
                j + 1, f"unexpected line inside a hunk (started at line {header_line})"
            )
        j += 1
    while j < len(lines) and lines[j].startswith(b"\\"):
        body.append(lines[j])
        j += 1
    if old_seen > old_len or new_seen > new_len:
        raise PatchFileError(header_line, "hunk has more lines than its header announces")
    return body, j


def clean_subject(subject: str) -> str:
    """Subject without [PATCH ...] prefixes and folded whitespace."""
    return _SUBJECT_PREFIX.sub("", " ".join(subject.split()))
