"""Fix pages: one Markdown page per carried fix, parsed into values and validated.

Pure: text in, values and problems out. No I/O, no git. The page is parsed, never rendered;
the dashboard renders the Markdown itself.

Format (see patches/*/*.md)::

    # <fix-name>

    <one-paragraph summary>

    | Field | Value |
    |---|---|
    | Affects | ... |
    | Releases | v0.26.0, v0.30.0 |
    | Patches | 0001-foo.patch: path/one.py, path/two.py; 0002-bar.patch: path/three.py |
    | Upstream | owner/repo#1919 (open); owner/repo#12 (closed, superseded by owner/repo#34) |
    | Test | ... |
    | Owners | @alice, @bob |                      (optional: told when its check stays red)

    ## Problem / ## Symptom / ## Who is affected / ## The fix / ## Verify   (required, non-empty)
    ## Upstream history                                                    (optional; carry appends)

The header row and its delimiter row are optional. Every problem is a `PageProblem` naming the
file and the 1-based line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date

from bot.core.markdown import links
from bot.core.weblink import web_link_problem

REQUIRED_FIELDS = ("Affects", "Releases", "Patches", "Upstream", "Test")
OPTIONAL_FIELDS = ("Owners",)  # GitHub logins told when the fix's check stays red (issue 32)
FIELDS = (*REQUIRED_FIELDS, *OPTIONAL_FIELDS)
REQUIRED_SECTIONS = ("Problem", "Symptom", "Who is affected", "The fix", "Verify")
HISTORY_SECTION = "Upstream history"
SECTIONS = (*REQUIRED_SECTIONS, HISTORY_SECTION)

# "superseded" is written "superseded by <ref>"; "closed" may add ", superseded by <ref>".
STATES = ("open", "draft", "merged", "closed", "superseded", "reverted", "not-filed")
STATE_CHOICES = "open, draft, merged, closed, superseded by <ref>, reverted, not-filed"

FIX_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]*\Z")
PATCH_NAME_RE = re.compile(r"[0-9]{4}-[A-Za-z0-9][A-Za-z0-9._-]*\.patch\Z")
_REPO = r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+"
_REPO_RE = re.compile(rf"{_REPO}\Z")
_REF_RE = re.compile(rf"({_REPO})#([1-9][0-9]*)\Z")
_ENTRY_RE = re.compile(r"(?P<ref>\S+)\s*\((?P<state>[^()]*)\)\Z")
_SUPERSEDED_RE = re.compile(r"(?:(?P<state>[a-z-]+)\s*,\s*)?superseded by\s+(?P<by>\S+)\Z")
_DELIMITER_CELL = re.compile(r"\s*:?-+:?\s*\Z")
_SHA_RE = re.compile(r"[0-9a-f]{7,40}\Z")
_FENCES = ("```", "~~~")
_DROPPED_RE = re.compile(r"^- \d{4}-\d{2}-\d{2}: (\S+) dropped;", re.M)

PATCHES_FORMAT = "'<NNNN-slug.patch>: <file>, <file>'"
ENTRY_FORMAT = "'<owner>/<repo>#<number> (<state>)'"


@dataclass(frozen=True, order=True)
class PageProblem:
    """One problem in a carried file. `line` is 1-based; 0 means the file as a whole."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        if self.line:
            return f"{self.file}:{self.line}: {self.message}"
        return f"{self.file}: {self.message}"


@dataclass(frozen=True)
class UpstreamRef:
    repo: str
    number: int

    def __str__(self) -> str:
        return f"{self.repo}#{self.number}"


@dataclass(frozen=True)
class UpstreamEntry:
    """One upstream PR of a fix. repo/number are None only for a bare `not-filed`."""

    repo: str | None
    number: int | None
    state: str
    superseded_by: UpstreamRef | None = None

    @property
    def ref(self) -> UpstreamRef | None:
        if self.repo is None or self.number is None:
            return None
        return UpstreamRef(self.repo, self.number)

    def render(self) -> str:
        if self.state == "superseded" and self.superseded_by is not None:
            state = f"superseded by {self.superseded_by}"
        elif self.superseded_by is not None:
            state = f"{self.state}, superseded by {self.superseded_by}"
        else:
            state = self.state
        if self.repo is None:
            return state
        target = self.repo if self.number is None else f"{self.repo}#{self.number}"
        return f"{target} ({state})"


