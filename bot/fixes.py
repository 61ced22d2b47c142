"""`carry fixes`: one row per fix page of every loaded series, and a plain-text table."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bot.core.fixpage import FixPage
from bot.series_loader import LoadedSeries

NO_DECISION = "none yet"
UNKNOWN_DECISION = "unknown"  # the service's store could not be read
COLUMNS = ("FIX", "SERIES", "UPSTREAM", "RELEASES", "PATCHES", "LATEST DECISION")


@dataclass(frozen=True)
class FixRow:
    fix: str
    series: str
    upstream: str
    releases: str
    patches: str
    decision: str

    def cells(self) -> tuple[str, ...]:
        return (self.fix, self.series, self.upstream, self.releases, self.patches, self.decision)


def fix_rows(
    series: Iterable[LoadedSeries],
    decisions: Mapping[str, str] | None = None,
    *,
    unknown: bool = False,
) -> list[FixRow]:
    """Rows sorted by (fix, series). `decisions` maps a patch to its latest decision, keyed
    '<series-id>/<patch>' or, for all series, by the bare patch file name; with `unknown`, the
    decisions could not be read and a patch without one says so rather than "none yet"."""
    missing = UNKNOWN_DECISION if unknown else NO_DECISION
    rows = [
        _row(loaded, page, decisions or {}, missing) for loaded in series for page in loaded.pages
    ]
    return sorted(rows, key=lambda row: (row.fix, row.series))


def _row(loaded: LoadedSeries, page: FixPage, decisions: Mapping[str, str], missing: str) -> FixRow:
    series = loaded.series_id
    if loaded.is_awaiting_import:
        series = f"{series} (awaiting import)"
    return FixRow(
        fix=page.name,
        series=series,
        upstream=page.upstream_text or "-",
        releases=", ".join(page.releases) or "-",
        patches=", ".join(page.patch_names) or "-",
        decision=_decision(loaded, page, decisions, missing),
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
    return "".join(line.rstrip() + "\n" for line in lines)
