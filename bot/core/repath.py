"""Rewrite the paths a patch names, for a file upstream moved since the patch was made."""

from __future__ import annotations

from collections.abc import Mapping

from bot.core.patchfile import PatchFile, split_lines

_HEADER_PREFIXES = (
    b"--- a/",
    b"+++ b/",
    b"rename from ",
    b"rename to ",
    b"copy from ",
    b"copy to ",
)


def repath(data: bytes, parsed: PatchFile, moves: Mapping[str, str]) -> bytes | None:
    """`data` with every header naming a path in `moves` naming its new path instead; hunks
    are left as they are. None when a header quotes its paths (names with special bytes):
    those are left to git."""
    lines = split_lines(data)
    out = lines[: parsed.diff_offset]
    in_header = False
    for line in lines[parsed.diff_offset :]:
        if line.startswith(b"diff --git "):
            in_header = True
            if b'"' in line:
                return None
            line = _git_line(line, moves)
        elif line.startswith(b"@@"):
            in_header = False
        elif in_header:
            line = _header_line(line, moves)
        out.append(line)
    return b"".join(out)


def _git_line(line: bytes, moves: Mapping[str, str]) -> bytes:
    body = line[len(b"diff --git ") :]
    ending = body[len(body.rstrip(b"\r\n")) :]
    text = body[: len(body) - len(ending)].decode("utf-8", "surrogateescape")
    for old, new in moves.items():
        if text == f"a/{old} b/{old}":
            text = f"a/{new} b/{new}"
        elif text.startswith(f"a/{old} b/"):
            text = f"a/{new}" + text[len(f"a/{old}") :]
        elif text.endswith(f" b/{old}"):
            text = text[: -len(f"b/{old}")] + f"b/{new}"
    return b"diff --git " + text.encode("utf-8", "surrogateescape") + ending


def _header_line(line: bytes, moves: Mapping[str, str]) -> bytes:
    for prefix in _HEADER_PREFIXES:
        if line.startswith(prefix):
            rest = line[len(prefix) :]
            ending = rest[len(rest.rstrip(b"\r\n")) :]
            path = rest[: len(rest) - len(ending)].decode("utf-8", "surrogateescape")
            if "\t" in path:  # `--- a/path\t<date>`
                path, _, tail = path.partition("\t")
                ending = b"\t" + tail.encode("utf-8", "surrogateescape") + ending
            if path in moves:
                return prefix + moves[path].encode("utf-8", "surrogateescape") + ending
            return line
    return line
