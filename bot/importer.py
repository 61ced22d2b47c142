"""`carry import`: fill a series directory from a commit range, a pull request or patch files.

Sources, in this order when combined (commits first, then files):

- a range `BASE..TIP` of a repository (local path or URL), read through carry's mirror cache,
  so the source repository is never written to: one patch per commit, oldest first, no merges;
- a pull request `owner/repo#N`: `refs/pull/N/head` and the PR's base branch are fetched and
  `merge-base(base, head)..head` is imported like a range;
- plain patch files (format-patch mails or unified diffs), copied byte for byte.

Commits are written with `format_patch` (fixed options), so importing the same commits twice
gives the same bytes. New patches are numbered after the series' last patch and named like
`git format-patch` names them (`NNNN-slug.patch`, a closing PR number kept whole), unless
`--name` says otherwise or a fix page of the series already names a patch with that number
(the name the page waits for is kept).

Every imported patch must be named by a fix page: a patch no page names is refused unless
`--page NAME` is given, which adds it (with the files it touches) to that page's Patches field.
The changed directory is built in a temporary copy and loaded with `load_series` before any file
is moved into place, so a refused import changes nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.core.fixpage import (
    FixPage,
    PatchFiles,
    is_patch_name,
    parse_fix_page,
    parse_ref,
    render_patches,
)
from bot.core.patchfile import PatchFileError, parse_patch
from bot.core.seriesfile import SeriesFile, parse_series, render_series, with_base, with_patches
from bot.git.formatpatch import format_patch
from bot.git.mirror import Mirror, MirrorError, normalize_source
from bot.git.reader import Reader
from bot.git.runner import GitError
from bot.series_loader import SERIES_FILE, SeriesInvalid, load_series

GITHUB_URL = "https://github.com/{repo}.git"
DEFAULT_BASE_BRANCH = "main"
# git format-patch: file names are at most 64 characters, ".patch" included (format.filenameMaxLength)
_NAME_MAX = 64 - len(".patch") - 1
_NUMBERED = re.compile(r"^[0-9]{4}-")
_PR_SUFFIX = re.compile(r"\(#([0-9]+)\)\W*\Z")  # GitHub's squash merges: "Subject (#1609)"


class ImportFailed(Exception):
    """The import is refused and nothing was written; the message says why, in one line."""


@dataclass(frozen=True)
class ImportRequest:
    series_dir: Path
    repo: str | None = None  # repository of --range, or of --pr (default: GitHub)
    rev_range: str | None = None  # "BASE..TIP"
    pr: str | None = None  # "owner/repo#N"
    base_branch: str = DEFAULT_BASE_BRANCH  # the PR's base: branch, tag, SHA or ref
    base_repo: str | None = None  # where the PR's base lives, when not in the PR's repository
    files: tuple[Path, ...] = ()
    names: tuple[str, ...] = ()  # explicit file names, one per imported patch
    page: str | None = None  # fix page that takes the patches no page names yet
    numbering_from: int | None = None
    cache_dir: Path | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class Incoming:
    """One patch to import, before it has a name."""

    data: bytes
    subject: str
    origin: str  # "commit 1a2b3c4d5e6f" or "file path/to/fix.patch"
    touched: tuple[str, ...]


@dataclass(frozen=True)
class Commits:
    base: str  # the commit the first one applies on
    patches: tuple[Incoming, ...]
    description: str


@dataclass(frozen=True)
class ImportedPatch:
    name: str
    origin: str
    subject: str
    page: str  # file name of the fix page that names it
    added_to_page: bool  # named by --page during this import


@dataclass(frozen=True)
class ImportResult:
    series_dir: Path
    source: str
    base: str | None  # the base the series records after the import
    patches: tuple[ImportedPatch, ...]
    written: tuple[str, ...]  # files written (or, for a dry run, that would be)
    dry_run: bool

    def render(self) -> str:
        count = len(self.patches)
        verb = "would import" if self.dry_run else "imported"
        lines = [f"{verb} {count} patch{'es' if count != 1 else ''} into {self.series_dir}"]
        lines.append(f"  from {self.source}")
        if self.base:
            lines.append(f"  base {self.base}")
        width = max(len(p.name) for p in self.patches)
        for p in self.patches:
            how = " (added by --page)" if p.added_to_page else ""
            lines.append(f"  {p.name:<{width}}  {p.origin}: {p.subject}  [page {p.page}{how}]")
        lines.append(f"  {'would write' if self.dry_run else 'wrote'}: {', '.join(self.written)}")
        if self.dry_run:
            lines.append("dry run: nothing was written")
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the import


def run_import(request: ImportRequest) -> ImportResult:
    """Plan, check and (unless dry_run) write the import. Raises ImportFailed, writing nothing."""
    _check_request(request)
    directory = request.series_dir
    series = _read_series(directory)
    pages = _read_pages(directory)
    commits = _commit_source(request)
    incoming = [*(commits.patches if commits else ()), *_file_patches(request.files)]
    names = _names(request, series, pages, incoming)
    _check_collisions(directory, series, names)
    owners = _page_owners(pages, names, incoming, request.page)
    base = commits.base if commits is not None and not series.patches else series.base
    changes = _changes(series, pages, names, incoming, owners, base)
    _validate(directory, changes)
    if not request.dry_run:
        _write(directory, changes)
    return ImportResult(
        series_dir=directory,
        source=_describe_sources(commits, request.files),
        base=base,
        patches=tuple(
            ImportedPatch(name, inc.origin, inc.subject, owners[name].file, owners[name].added)
            for name, inc in zip(names, incoming, strict=True)
        ),
        written=tuple(changes),
        dry_run=request.dry_run,
    )


def _check_request(request: ImportRequest) -> None:
    if not request.series_dir.is_dir():
        raise ImportFailed(f"series directory {request.series_dir} does not exist")
    if request.rev_range and request.pr:
        raise ImportFailed("give --range or --pr, not both")
    if not (request.rev_range or request.pr or request.files):
        raise ImportFailed(
            "nothing to import: give --range BASE..TIP, --pr OWNER/REPO#N or --files"
        )
    if request.rev_range and not request.repo:
        raise ImportFailed("--range needs --repo (a local path or URL)")
    if request.base_repo and not request.pr:
        raise ImportFailed("--base-repo only applies to --pr")


def _describe_sources(commits: Commits | None, files: Sequence[Path]) -> str:
    parts = [commits.description] if commits else []
    if files:
        parts.append(f"{len(files)} patch file{'s' if len(files) != 1 else ''}")
    return " + ".join(parts)


# ---------------------------------------------------------------- the series as it is


def _read_series(directory: Path) -> SeriesFile:
    path = directory / SERIES_FILE
    if not path.exists():
        return SeriesFile()
    series, problems = parse_series(path.read_text(encoding="utf-8"), str(path))
    if problems:
        raise ImportFailed("; ".join(str(p) for p in problems))
    return series


def _read_pages(directory: Path) -> dict[str, tuple[FixPage, str]]:
    """Page file name -> (page, text). Problems surface when the result is loaded."""
    pages: dict[str, tuple[FixPage, str]] = {}
    for path in sorted(directory.glob("*.md")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # load_series reports it when the result is validated
        pages[path.name] = (parse_fix_page(text, path.name, expected_name=path.stem)[0], text)
    return pages


# ---------------------------------------------------------------- commit sources


def _commit_source(request: ImportRequest) -> Commits | None:
    if request.rev_range:
        assert request.repo is not None
        return _range_source(request.repo, request.rev_range, request.cache_dir)
    if request.pr:
        return _pr_source(request)
    return None


def _split_range(text: str) -> tuple[str, str]:
    base, sep, tip = text.partition("..")
    if not sep or not base or not tip or tip.startswith(".") or ".." in tip:
        raise ImportFailed(f"bad range {text!r}: expected BASE..TIP (two revisions and '..')")
    return base, tip


def _range_source(repo: str, text: str, cache_dir: Path | None) -> Commits:
    base_rev, tip_rev = _split_range(text)
    mirror = _mirror(repo, cache_dir)
    base, tip = _resolve(mirror, base_rev), _resolve(mirror, tip_rev)
    if not mirror.git.is_ancestor(base, tip):
        raise ImportFailed(
            f"bad range {text!r}: {base_rev} is not an ancestor of {tip_rev}, "
            f"so the commits of the range do not apply on {base_rev}"
        )
    patches = _commit_patches(mirror, base, tip, f"range {text}")
    return Commits(base, patches, f"range {text} of {mirror.source}")


def _pr_source(request: ImportRequest) -> Commits:
    assert request.pr is not None
    ref = parse_ref(request.pr)
    if ref is None:
        raise ImportFailed(f"bad pull request {request.pr!r} (expected OWNER/REPO#NUMBER)")
    pr_repo = _source(request.repo or GITHUB_URL.format(repo=ref.repo))
    mirror = _mirror(request.base_repo or pr_repo, request.cache_dir)
    target = _resolve(mirror, request.base_branch)
    head = _pr_head(mirror, pr_repo, ref.number)
    merged = mirror.git.run("merge-base", target, head, check=False)
    if not merged.ok or not merged.text:
        raise ImportFailed(f"{ref} and {request.base_branch} share no history")
    label = f"{ref} on {request.base_branch}"
    patches = _commit_patches(mirror, merged.text, head, label)
    where = f" of {mirror.source}" if request.base_repo else ""
    return Commits(merged.text, patches, f"{label}{where} (pull request of {pr_repo})")


def _source(repo: str) -> str:
    try:
        return normalize_source(repo)
    except MirrorError as err:
        raise ImportFailed(str(err)) from err


def _mirror(source: str, cache_dir: Path | None) -> Mirror:
    try:
        return Mirror(source, cache_dir)
    except MirrorError as err:
        raise ImportFailed(str(err)) from err


def _resolve(mirror: Mirror, rev: str) -> str:
    try:
        return mirror.resolve(rev).sha
    except MirrorError as err:
        raise ImportFailed(str(err)) from err


def _pr_head(mirror: Mirror, source: str, number: int) -> str:
    """The PR's head commit, fetched into `mirror` (from another repository when it lives there)."""
    pull = f"refs/pull/{number}/head"
    if source == mirror.source:
        return _resolve(mirror, pull)
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    local = f"refs/carry/import/{digest}/pull/{number}/head"
    mirror.ensure()
    with mirror.locked():
        try:
            mirror.git.run(
                "fetch", "--quiet", "--no-tags", "--force", "--", source, f"+{pull}:{local}"
            )
        except GitError as err:
            message = f"cannot fetch {pull} from {source}: {err.stderr_text.strip()}"
            raise ImportFailed(message) from err
    sha = mirror.git.rev_parse(local)
    if sha is None:
        raise ImportFailed(f"{pull} of {source} does not name a commit")
    return sha


