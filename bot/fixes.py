"""`carry fixes`: one row per fix page of every loaded series, and a plain-text table."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bot.core.fixpage import FixPage
from bot.series_loader import LoadedSeries

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bot/cli.py)
if TYPE_CHECKING:
    from bot.config import BaseSpec
    from bot.core.state import SeriesState

NO_DECISION = "none yet"
UNKNOWN_DECISION = "unknown"  # the service's store could not be read
COLUMNS = ("FIX", "SERIES", "UPSTREAM", "RELEASES", "PATCHES", "LATEST DECISION")


@dataclass(frozen=True)
class Carrier:
    """A configured series, as far as release lines go."""

    series_id: str
    patches: str  # its directory's name under the patches directory
    release: str | None  # the upstream release its base sits on (a tag, a release branch)
    waiting_for: str | None = None  # the ref upstream has not created yet (the service's state)
    pull: int | None = None  # the upstream PR it sits on, for a PR base (which names no release)


def carrier_of(
    series_id: str, directory: str, base: BaseSpec, state: SeriesState | None
) -> Carrier:
    """A configured series as a carrier: the release its base names (a tag, the last part of a
    release branch such as releases/v0.30.0, or the tag a tag pattern follows now)."""
    release = base.tag or (base.branch or "").rsplit("/", 1)[-1] or None
    head_ref = state.head_ref if state is not None and state.head_ref else ""
    if base.tag_pattern and head_ref.startswith("refs/tags/"):
        release = head_ref.removeprefix("refs/tags/")
    waiting = state.waiting_for_ref if state is not None else None
    return Carrier(series_id, directory, release, waiting, base.pull)


@dataclass(frozen=True)
class FixRow:
    fix: str
    series: str
    upstream: str
    releases: str
    patches: str
    decision: str
    # why a release the page lists is not carried, one line each (with known carriers)
    notes: tuple[str, ...] = ()

    def cells(self) -> tuple[str, ...]:
        return (self.fix, self.series, self.upstream, self.releases, self.patches, self.decision)


def fix_rows(
    series: Iterable[LoadedSeries],
    decisions: Mapping[str, str] | None = None,
    *,
    unknown: bool = False,
    carriers: Sequence[Carrier] | None = None,
) -> list[FixRow]:
    """Rows sorted by (fix, series). `decisions` maps a patch to its latest decision, keyed
    '<series-id>/<patch>' or, for all series, by the bare patch file name; with `unknown`, the
    decisions could not be read and a patch without one says so rather than "none yet". With
    `carriers` (the configured series), each listed release says whether a series carries it."""
    loaded_series = list(series)
    missing = UNKNOWN_DECISION if unknown else NO_DECISION
    directories = _directories_by_fix(loaded_series)
    rows = []
    for loaded in loaded_series:
        for page in loaded.pages:
            lines = None
            if carriers is not None:
                of_fix = [c for c in carriers if c.patches in directories[page.name]]
                lines = [release_line(page.name, r, of_fix) for r in page.releases]
            rows.append(_row(loaded, page, decisions or {}, missing, lines))
    return sorted(rows, key=lambda row: (row.fix, row.series))


@dataclass(frozen=True)
class ReleaseLine:
    release: str
    mark: str  # "" when carried; else "waiting", "on a PR" or "not carried"
    reason: str | None  # why, when it is not carried

    def note(self, fix: str) -> str | None:
        return f"{fix} {self.release}: {self.mark}: {self.reason}" if self.reason else None


def release_line(fix: str, release: str, carriers: Sequence[Carrier]) -> ReleaseLine:
    """Whether a series with a page of `fix` sits on `release`, or waits for upstream to cut it."""
    on_it = [c for c in carriers if c.release == release]
    if any(c.waiting_for is None for c in on_it):
        return ReleaseLine(release, "", None)
    if on_it:
        waiting = ", ".join(f"{c.series_id} waits for {c.waiting_for}" for c in on_it)
        return ReleaseLine(release, "waiting", f"upstream has not cut it yet ({waiting})")
    on_prs = [c for c in carriers if c.pull is not None and c.release is None]
    if on_prs:
        who = ", ".join(f"{c.series_id} carries it on upstream PR #{c.pull}" for c in on_prs)
        why = f"{who}; a PR names no release, so carry does not match it to {release}"
        return ReleaseLine(release, "on a PR", why)
    why = (
        f"no configured series with a page of {fix} sits on an upstream release named "
        f"{release} (base {{tag: {release}}} or a branch ending in it)"
    )
    return ReleaseLine(release, "not carried", why)


def _directories_by_fix(series: Iterable[LoadedSeries]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for loaded in series:
        for page in loaded.pages:
            found.setdefault(page.name, set()).add(loaded.directory.name)
    return found


def _row(
    loaded: LoadedSeries,
    page: FixPage,
    decisions: Mapping[str, str],
    missing: str,
    lines: list[ReleaseLine] | None,
) -> FixRow:
    series = loaded.series_id
    if loaded.is_awaiting_import:
        series = f"{series} (awaiting import)"
    if lines is None:
        releases = ", ".join(page.releases)
    else:
        releases = ", ".join(f"{x.release} ({x.mark})" if x.mark else x.release for x in lines)
    return FixRow(
        fix=page.name,
        series=series,
        upstream=page.upstream_text or "-",
        releases=releases or "-",
        patches=", ".join(page.patch_names) or "-",
        decision=_decision(loaded, page, decisions, missing),
        notes=tuple(note for x in lines or () if (note := x.note(page.name))),
    )


def _decision(
    loaded: LoadedSeries, page: FixPage, decisions: Mapping[str, str], missing: str
) -> str:
    if loaded.is_awaiting_import:
        return "awaiting import"
    found = []
    for patch in page.patch_names:
        key = f"{loaded.series_id}/{patch}"
        found.append((patch, decisions.get(key, decisions.get(patch, missing))))
    if not found:
        return missing
    if len({decision for _, decision in found}) == 1:
        return found[0][1]
    return "; ".join(f"{patch}: {decision}" for patch, decision in found)


def render_fix_table(rows: Sequence[FixRow]) -> str:
    """Fixed-width plain text, one line per row, columns separated by two spaces."""
    table = [COLUMNS, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if not rows:
        lines.append("(no fix pages)")
    notes = sorted({note for row in rows for note in row.notes})
    if notes:
        lines += ["", "Releases the fix pages list that no series carries:"]
        lines += [f"  {note}" for note in notes]
    return "".join(line.rstrip() + "\n" for line in lines)
