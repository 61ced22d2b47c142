"""every head verified (bench/every_head.py): each head's tree tested on a real runner."""

from __future__ import annotations

from pathlib import Path

from bench.reliability.common import Row, Scale


def scenario_every_head(root: Path, scale: Scale) -> Row:
    """bench/every_head.py: every head's tree tested on a real runner, one message per change."""
    from bench.every_head import run_every_head  # it builds on this module's neighbours

    figures = run_every_head(root, scale.every_head_heads)
    print(figures.table() + "\n", flush=True)
    wrong = [what for what, _, _, ok in figures.rows() if not ok]
    verified = sum(1 for head in figures.heads if head in figures.verdicts)
    return Row(
        "every-head",
        f"{verified} of {len(figures.heads)} heads verified, {figures.prs} PRs, "
        f"{len(figures.messages)} messages",
        "WRONG: " + "; ".join(wrong) if wrong else "0",
        "0",
        "last good at the end is the newest head" if not wrong else "see the table above",
        not wrong,
    )