def _commit_patches(mirror: Mirror, base: str, tip: str, label: str) -> tuple[Incoming, ...]:
    with Reader(mirror.git) as reader:
        commits = reader.commits(f"{base}..{tip}", topo_order=True)
    if not commits:
        raise ImportFailed(f"{label} has no commits to import")
    for c in commits:
        if len(c.parents) > 1:
            raise ImportFailed(
                f"{label} contains merge commit {c.sha[:12]} ({c.subject!r}): carry imports one "
                "patch per commit and cannot import a merge; import the linear ranges on either "
                "side of it, or rebase the branch first"
            )
    return tuple(commit_patch(mirror, c.sha, c.subject) for c in commits)


def commit_patch(mirror: Mirror, sha: str, subject: str) -> Incoming:
    """One commit as a patch carry can carry, or ImportFailed saying why not."""
    data = format_patch(mirror.git, sha)
    origin = f"commit {sha[:12]}"
    try:
        touched = parse_patch(data, name=origin).touched_paths if data.strip() else ()
    except PatchFileError as err:
        raise ImportFailed(f"{origin} ({subject!r}): git wrote an unusable patch: {err}") from err
    if not touched:
        raise ImportFailed(
            f"{origin} ({subject!r}) changes no files; an empty patch is not carried"
        )
    return Incoming(data, subject, origin, touched)


