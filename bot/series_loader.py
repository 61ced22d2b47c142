"""Read a series directory (`patches/<series-id>/`) and check it is whole.

A directory holds the `series` file, the patch files it lists and one fix page per fix. Loading
refuses (`SeriesInvalid`, every problem with file and line) when:

- the series file or a fix page has problems;
- a patch listed in `series` does not exist;
- a `*.patch` file exists but is not listed (carry never ignores a patch);
- a listed patch is named by no fix page, or a patch is named by two;
- a page names a patch that is not in `series` (allowed while the series awaits import);
- the files a page lists for a patch differ from the files the patch's diff touches
  (`diff --git a/X b/Y`, both sides, plus rename/copy headers).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.core.fixpage import FixPage, PageProblem, is_patch_name, parse_fix_page
from bot.core.patchfile import PatchFileError, parse_patch
from bot.core.seriesfile import SeriesFile, parse_series

SERIES_FILE = "series"
SERIES_ID_RE = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")
AWAITING_IMPORT = "awaiting import"
READY = "ready"


class SeriesInvalid(Exception):
    """A series directory cannot be used as it is. `problems` says where and why."""

    def __init__(self, problems: Sequence[PageProblem]):
        self.problems = sorted(problems)
        count = len(self.problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in carried patches:\n{lines}")


@dataclass(frozen=True)
class LoadedSeries:
    series_id: str
    directory: Path
    patch_paths: tuple[Path, ...]  # in series (apply) order
    base: str | None
    awaiting_import: str | None
    pages: tuple[FixPage, ...]  # sorted by file name
    import_command: str | None = None

    @property
    def patch_names(self) -> tuple[str, ...]:
        return tuple(path.name for path in self.patch_paths)

    @property
    def is_awaiting_import(self) -> bool:
        return self.awaiting_import is not None

    @property
    def state(self) -> str:
        """In plain words: 'awaiting import' or 'ready'."""
        return AWAITING_IMPORT if self.is_awaiting_import else READY

    def describe(self) -> str:
        """One line for people: what the series is waiting for, or what it carries."""
        if self.is_awaiting_import:
            run = f"; run: {self.import_command}" if self.import_command else ""
            return f"{self.series_id}: awaiting import (not filled yet{run})"
        count = len(self.patch_paths)
        base = f"verified on {self.base[:12]}" if self.base else "never verified"
        return f"{self.series_id}: ready, {count} patch{'es' if count != 1 else ''}, {base}"

    def page_for(self, patch: str) -> FixPage | None:
        return next((page for page in self.pages if patch in page.patch_names), None)


# ---------------------------------------------------------------- loading


@dataclass
class _Context:
    directory: Path
    root: Path
    problems: list[PageProblem]

    def show(self, name: str) -> str:
        path = self.directory / name
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()

    def add(self, name: str, line: int, message: str) -> None:
        self.problems.append(PageProblem(self.show(name), line, message))

    def read(self, name: str) -> str | None:
        try:
            return (self.directory / name).read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            self.add(name, 0, f"not valid UTF-8 ({exc.reason} at byte {exc.start})")
        except OSError as exc:
            self.add(name, 0, f"cannot be read: {exc.strerror or exc}")
        return None


def load_series(directory: Path, *, root: Path | None = None) -> LoadedSeries:
    """Load and check `directory`. Paths in problems are shown relative to `root`
    (default: the directory above `patches/`, i.e. the repository root)."""
    directory = Path(directory)
    ctx = _Context(directory, root if root is not None else directory.parent.parent, [])
    if not directory.is_dir():
        raise SeriesInvalid([PageProblem(ctx.show(""), 0, "series directory does not exist")])
    if not SERIES_ID_RE.match(directory.name):
        message = f"bad series id '{directory.name}' (expected lowercase letters, digits, '.-_')"
        ctx.add(SERIES_FILE, 0, message)
    series = _read_series(ctx)
    pages = _read_pages(ctx, patches_pending=series.is_awaiting_import)
    on_disk = sorted(p.name for p in directory.iterdir() if p.suffix == ".patch" and p.is_file())
    _check_listed_files(ctx, series, on_disk)
    _check_page_coverage(ctx, series, pages)
    _check_page_files(ctx, series, pages, on_disk)
    if ctx.problems:
        raise SeriesInvalid(ctx.problems)
    return LoadedSeries(
        series_id=directory.name,
        directory=directory,
        patch_paths=tuple(directory / name for name in series.patches),
        base=series.base,
        awaiting_import=series.awaiting_import,
        pages=tuple(pages),
        import_command=series.import_command,
    )


def load_all(patches_dir: Path, *, root: Path | None = None) -> list[LoadedSeries]:
    """Load every series under `patches_dir` (sorted by id); all problems in one SeriesInvalid."""
    patches_dir = Path(patches_dir)
    root = root if root is not None else patches_dir.parent
    if not patches_dir.is_dir():
        raise SeriesInvalid([PageProblem(patches_dir.as_posix(), 0, "directory does not exist")])
    loaded: list[LoadedSeries] = []
    problems: list[PageProblem] = []
    for directory in sorted(p for p in patches_dir.iterdir() if p.is_dir()):
        if directory.name.startswith("."):
            continue
        try:
            loaded.append(load_series(directory, root=root))
        except SeriesInvalid as exc:
            problems.extend(exc.problems)
    if problems:
        raise SeriesInvalid(problems)
    return loaded


def _read_series(ctx: _Context) -> SeriesFile:
    if not (ctx.directory / SERIES_FILE).is_file():
        ctx.add(SERIES_FILE, 0, "missing series file (one patch file name per line)")
        return SeriesFile()
    text = ctx.read(SERIES_FILE)
    if text is None:
        return SeriesFile()
    series, problems = parse_series(text, ctx.show(SERIES_FILE))
    ctx.problems.extend(problems)
    return series


def _read_pages(ctx: _Context, *, patches_pending: bool) -> list[FixPage]:
    pages: list[FixPage] = []
    for path in sorted(ctx.directory.glob("*.md")):
        text = ctx.read(path.name)
        if text is None:
            continue
        page, problems = parse_fix_page(
            text, ctx.show(path.name), expected_name=path.stem, patches_pending=patches_pending
        )
        ctx.problems.extend(problems)
        pages.append(page)
    return pages


def _check_listed_files(ctx: _Context, series: SeriesFile, on_disk: Iterable[str]) -> None:
    present = set(on_disk)
    for name in series.patches:
        if name not in present:
            line = series.line_of(name)
            ctx.add(SERIES_FILE, line, f"patch '{name}' is listed but the file does not exist")
    for name in sorted(present - set(series.patches)):
        if not is_patch_name(name):
            ctx.add(name, 0, "patch file is not named NNNN-slug.patch and is not in series")
        else:
            ctx.add(name, 0, "patch file is not listed in series (list it in series or delete it)")


def _named_at(page: FixPage) -> str:
    return f"{Path(page.file).name}:{page.field_lines.get('Patches', 0)}"


def _check_page_coverage(ctx: _Context, series: SeriesFile, pages: Sequence[FixPage]) -> None:
    first_page: dict[str, FixPage] = {}
    for page in pages:
        line = page.field_lines.get("Patches", 0)
        for name in page.patch_names:
            if name in first_page:
                other = _named_at(first_page[name])
                ctx.problems.append(
                    PageProblem(page.file, line, f"Patches: {name} is already named by {other}")
                )
                continue
            first_page[name] = page
            retired = name in page.dropped_patches
            if name not in series.patches and not series.is_awaiting_import and not retired:
                message = f"Patches: {name} is not in series"
                ctx.problems.append(PageProblem(page.file, line, message))
    for name in series.patches:
        if name not in first_page:
            ctx.add(name, 0, "no fix page names this patch (add it to a page's Patches field)")


def _check_page_files(
    ctx: _Context, series: SeriesFile, pages: Sequence[FixPage], on_disk: Iterable[str]
) -> None:
    present = set(on_disk)
    for page in pages:
        line = page.field_lines.get("Patches", 0)
        for entry in page.patches:
            if entry.patch not in series.patches or entry.patch not in present:
                continue
            try:
                touched = parse_patch((ctx.directory / entry.patch).read_bytes()).touched_paths
            except OSError as exc:
                ctx.add(entry.patch, 0, f"cannot be read: {exc.strerror or exc}")
                continue
            except PatchFileError as exc:
                ctx.add(entry.patch, exc.line, f"not a usable patch: {exc.message}")
                continue
            if not touched:
                ctx.add(entry.patch, 0, "the patch touches no files")
                continue
            mismatch = _files_mismatch(entry.files, touched)
            if mismatch:
                ctx.problems.append(
                    PageProblem(page.file, line, f"Patches: {entry.patch}: {mismatch}")
                )


def _files_mismatch(listed: Sequence[str], touched: Sequence[str]) -> str:
    missing = [f for f in listed if f not in touched]
    extra = [f for f in touched if f not in listed]
    parts = []
    if missing:
        parts.append(f"listed but not in the diff: {', '.join(missing)}")
    if extra:
        parts.append(f"in the diff but not listed: {', '.join(extra)}")
    if not parts:
        return ""
    return "files differ from the patch's diff (" + "; ".join(parts) + ")"
