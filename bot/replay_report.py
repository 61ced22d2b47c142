"""`carry replay`'s reports: text for a terminal, and one self-contained HTML file (inline
CSS, an inline SVG chart of the human actions per month, no external assets) to share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bot.core import replay as core
from bot.replay import Result, sampling_words

TEMPLATES = Path(__file__).parent / "web" / "templates"
SUBJECT_WIDTH = 60


def render_text(result: Result) -> str:
    summary = result.summary
    spec = result.spec
    lines = [
        f"replay of series {spec.series_id} on {spec.shown_repo}",
        f"  from {spec.start} to {(summary.last_head or '')[:12]} ({sampling_words(spec)}): "
        f"{summary.heads_walked} heads, {summary.first_date} .. {summary.last_date}",
        "",
        "timeline (heads where something changed):",
    ]
    shown = core.changed_heads(result.records)
    before = core.previous_heads(result.records)
    for record in shown:
        lines.append(
            f"  {record.date[:16]} {record.sha[:12]} {record.subject[:SUBJECT_WIDTH]}"
            f"  [{record.outcome}]"
        )
        moved = core.moved_patches(before[record.index], record)
        for p in moved:
            lines.append(f"      {p.name}  {p.status.value} {p.decision.value}")
        same = len(record.patches) - len(moved)
        if same:
            lines.append(f"      ({same} patch{'es' if same != 1 else ''} as before)")
        lines += [f"      carry: {act.words}" for act in record.acts]
    quiet = len(result.records) - len(shown)
    if quiet:
        lines.append(f"  ({quiet} heads where nothing changed are not shown; --json has them)")
    lines += ["", "patches:"]
    for patch in core.patch_summaries(result.records):
        lines += _patch_lines(patch, result.records)
    lines += ["", "summary:"]
    lines += [
        f"  heads walked      {summary.heads_walked}",
        f"  PRs opened        {summary.prs_opened}",
        f"  PRs updated       {summary.prs_updated}",
        f"  PRs merged        {summary.prs_merged} (the model merges each PR that needs no human)",
        f"  automatic drops   {summary.automatic_drops}",
        f"  reviews           {summary.reviews}",
        f"  conflicts         {summary.conflicts}",
        f"  human actions     {summary.human_actions}",
        "  human actions per month:",
    ]
    lines += [f"    {month}  {count}" for month, count in summary.human_actions_per_month.items()]
    return "\n".join(lines) + "\n"


def _patch_lines(patch: core.PatchSummary, records: list[core.HeadRecord]) -> list[str]:
    now = f"{patch.last_status.value} {patch.last_decision.value}"
    if patch.dropped_at is not None:
        now = f"dropped ({now} at {records[patch.dropped_at].sha[:12]})"
    lines = [f"  {patch.name}: {'' if patch.dropped_at is not None else 'now '}{now}"]
    first = patch.first_human
    if first is None:
        lines.append("    never needed a human")
    else:
        lines.append(
            f"    first needed a human at {first.start_date[:16]} {first.start_sha[:12]} "
            f"({first.status.value}, {first.decision.value})"
        )
        lines.append(
            f"    needed a human for {patch.human_heads} heads, {patch.human_days} days, in "
            f"{len(patch.episodes)} stretch{'es' if len(patch.episodes) != 1 else ''}"
        )
    drop = patch.droppable
    if drop is not None:
        pr = f" (PR #{drop.pr})" if drop.pr is not None else ""
        how = "" if drop.from_evidence else " (no history match: the head that made it so)"
        lines.append(
            f"    droppable from {drop.date[:16]} {drop.head[:12]}, taken by {drop.commit[:12]} "
            f"{drop.subject[:SUBJECT_WIDTH]}{pr}{how}"
        )
    return lines


@dataclass(frozen=True)
class Bar:
    month: str
    count: int
    x: float
    y: float
    width: float
    height: float

    @property
    def middle(self) -> float:
        return round(self.x + self.width / 2, 1)


CHART_W, CHART_H, CHART_PAD = 640.0, 180.0, 24.0
BAR_MAX_W = 48.0  # a short replay's few months do not fill the chart with one slab


def chart_bars(per_month: dict[str, int]) -> list[Bar]:
    """The SVG bars of the human actions per month, in the chart's coordinates."""
    if not per_month:
        return []
    top = max(max(per_month.values()), 1)
    slot = min((CHART_W - 2 * CHART_PAD) / len(per_month), BAR_MAX_W + 4)
    bars = []
    for i, (month, count) in enumerate(per_month.items()):
        height = round((CHART_H - 2 * CHART_PAD) * count / top, 1)
        x = round(CHART_PAD + i * slot + 1, 1)
        y = round(CHART_H - CHART_PAD - height, 1)
        bars.append(Bar(month, count, x, y, round(max(slot - 2, 1), 1), height))
    return bars


def _moved(records: list[core.HeadRecord]) -> dict[int, tuple[core.PatchAt, ...]]:
    before = core.previous_heads(records)
    return {r.index: core.moved_patches(before[r.index], r) for r in records}


def render_html(result: Result) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    summary = result.summary
    bars = chart_bars(summary.human_actions_per_month)
    return env.get_template("replay.html").render(
        spec=result.spec,
        sampling=sampling_words(result.spec),
        summary=summary,
        patches=core.patch_summaries(result.records),
        shown=core.changed_heads(result.records),
        moved=_moved(result.records),
        records=result.records,
        bars=bars,
        label_every=max(1, len(bars) // 12),  # at most about 12 month labels
        chart={"w": CHART_W, "h": CHART_H, "pad": CHART_PAD},
    )