# ---------------------------------------------------------------- file sources


def _file_patches(paths: Iterable[Path]) -> list[Incoming]:
    return [_file_patch(path) for path in paths]


def _file_patch(path: Path) -> Incoming:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ImportFailed(f"cannot read {path}: {err.strerror or err}") from err
    try:
        patch = parse_patch(data, name=path.name)
    except PatchFileError as err:
        where = f"{path}:{err.line}" if err.line else str(path)
        raise ImportFailed(f"{where}: not a usable patch: {err.message}") from err
    if not patch.touched_paths:
        raise ImportFailed(f"{path}: the patch touches no files")
    # A mail names its change in the Subject; a plain diff is named by its file.
    subject = patch.meta.subject if patch.has_mail_header else _NUMBERED.sub("", path.stem)
    return Incoming(data, subject, f"file {path}", patch.touched_paths)


# ---------------------------------------------------------------- names


def slug(subject: str) -> str:
    """The subject as `git format-patch` puts it in a file name: runs of characters other than
    letters, digits, '.' and '_' become one '-', repeated dots one '.', no trailing '.' or '-'."""
    out: list[str] = []
    gap = False
    previous = ""
    for char in subject:
        if char.isascii() and (char.isalnum() or char in "._"):
            if gap and out:
                out.append("-")
            gap = False
            if not (char == "." and previous == "."):
                out.append(char)
        else:
            gap = True
        previous = char
    return "".join(out).rstrip(".-")