@dataclass(frozen=True)
class PatchFiles:
    """A patch file a fix consists of, and the upstream source files its diff touches."""

    patch: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class Section:
    title: str
    line: int  # line of the `## ` heading
    body: str  # without leading/trailing blank lines
    last_line: int  # last non-blank line of the body (the heading's line when empty)


@dataclass(frozen=True)
class FixPage:
    """A parsed fix page. Complete only when parsing reported no problems."""

    name: str
    file: str
    summary: str = ""
    affects: str = ""
    releases: tuple[str, ...] = ()
    patches: tuple[PatchFiles, ...] = ()
    upstream: tuple[UpstreamEntry, ...] = ()
    test: str = ""
    owners: tuple[str, ...] = ()  # GitHub logins, without the @
    sections: tuple[Section, ...] = ()
    field_lines: Mapping[str, int] = field(default_factory=dict)

    @property
    def patch_names(self) -> tuple[str, ...]:
        return tuple(p.patch for p in self.patches)

    def files_for(self, patch: str) -> tuple[str, ...] | None:
        for entry in self.patches:
            if entry.patch == patch:
                return entry.files
        return None

    @property
    def dropped_patches(self) -> tuple[str, ...]:
        """Patches this page once carried and carry dropped (recorded in Upstream history)."""
        history = self.section(HISTORY_SECTION) or ""
        return tuple(_DROPPED_RE.findall(history))

    def section(self, title: str) -> str | None:
        for sec in self.sections:
            if sec.title == title:
                return sec.body
        return None

    @property
    def upstream_text(self) -> str:
        return render_upstream(self.upstream)


@dataclass
class _Report:
    file: str
    problems: list[PageProblem] = field(default_factory=list)

    def add(self, line: int, message: str) -> None:
        self.problems.append(PageProblem(self.file, line, message))


@dataclass
class _Fields:
    """The field table as read: name -> (line, raw value), plus where the table starts."""

    start: int
    values: dict[str, tuple[int, str]] = field(default_factory=dict)


# ---------------------------------------------------------------- public parsing API


def parse_fix_page(
    text: str, file: str, *, expected_name: str | None = None, patches_pending: bool = False
) -> tuple[FixPage, tuple[PageProblem, ...]]:
    """Parse and validate a page. The page is best effort when problems are reported.
    `patches_pending`: its series waits for `carry import`, which fills the Patches field, so
    that field may still be empty."""
    report = _Report(file)
    lines = _lines(text)
    name = _parse_title(lines, expected_name, report)
    preamble_end, headings = _split_headings(lines, report)
    summary, table_rows = _parse_preamble(lines, preamble_end, report)
    may_be_empty = frozenset({"Patches"} if patches_pending else ())
    fields = _parse_table(table_rows, report, fallback_line=1, may_be_empty=may_be_empty)
    sections = _parse_sections(lines, headings, report)
    page = FixPage(
        name=name,
        file=file,
        summary=summary,
        sections=sections,
        field_lines={k: line for k, (line, _) in fields.values.items()},
    )
    page = _apply_fields(page, fields, report)
    _check_links(text, report)
    return page, tuple(report.problems)


def _check_links(text: str, report: _Report) -> None:
    """Every link and image of the page must be an http(s) URL: the dashboard shows the
    page, and a `javascript:` link would run on its origin."""
    for link in links(text):
        problem = web_link_problem(link.target)
        if problem is not None:
            report.add(link.line, f"link {problem}")


def validate_fix_page(
    text: str, file: str, *, expected_name: str | None = None
) -> list[PageProblem]:
    return list(parse_fix_page(text, file, expected_name=expected_name)[1])


def is_patch_name(name: str) -> bool:
    return PATCH_NAME_RE.match(name) is not None


def parse_ref(text: str) -> UpstreamRef | None:
    """`owner/repo#123` -> UpstreamRef, anything else -> None."""
    match = _REF_RE.match(text.strip())
    if match is None:
        return None
    return UpstreamRef(match.group(1), int(match.group(2)))


