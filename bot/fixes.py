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

NO_DECISION = "none yet"  # the series has not been checked
NOT_CHECKED = "not checked"
UNKNOWN = "unknown"  # the service's store could not be read: status and decision unknown
AWAITING_IMPORT = "awaiting import"  # the series file waits for `carry import`
NOTHING = "-"  # the decision of a patch not imported yet
WIDTH = 100  # `carry fixes` fits a terminal of 100 columns
HEADER = ("FIX / SERIES / PATCH", "STATUS", "DECISION")


@dataclass(frozen=True)
class Verdict:
    """What the service's last check said of one patch (its stored PatchState)."""

    status: str  # a bot.core.classify.Status value
    decision: str  # a bot.core.classify.Decision value

    @classmethod
    def shown(cls, status: str, decision: str) -> Verdict:
        """As `carry fixes` shows it: a patch still pending was not checked, and "none" is
        "none yet"."""
        return cls(
            NOT_CHECKED if status == "pending" else status,
            NO_DECISION if decision == "none" else decision,
        )


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
class PatchRow:
    name: str
    status: str
    decision: str


@dataclass(frozen=True)
class FixRow:
    """A fix page of one series: the page's fields, and each patch it names with its verdict."""

    fix: str
    series: str
    upstream: str
    releases: str
    patches: tuple[PatchRow, ...]
    # why a release the page lists is not carried, one line each (with known carriers)
    notes: tuple[str, ...] = ()


def fix_rows(
    series: Iterable[LoadedSeries],
    verdicts: Mapping[str, Verdict] | None = None,
    *,
    unknown: bool = False,
    carriers: Sequence[Carrier] | None = None,
) -> list[FixRow]:
    """Rows sorted by (fix, series). `verdicts` maps a patch to the service's last verdict,
    keyed '<series-id>/<patch>' or, for all series, by the bare patch file name; a patch
    without one was not checked, or, with `unknown`, the verdicts could not be read. With
    `carriers` (the configured series), each listed release says whether a series carries it."""
    loaded_series = list(series)
    missing = Verdict(UNKNOWN, UNKNOWN) if unknown else Verdict(NOT_CHECKED, NO_DECISION)
    directories = _directories_by_fix(loaded_series)
    rows = []
    for loaded in loaded_series:
        for page in loaded.pages:
            lines = None
            if carriers is not None:
                of_fix = [c for c in carriers if c.patches in directories[page.name]]
                lines = [release_line(page.name, r, of_fix) for r in page.releases]
            rows.append(_row(loaded, page, verdicts or {}, missing, lines))
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
    verdicts: Mapping[str, Verdict],
    missing: Verdict,
    lines: list[ReleaseLine] | None,
) -> FixRow:
    series = loaded.series_id
    if loaded.is_awaiting_import:
        series = f"{series} ({AWAITING_IMPORT})"
    if lines is None:
        releases = ", ".join(page.releases)
    else:
        releases = ", ".join(f"{x.release} ({x.mark})" if x.mark else x.release for x in lines)
    return FixRow(
        fix=page.name,
        series=series,
        upstream=page.upstream_text or "-",
        releases=releases or "-",
        patches=tuple(_patch_row(loaded, name, verdicts, missing) for name in page.patch_names),
        notes=tuple(note for x in lines or () if (note := x.note(page.name))),
    )


def _patch_row(
    loaded: LoadedSeries, name: str, verdicts: Mapping[str, Verdict], missing: Verdict
) -> PatchRow:
    if loaded.is_awaiting_import:
        return PatchRow(name, AWAITING_IMPORT, NOTHING)
    found = verdicts.get(f"{loaded.series_id}/{name}", verdicts.get(name, missing))
    return PatchRow(name, found.status, found.decision)


def render_fix_table(rows: Sequence[FixRow]) -> str:
    """Plain text that fits WIDTH columns: per fix page a line with its upstream state and
    releases, per series a line, and per patch a line with its status and decision, those two
    in aligned columns under a header."""
    patches = [patch for row in rows for patch in row.patches]
    status_w = max((len(p.status) for p in patches), default=0)
    status_w = max(status_w, len(HEADER[1]))
    decision_w = max([len(HEADER[2]), *(len(p.decision) for p in patches)])
    name_w = max([len(HEADER[0]), *(len(_PATCH_INDENT + p.name) for p in patches)])
    name_w = min(name_w, WIDTH - status_w - decision_w - 4)

    def columns(left: str, status: str, decision: str) -> list[str]:
        # A name too long for its column gets a line of its own, the verdict the next one.
        above = [left] if len(left) > name_w else []
        left = "" if above else left
        return [*above, f"{left:<{name_w}}  {status:<{status_w}}  {decision}"]

    lines = columns(*HEADER)
    if not rows:
        lines.append("(no fix pages)")
    shown: tuple[str, str, str] | None = None
    for row in rows:
        if (row.fix, row.upstream, row.releases) != shown:  # series whose pages agree share it
            lines += [""] if shown is not None else []
            shown = (row.fix, row.upstream, row.releases)
            lines += _wrap(f"{row.fix}: upstream {row.upstream}; releases {row.releases}", "")
        lines.append(f"  {row.series}")
        for patch in row.patches:
            lines += columns(_PATCH_INDENT + patch.name, patch.status, patch.decision)
    notes = sorted({note for row in rows for note in row.notes})
    if notes:
        lines += ["", "Releases the fix pages list that no series carries:"]
        for note in notes:
            lines += _wrap(note, "  ")
    return "".join(line.rstrip() + "\n" for line in lines)


_PATCH_INDENT = "    "


def _wrap(text: str, indent: str) -> list[str]:
    """`text` in lines of at most WIDTH columns, the later ones indented further; names and
    refs are never split (a single word longer than a line keeps its own line)."""
    import textwrap

    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + "    ",
        break_long_words=False,
        break_on_hyphens=False,
    )