def patch_name(number: int, subject: str) -> str:
    """`NNNN-slug.patch`, cut to git format-patch's length; where the cut would take part of
    the PR number that ends a squash-merged subject ("... (#1609)"), the words before it are
    cut instead, so the name keeps the number whole."""
    stem = f"{number:04d}-{slug(subject) or 'patch'}"
    if len(stem) <= _NAME_MAX:
        return f"{stem}.patch"
    pr = _PR_SUFFIX.search(subject)
    if pr is None:
        return f"{stem[:_NAME_MAX]}.patch"
    tail = f"-{pr.group(1)}"
    return f"{stem[: _NAME_MAX - len(tail)].rstrip('.-')}{tail}.patch"


def _names(
    request: ImportRequest,
    series: SeriesFile,
    pages: Mapping[str, tuple[FixPage, str]],
    incoming: Sequence[Incoming],
) -> list[str]:
    if request.names:
        return _explicit_names(request.names, incoming)
    start = _first_number(request.numbering_from, series, len(incoming))
    reserved = _reserved_names(series, [page for page, _ in pages.values()])
    return [
        reserved.get(number) or patch_name(number, inc.subject)
        for number, inc in enumerate(incoming, start=start)
    ]


def _explicit_names(names: Sequence[str], incoming: Sequence[Incoming]) -> list[str]:
    if len(names) != len(incoming):
        origins = ", ".join(inc.origin for inc in incoming)
        raise ImportFailed(
            f"--name is given {len(names)} time{'s' if len(names) != 1 else ''} but the import "
            f"has {len(incoming)} patch{'es' if len(incoming) != 1 else ''} ({origins}): "
            "give one --name per patch, in order"
        )
    for name in names:
        if not is_patch_name(name):
            raise ImportFailed(f"bad --name {name!r} (expected NNNN-slug.patch)")
    return list(names)


def _first_number(numbering_from: int | None, series: SeriesFile, count: int) -> int:
    last = max((int(name[:4]) for name in series.patches), default=0)
    start = last + 1 if numbering_from is None else numbering_from
    if start <= last:
        raise ImportFailed(
            f"--numbering-from {numbering_from}: the series already ends at {last:04d}; "
            f"start at {last + 1} or later"
        )
    if start < 1 or start + count - 1 > 9999:
        raise ImportFailed(f"patch numbers {start}..{start + count - 1} are outside 0001..9999")
    return start


def _reserved_names(series: SeriesFile, pages: Iterable[FixPage]) -> dict[int, str]:
    """Number -> the name a page waits for: named by a page, not in series yet, not dropped."""
    waiting = [
        name
        for page in pages
        for name in page.patch_names
        if name not in series.patches and name not in page.dropped_patches
    ]
    numbers = Counter(int(name[:4]) for name in waiting)
    return {int(name[:4]): name for name in waiting if numbers[int(name[:4])] == 1}


def _check_collisions(directory: Path, series: SeriesFile, names: Sequence[str]) -> None:
    repeated = [name for name, count in Counter(names).items() if count > 1]
    if repeated:
        raise ImportFailed(f"name collision: {repeated[0]} would be imported twice")
    numbers = {name[:4]: name for name in series.patches}
    for name in names:
        if name in series.patches:
            raise ImportFailed(f"name collision: {name} is already in the series")
        if (directory / name).exists():
            raise ImportFailed(f"name collision: {directory / name} already exists")
        if name[:4] in numbers:
            raise ImportFailed(
                f"name collision: {name} reuses number {name[:4]} of {numbers[name[:4]]}"
            )


# ---------------------------------------------------------------- fix pages


@dataclass(frozen=True)
class _Owner:
    file: str  # page file name
    added: bool  # the import adds the patch to this page