def parse_upstream(value: str) -> tuple[tuple[UpstreamEntry, ...], list[str]]:
    """Parse the Upstream cell. Returns the entries and one message per bad entry."""
    entries: list[UpstreamEntry] = []
    errors: list[str] = []
    seen: set[str] = set()
    for raw in value.split(";"):
        text = raw.strip()
        if not text:
            errors.append("Upstream: empty entry (entries are separated by ';')")
            continue
        entry, error = _parse_upstream_entry(text)
        if error is not None:
            errors.append(f"Upstream: {error}")
            continue
        assert entry is not None
        if entry.ref is not None and str(entry.ref) in seen:
            errors.append(f"Upstream: duplicate entry '{entry.ref}'")
            continue
        seen.add(str(entry.ref))
        entries.append(entry)
    return tuple(entries), errors


def render_upstream(entries: Iterable[UpstreamEntry]) -> str:
    return "; ".join(entry.render() for entry in entries)


def render_patches(entries: Iterable[PatchFiles]) -> str:
    return "; ".join(f"{e.patch}: {', '.join(e.files)}" for e in entries)


# ---------------------------------------------------------------- title, headings, preamble


def _lines(text: str) -> list[str]:
    """Lines without their endings (CRLF tolerated). Index i holds line i+1."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _parse_title(lines: Sequence[str], expected: str | None, report: _Report) -> str:
    first = lines[0] if lines else ""
    if not first.startswith("# "):
        report.add(1, "first line must be the title '# <fix-name>'")
        return expected or ""
    name = first[2:].strip()
    if not FIX_NAME_RE.match(name):
        report.add(1, f"bad fix name '{name}' (expected lowercase letters, digits and '-')")
    elif expected is not None and name != expected:
        report.add(1, f"title '# {name}' does not match the file name (expected '# {expected}')")
    return name


def _split_headings(lines: Sequence[str], report: _Report) -> tuple[int, list[tuple[int, str]]]:
    """Find `## ` headings outside code fences. Returns (index of first heading, headings)."""
    headings: list[tuple[int, str]] = []
    fence: tuple[int, str] | None = None
    for index in range(1, len(lines)):
        stripped = lines[index].lstrip()
        marker = next((m for m in _FENCES if stripped.startswith(m)), None)
        if marker is not None:
            if fence is None:
                fence = (index + 1, marker)
            elif marker == fence[1]:
                fence = None
            continue
        if fence is not None:
            continue
        line = lines[index]
        if line.startswith("## "):
            headings.append((index, line[3:].strip()))
        elif line.startswith("# "):
            report.add(index + 1, f"unexpected second title '{line}' (sections use '## ')")
    if fence is not None:
        report.add(fence[0], "code fence is never closed")
    first = headings[0][0] if headings else len(lines)
    return first, headings


def _parse_preamble(
    lines: Sequence[str], end: int, report: _Report
) -> tuple[str, list[tuple[int, str]]]:
    """Read the summary paragraph and the field table between the title and the first section.
    Lines of HTML comments are skipped, as Markdown hides them (`carry new` explains the fields
    in comments)."""
    summary: list[str] = []
    table: list[tuple[int, str]] = []
    state = "before-summary"  # -> "summary" -> "after-summary" -> "table" -> "after-table"
    in_comment = False
    for index in range(1, end):
        line = lines[index]
        number = index + 1
        if in_comment or line.lstrip().startswith("<!--"):
            in_comment = "-->" not in line
            continue
        is_row = line.lstrip().startswith("|")
        blank = not line.strip()
        if is_row and state in ("before-summary", "summary", "after-summary"):
            state = "table"
        if is_row and state == "table":
            table.append((number, line))
        elif is_row:
            report.add(number, "table row outside the field table (the table must be one block)")
        elif blank:
            state = {"summary": "after-summary", "table": "after-table"}.get(state, state)
        elif state in ("before-summary", "summary"):
            summary.append(line.strip())
            state = "summary"
        elif state == "after-summary":
            report.add(number, "the summary must be one paragraph")
        else:
            report.add(number, "unexpected text after the field table (start a '## ' section)")
    if not summary:
        report.add(2, "missing summary paragraph after the title")
    if not table:
        report.add(min(end + 1, len(lines)) or 1, "missing field table (| Affects | ... |)")
    return " ".join(summary), table


# ---------------------------------------------------------------- field table


def _cells(line: str) -> list[str] | None:
    stripped = line.strip()
    if len(stripped) < 2 or not stripped.endswith("|"):
        return None
    return [cell.strip() for cell in stripped[1:-1].split("|")]


def _is_delimiter(cells: Sequence[str]) -> bool:
    return bool(cells) and all(_DELIMITER_CELL.match(cell) for cell in cells)


def _parse_table(
    rows: Sequence[tuple[int, str]],
    report: _Report,
    fallback_line: int,
    may_be_empty: frozenset[str] = frozenset(),
) -> _Fields:
    fields = _Fields(start=rows[0][0] if rows else fallback_line)
    body = list(rows)
    if len(body) >= 2 and _is_delimiter(_cells(body[1][1]) or []):
        body = body[2:]  # header row + delimiter row
    for number, line in body:
        cells = _cells(line)
        if cells is None:
            report.add(number, "table row must start and end with '|'")
        elif _is_delimiter(cells):
            report.add(number, "unexpected delimiter row inside the field table")
        elif len(cells) != 2:
            report.add(number, f"field row must have 2 columns (found {len(cells)})")
        else:
            _add_field(fields, number, cells[0], cells[1], report, may_be_empty)
    for name in REQUIRED_FIELDS:
        if name not in fields.values:
            report.add(fields.start, f"missing field '{name}'")
    return fields


def _add_field(
    fields: _Fields,
    number: int,
    name: str,
    value: str,
    report: _Report,
    may_be_empty: frozenset[str],
) -> None:
    if name not in FIELDS:
        report.add(number, f"unknown field '{name}' (expected one of: {', '.join(FIELDS)})")
    elif name in fields.values:
        report.add(number, f"duplicate field '{name}' (first on line {fields.values[name][0]})")
    elif not value:
        fields.values[name] = (number, value)
        if name not in may_be_empty:
            report.add(number, f"field '{name}' is empty")
    else:
        fields.values[name] = (number, value)


def _apply_fields(page: FixPage, fields: _Fields, report: _Report) -> FixPage:
    def value(name: str) -> tuple[int, str]:
        return fields.values.get(name, (fields.start, ""))

    line, releases = value("Releases")
    parsed_releases = _parse_releases(releases, line, report) if releases else ()
    line, patches = value("Patches")
    parsed_patches = _parse_patches(patches, line, report) if patches else ()
    line, upstream = value("Upstream")
    entries: tuple[UpstreamEntry, ...] = ()
    if upstream:
        entries, errors = parse_upstream(upstream)
        for error in errors:
            report.add(line, error)
    return replace(
        page,
        affects=value("Affects")[1],
        releases=parsed_releases,
        patches=parsed_patches,
        upstream=entries,
        test=value("Test")[1],
        owners=_parse_owners(*value("Owners"), report),
    )


# GitHub's rule for a login: alphanumerics and single hyphens, not at either end, at most 39.
_LOGIN_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}\Z")
OWNERS_FORMAT = "'@login, @login'"


def _parse_owners(line: int, value: str, report: _Report) -> tuple[str, ...]:
    """`@alice, @bob` (the @ optional): each a GitHub login, each once."""
    owners: list[str] = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        login = item.removeprefix("@")
        if not _LOGIN_RE.match(login):
            report.add(line, f"bad owner '{item}' (expected {OWNERS_FORMAT}: GitHub logins)")
        elif login.lower() not in {o.lower() for o in owners}:
            owners.append(login)
    return tuple(owners)


def _parse_releases(value: str, line: int, report: _Report) -> tuple[str, ...]:
    releases: list[str] = []
    for raw in value.split(","):
        release = raw.strip()
        if not release:
            report.add(line, "Releases: empty entry (releases are separated by ',')")
        elif any(ch.isspace() for ch in release):
            report.add(line, f"Releases: bad release '{release}' (no spaces; separate with ',')")
        elif release in releases:
            report.add(line, f"Releases: duplicate release '{release}'")
        else:
            releases.append(release)
    return tuple(releases)


def _parse_patches(value: str, line: int, report: _Report) -> tuple[PatchFiles, ...]:
    entries: list[PatchFiles] = []
    for raw in value.split(";"):
        text = raw.strip()
        name, sep, files_text = text.partition(":")
        name = name.strip()
        if not sep:
            report.add(line, f"Patches: entry '{text}' must be {PATCHES_FORMAT}")
        elif not is_patch_name(name):
            report.add(line, f"Patches: bad patch name '{name}' (expected NNNN-slug.patch)")
        elif name in (e.patch for e in entries):
            report.add(line, f"Patches: duplicate patch '{name}'")
        else:
            files = _parse_patch_files(name, files_text, line, report)
            entries.append(PatchFiles(name, files))
    return tuple(entries)


def _parse_patch_files(patch: str, text: str, line: int, report: _Report) -> tuple[str, ...]:
    files: list[str] = []
    if not text.strip():
        report.add(line, f"Patches: {patch} lists no files")
        return ()
    for raw in text.split(","):
        path = raw.strip()
        if not path:
            report.add(line, f"Patches: {patch}: empty file name (files are separated by ',')")
        elif path.startswith("/") or ".." in path.split("/"):
            report.add(
                line,
                f"Patches: {patch}: bad path '{path}' "
                "(expected a path relative to the upstream repository root)",
            )
        elif path in files:
            report.add(line, f"Patches: {patch} lists '{path}' twice")
        else:
            files.append(path)
    return tuple(files)


def _parse_upstream_entry(text: str) -> tuple[UpstreamEntry | None, str | None]:
    if text == "not-filed":
        return UpstreamEntry(None, None, "not-filed"), None
    match = _ENTRY_RE.match(text)
    if match is None:
        return None, f"entry '{text}' must be {ENTRY_FORMAT}"
    ref_text, state_text = match.group("ref"), match.group("state").strip()
    if state_text == "not-filed":
        if _REPO_RE.match(ref_text):
            return UpstreamEntry(ref_text, None, "not-filed"), None
        return None, f"'{text}': a not-filed entry names a repository, not a PR ('<owner>/<repo>')"
    ref = parse_ref(ref_text)
    if ref is None:
        return None, f"malformed PR ref '{ref_text}' (expected <owner>/<repo>#<number>)"
    state, by, error = _parse_state(state_text)
    if error is not None:
        return None, error
    return UpstreamEntry(ref.repo, ref.number, state, by), None


def _parse_state(text: str) -> tuple[str, UpstreamRef | None, str | None]:
    superseded = _SUPERSEDED_RE.match(text)
    if superseded is None:
        if text == "superseded":
            return "", None, "state 'superseded' must name the replacing PR: 'superseded by <ref>'"
        if text not in STATES:
            return "", None, f"unknown state '{text}' (expected one of: {STATE_CHOICES})"
        return text, None, None
    by = parse_ref(superseded.group("by"))
    if by is None:
        by_text = superseded.group("by")
        return "", None, f"malformed PR ref '{by_text}' (expected <owner>/<repo>#<number>)"
    state = superseded.group("state")
    if state is None:
        return "superseded", by, None
    if state != "closed":
        return "", None, f"'{state}, superseded by ...': only a closed PR can be superseded"
    return "closed", by, None


# ---------------------------------------------------------------- sections


def _parse_sections(
    lines: Sequence[str], headings: Sequence[tuple[int, str]], report: _Report
) -> tuple[Section, ...]:
    sections: list[Section] = []
    first_seen: dict[str, int] = {}
    for position, (index, title) in enumerate(headings):
        end = headings[position + 1][0] if position + 1 < len(headings) else len(lines)
        first_text, last_text = _text_bounds(lines, index + 1, end)
        body = "\n".join(lines[first_text:last_text])
        number = index + 1
        if title not in SECTIONS:
            expected = ", ".join(SECTIONS)
            report.add(number, f"unknown section '{title}' (expected one of: {expected})")
            continue
        if title in first_seen:
            report.add(number, f"duplicate section '{title}' (first on line {first_seen[title]})")
            continue
        first_seen[title] = number
        if not body:
            report.add(number, f"section '{title}' is empty")
        sections.append(Section(title, number, body, last_text if body else number))
    last = max(len(lines), 1)
    for title in REQUIRED_SECTIONS:
        if title not in first_seen:
            report.add(last, f"missing section '## {title}'")
    return tuple(sections)


def _text_bounds(lines: Sequence[str], start: int, end: int) -> tuple[int, int]:
    """[first, last) indexes of lines[start:end] without leading and trailing blank lines."""
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return start, end


# ---------------------------------------------------------------- updating a page (pure)


class PageUpdateError(ValueError):
    """The page cannot be updated (it has problems, or the arguments are malformed)."""


def update_upstream(text: str, file: str, entries: Sequence[UpstreamEntry]) -> str:
    """Rewrite the Upstream cell with `entries`; every other byte stays as it was."""
    page = _valid_page(text, file)
    return _replace_upstream_cell(text, page, entries)


def record_upstream_take(
    text: str,
    file: str,
    *,
    patch: str,
    commit: str,
    pr: UpstreamRef | str,
    on: date,
) -> str:
    """Record that upstream took `patch` (commit + PR): a dated `## Upstream history` entry and
    the PR's Upstream state set to merged.

    A PR the page does not list yet is added as merged, and the page's open/draft entries become
    "superseded by" it. Calling it again with the same arguments returns the text unchanged.
    """
    ref = parse_ref(pr) if isinstance(pr, str) else pr
    if ref is None:
        raise PageUpdateError(f"malformed PR ref '{pr}' (expected <owner>/<repo>#<number>)")
    if not _SHA_RE.match(commit):
        raise PageUpdateError(f"bad commit '{commit}' (expected 7-40 lowercase hex digits)")
    page = _valid_page(text, file)
    if patch not in page.patch_names:
        raise PageUpdateError(f"{file}: page '{page.name}' does not name patch '{patch}'")
    updated = _replace_upstream_cell(text, page, _entries_after_take(page.upstream, ref))
    entry = f"- {on.isoformat()}: {patch} dropped; upstream took it in {ref.repo}@{commit} ({ref})."
    return _append_history(updated, file, entry)


def _valid_page(text: str, file: str) -> FixPage:
    page, problems = parse_fix_page(text, file)
    if problems:
        listed = "; ".join(str(p) for p in problems)
        raise PageUpdateError(f"cannot update a fix page with problems: {listed}")
    return page


def _entries_after_take(
    entries: Sequence[UpstreamEntry], ref: UpstreamRef
) -> tuple[UpstreamEntry, ...]:
    if any(e.ref == ref for e in entries):
        return tuple(
            replace(e, state="merged", superseded_by=None) if e.ref == ref else e for e in entries
        )
    superseded = tuple(
        replace(e, state="superseded", superseded_by=ref) if e.state in ("open", "draft") else e
        for e in entries
    )
    return (*superseded, UpstreamEntry(ref.repo, ref.number, "merged"))


def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _replace_upstream_cell(text: str, page: FixPage, entries: Sequence[UpstreamEntry]) -> str:
    index = page.field_lines["Upstream"] - 1
    lines = text.splitlines(keepends=True)
    line = lines[index]
    body = line.rstrip("\r\n")
    ending = line[len(body) :]
    first = body.index("|")
    second = body.index("|", first + 1)
    last = body.rindex("|")
    lines[index] = f"{body[: second + 1]} {render_upstream(entries)} {body[last:]}{ending}"
    return "".join(lines)


def _append_history(text: str, file: str, entry: str) -> str:
    page = _valid_page(text, file)
    newline = _newline(text)
    section = next((s for s in page.sections if s.title == HISTORY_SECTION), None)
    if section is None:
        tail = "" if text.endswith("\n") else newline
        return f"{text}{tail}{newline}## {HISTORY_SECTION}{newline}{newline}{entry}{newline}"
    if entry in section.body.split("\n"):
        return text
    lines = text.splitlines(keepends=True)
    last_index = section.last_line - 1
    if not lines[last_index].endswith("\n"):
        lines[last_index] += newline
    lines.insert(last_index + 1, entry + newline)
    return "".join(lines)
