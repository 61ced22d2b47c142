"""The publisher's decision, which read-only mode records to say what carry would do."""

from __future__ import annotations

import pytest

from bot.core.publishing import PublishStep, Step, publish_step

PATCH, PAGE = "0001-fix.patch", "fix.md"


@pytest.mark.parametrize(
    ("files", "open_pr", "branch", "outcome", "step", "words", "reason"),
    [
        ({PATCH: b"new", "series": b"s"}, None, False, "changed", Step.OPEN, "open a PR",
         "0001-fix.patch, series would change in the series directory"),
        ({PATCH: None}, None, True, "changed", Step.OPEN, "open a PR",
         "0001-fix.patch would be removed in the series directory"),
        ({PATCH: b"new"}, None, False, "review", Step.OPEN, "open a draft PR",
         "0001-fix.patch would change in the series directory; it needs a human first (review)"),
        ({}, None, True, "conflict", Step.OPEN, "open a draft PR",
         "the series needs a human (conflict) and carry's branch exists: a PR from it reports it"),
        ({PATCH: b"new"}, 12, True, "changed", Step.UPDATE, "update PR #12",
         "0001-fix.patch would change in the series directory"),
        ({}, 12, True, "conflict", Step.UPDATE, "update PR #12",
         "no file would change: its report is refreshed"),
        ({}, None, False, "clean", Step.NOTHING, "propose nothing",
         "the downstream branch already has every file as this check leaves it"),
        ({}, None, True, "clean", Step.NOTHING, "propose nothing",
         "the downstream branch already has every file as this check leaves it"),
        ({}, None, False, "conflict", Step.REPORT, "report without a PR",
         "the series needs a human (conflict), but no file would change, so there is no PR to "
         "open: the dashboard and the timeline report it"),
    ],
)  # fmt: skip
def test_the_step_and_its_reason(
    files: dict[str, bytes | None],
    open_pr: int | None,
    branch: bool,
    outcome: str,
    step: Step,
    words: str,
    reason: str,
) -> None:
    found = publish_step(files=files, open_pr=open_pr, branch_exists=branch, outcome=outcome)

    assert (found.step, found.words, found.reason) == (step, words, reason)
    assert found.pr == open_pr if step is Step.UPDATE else found.pr is None


def test_many_files_are_counted_not_all_named() -> None:
    files: dict[str, bytes | None] = {f"000{n}-p.patch": b"x" for n in range(1, 7)}
    found = publish_step(files=files, open_pr=None, branch_exists=False, outcome="changed")

    assert found.reason == (
        "0001-p.patch, 0002-p.patch, 0003-p.patch, 0004-p.patch and 2 more would change in the "
        "series directory"
    )


def test_a_recorded_step_reads_back_and_an_old_entry_has_none() -> None:
    for step in (
        PublishStep(Step.UPDATE, "why", pr=3),
        PublishStep(Step.OPEN, "why", draft=True),
        PublishStep(Step.REPORT, "why"),
    ):
        assert PublishStep.from_fields({"title": "T", **step.fields()}) == step
    assert PublishStep.from_fields({"title": "T", "read_only": True}) is None
    assert PublishStep.from_fields({"step": "merge"}) is None