def _page_owners(
    pages: Mapping[str, tuple[FixPage, str]],
    names: Sequence[str],
    incoming: Sequence[Incoming],
    page_arg: str | None,
) -> dict[str, _Owner]:
    named = {patch: file for file, (page, _) in pages.items() for patch in page.patch_names}
    target = _target_page(pages, page_arg) if page_arg else None
    owners: dict[str, _Owner] = {}
    unowned: list[str] = []
    for name, inc in zip(names, incoming, strict=True):
        if name in named:
            owners[name] = _Owner(named[name], False)
        elif target is not None:
            owners[name] = _Owner(target, True)
        else:
            unowned.append(f"{name} ({inc.origin}: {inc.subject})")
    if unowned:
        available = ", ".join(Path(file).stem for file in pages) or "none yet"
        raise ImportFailed(
            f"no fix page names {'; '.join(unowned)}: pass --page NAME to add "
            f"{'it' if len(unowned) == 1 else 'them'} to that page's Patches field "
            f"(pages in this series: {available}), or name the patch on a page first"
        )
    return owners


def _target_page(pages: Mapping[str, tuple[FixPage, str]], page_arg: str) -> str:
    file = page_arg if page_arg.endswith(".md") else f"{page_arg}.md"
    if file not in pages:
        available = ", ".join(Path(name).stem for name in pages) or "none"
        raise ImportFailed(f"--page {page_arg}: no such fix page here (pages: {available})")
    page, _ = pages[file]
    if "Patches" not in page.field_lines:
        raise ImportFailed(f"--page {page_arg}: the page has no Patches field to add to")
    return file


def page_with_patches(text: str, page: FixPage, entries: Sequence[PatchFiles]) -> str:
    """The page text with `entries` added to its Patches cell (kept in patch order); every other
    byte stays as it was."""
    index = page.field_lines["Patches"] - 1
    lines = text.splitlines(keepends=True)
    body = lines[index].rstrip("\r\n")
    ending = lines[index][len(body) :]
    second = body.index("|", body.index("|") + 1)
    last = body.rindex("|")
    merged = sorted((*page.patches, *entries), key=lambda entry: entry.patch)
    lines[index] = f"{body[: second + 1]} {render_patches(merged)} {body[last:]}{ending}"
    return "".join(lines)


# ---------------------------------------------------------------- changes, validation, writing


def _changes(
    series: SeriesFile,
    pages: Mapping[str, tuple[FixPage, str]],
    names: Sequence[str],
    incoming: Sequence[Incoming],
    owners: Mapping[str, _Owner],
    base: str | None,
) -> dict[str, bytes]:
    """File name -> new bytes, in write order: patches, pages, then the series file."""
    changes = {name: inc.data for name, inc in zip(names, incoming, strict=True)}
    for file, (page, text) in pages.items():
        added = [
            PatchFiles(name, inc.touched)
            for name, inc in zip(names, incoming, strict=True)
            if owners[name].file == file and owners[name].added
        ]
        if added:
            changes[file] = page_with_patches(text, page, added).encode("utf-8")
    try:
        updated = with_patches(series, [*series.patches, *names])
        if base is not None:
            updated = with_base(updated, base)
    except ValueError as err:
        raise ImportFailed(str(err)) from err
    changes[SERIES_FILE] = render_series(updated).encode("utf-8")
    return changes


def _validate(directory: Path, changes: Mapping[str, bytes]) -> None:
    """Load a copy of the directory with the changes applied; refuse if it does not load."""
    with tempfile.TemporaryDirectory(prefix="carry-import-") as scratch:
        root = Path(scratch)
        copy = root / directory.resolve().parent.name / directory.resolve().name
        shutil.copytree(directory, copy)
        for name, data in changes.items():
            (copy / name).write_bytes(data)
        try:
            load_series(copy, root=root)
        except SeriesInvalid as err:
            problems = "; ".join(str(p) for p in err.problems)
            raise ImportFailed(f"the series would not load after the import: {problems}") from err


def _write(directory: Path, changes: Mapping[str, bytes]) -> None:
    """Move each file into place atomically; put the old ones back if one cannot be written."""
    originals = {name: _read_or_none(directory / name) for name in changes}
    done: list[str] = []
    try:
        for name, data in changes.items():
            _replace_file(directory / name, data)
            done.append(name)
    except OSError as err:
        for name in reversed(done):
            _restore(directory / name, originals[name])
        raise ImportFailed(f"cannot write {directory}: {err.strerror or err}") from err


def _read_or_none(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def _replace_file(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.carry-import")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _restore(path: Path, original: bytes | None) -> None:
    if original is None:
        path.unlink(missing_ok=True)
    else:
        _replace_file(path, original)
