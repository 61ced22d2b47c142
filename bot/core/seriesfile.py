"""The quilt-style `series` file of a patch series: parse it into values, write it back.

Pure: text in, values and problems out. Format, one item per line::

    # base: <40-hex sha>               upstream commit the series was last verified on
    # awaiting-import: <source text>   the series is not filled yet; an operator runs `carry import`
    # any other comment                kept, in order, after the metadata
    0001-first.patch                   patch files in apply order

Blank lines are ignored. The writer is deterministic (metadata, then comments, then patches,
one per line, LF endings), so rewriting an unchanged series gives the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from bot.core.fixpage import PageProblem, is_patch_name

BASE_KEY = "base"
AWAITING_KEY = "awaiting-import"
SHA_RE = re.compile(r"[0-9a-f]{40}\Z")
_METADATA_RE = re.compile(r"#\s*(base|awaiting-import)\s*:(.*)\Z")
_RUN_RE = re.compile(r"(?:^|;)\s*run:\s*(.+)\Z")


@dataclass(frozen=True)
class SeriesFile:
    patches: tuple[str, ...] = ()
    base: str | None = None
    awaiting_import: str | None = None
    comments: tuple[str, ...] = ()  # free comment lines, without the leading '#'
    # 1-based line of each patch as read; empty when built. Not part of the value.
    patch_lines: tuple[int, ...] = field(default=(), compare=False)

    @property
    def is_awaiting_import(self) -> bool:
        return self.awaiting_import is not None

    @property
    def import_command(self) -> str | None:
        """The command after `run:` in the awaiting-import text, when it names one."""
        if self.awaiting_import is None:
            return None
        match = _RUN_RE.search(self.awaiting_import)
        return match.group(1).strip() if match else None

    def line_of(self, patch: str) -> int:
        """Line a patch was read from; 0 when unknown."""
        if patch in self.patches and len(self.patch_lines) == len(self.patches):
            return self.patch_lines[self.patches.index(patch)]
        return 0


@dataclass
class _Reader:
    file: str
    problems: list[PageProblem]
    patches: list[str]
    lines: list[int]
    comments: list[str]
    meta: dict[str, tuple[int, str]]

    def add(self, line: int, message: str) -> None:
        self.problems.append(PageProblem(self.file, line, message))


def parse_series(text: str, file: str = "series") -> tuple[SeriesFile, tuple[PageProblem, ...]]:
    """Parse a series file. The result is best effort when problems are reported."""
    reader = _Reader(file, [], [], [], [], {})
    for number, raw in enumerate(_lines(text), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            _read_comment(reader, number, line)
        else:
            _read_patch(reader, number, line)
    base = reader.meta.get(BASE_KEY, (0, ""))[1] or None
    awaiting = reader.meta.get(AWAITING_KEY, (0, ""))[1] or None
    if awaiting is not None and reader.patches:
        first = reader.lines[0]
        reader.add(
            first,
            f"the series is awaiting import but lists '{reader.patches[0]}': "
            "run carry import, or remove the '# awaiting-import:' line",
        )
    series = SeriesFile(
        patches=tuple(reader.patches),
        base=base,
        awaiting_import=awaiting,
        comments=tuple(reader.comments),
        patch_lines=tuple(reader.lines),
    )
    return series, tuple(reader.problems)


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _read_comment(reader: _Reader, number: int, line: str) -> None:
    match = _METADATA_RE.match(line)
    if match is None:
        reader.comments.append(line[1:].strip())
        return
    key, value = match.group(1), match.group(2).strip()
    if key in reader.meta:
        reader.add(number, f"duplicate '# {key}:' (first on line {reader.meta[key][0]})")
        return
    if key == BASE_KEY and not SHA_RE.match(value):
        reader.add(number, f"bad base sha '{value}' (expected 40 lowercase hex digits)")
        value = ""
    elif key == AWAITING_KEY and not value:
        reader.add(number, "'# awaiting-import:' needs the source text and the import command")
    reader.meta[key] = (number, value)


def _read_patch(reader: _Reader, number: int, name: str) -> None:
    if not is_patch_name(name):
        reader.add(number, f"bad patch name '{name}' (expected NNNN-slug.patch, one per line)")
        return
    if name in reader.patches:
        first = reader.lines[reader.patches.index(name)]
        reader.add(number, f"duplicate entry '{name}' (first listed on line {first})")
        return
    prefix = name[:4]
    clash = next((p for p in reader.patches if p[:4] == prefix), None)
    if clash is not None:
        reader.add(number, f"'{name}' reuses number {prefix} of '{clash}'")
    elif reader.patches and prefix < reader.patches[-1][:4]:
        reader.add(number, f"'{name}' is listed after '{reader.patches[-1]}' (keep numeric order)")
    reader.patches.append(name)
    reader.lines.append(number)


def render_series(series: SeriesFile) -> str:
    """Canonical bytes of a series file (as text): same value, same output."""
    out: list[str] = []
    if series.base is not None:
        out.append(f"# {BASE_KEY}: {series.base}")
    if series.awaiting_import is not None:
        out.append(f"# {AWAITING_KEY}: {series.awaiting_import}")
    out.extend(f"# {comment}" if comment else "#" for comment in series.comments)
    out.extend(series.patches)
    return "".join(f"{line}\n" for line in out)


def validate_series(series: SeriesFile, file: str = "series") -> list[PageProblem]:
    """Problems a built (not parsed) value would have once written; empty when it is sound."""
    return list(parse_series(render_series(series), file)[1])


def with_base(series: SeriesFile, sha: str) -> SeriesFile:
    if not SHA_RE.match(sha):
        raise ValueError(f"bad base sha '{sha}' (expected 40 lowercase hex digits)")
    return replace(series, base=sha)


def with_patches(series: SeriesFile, patches: Sequence[str]) -> SeriesFile:
    """The series listing `patches` (import fills it: the awaiting-import line goes away)."""
    bad = [p for p in patches if not is_patch_name(p)]
    if bad:
        raise ValueError(f"bad patch name '{bad[0]}' (expected NNNN-slug.patch)")
    if len(set(patches)) != len(patches):
        raise ValueError("duplicate patch names")
    return replace(series, patches=tuple(patches), awaiting_import=None, patch_lines=())


def without_patch(series: SeriesFile, name: str) -> SeriesFile:
    if name not in series.patches:
        raise ValueError(f"'{name}' is not in the series")
    kept = tuple(p for p in series.patches if p != name)
    return replace(series, patches=kept, patch_lines=())
