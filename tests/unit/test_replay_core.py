"""bot.core.replay: heads sampled, what carry would do at a head, and the walk's sums."""

from __future__ import annotations

import json
from datetime import date

import pytest

from bot.core import replay as core
from bot.core import transitions as tr
from bot.core.classify import Decision, Status
from bot.core.publishing import Step
from bot.core.replay import Commit, Downstream, HeadRecord, PatchAt, ReplayAction
from bot.core.state import SeriesState

A, B = "0001-a.patch", "0002-b.patch"


def commits(*dates: str) -> list[Commit]:
    return [Commit(f"{i:040x}", d, f"subject {i}") for i, d in enumerate(dates)]


# ----------------------------------------------------------------------------- sampling


def test_sample_every_commit_every_nth_and_always_the_last() -> None:
    walk = commits(*(f"2026-01-01T00:0{i}:00Z" for i in range(8)))
    assert core.sample(walk) == walk
    assert [c.sha for c in core.sample(walk, every=3)] == [walk[i].sha for i in (0, 3, 6, 7)]
    assert core.sample(walk, every=7) == [walk[0], walk[7]]
    assert core.sample(walk, every=100) == [walk[0], walk[7]]
    assert core.sample([], every=3) == []


def test_sample_daily_takes_each_days_last_commit() -> None:
    walk = commits(
        "2026-01-01T09:00:00Z",
        "2026-01-01T23:59:59Z",
        "2026-01-03T00:00:00Z",
        "2026-01-04T10:00:00Z",
        "2026-01-04T11:00:00Z",
    )
    assert core.sample(walk, daily=True) == [walk[1], walk[2], walk[4]]


@pytest.mark.parametrize(
    ("every", "daily", "said"),
    [(2, True, "not both"), (0, False, "1 or more"), (-1, False, "1 or more")],
)
def test_sample_refuses_bad_options(every: int, daily: bool, said: str) -> None:
    with pytest.raises(core.ReplayInputError, match=said):
        core.sample(commits("2026-01-01T00:00:00Z"), every=every, daily=daily)


def test_iso_utc() -> None:
    assert core.iso_utc(1_767_225_600) == "2026-01-01T00:00:00Z"


# ----------------------------------------------------------------------------- evidence


def test_pr_in_subject() -> None:
    assert core.pr_in_subject("Fix the sum (#123)") == 123
    assert core.pr_in_subject("Revert (#1) then (#22)") == 22
    assert core.pr_in_subject("Fix the sum #123") is None


def test_taken_by_skips_reverted_matches_and_other_signals() -> None:
    evidence = [
        {"signal": "forward-apply", "commit": "f" * 40},
        {"signal": "patch-id-match", "commit": "a" * 40, "subject": "x", "reverted_by": "b" * 40},
        {"signal": "subject-match", "commit": "c" * 40, "subject": "Take it (#9)"},
    ]
    assert core.taken_by(evidence) == ("c" * 40, "Take it (#9)")
    assert core.taken_by(evidence[:2]) is None


def test_needs_human() -> None:
    assert core.needs_human(Status.CONFLICT, Decision.KEEP)
    assert core.needs_human(Status.PARTIAL, Decision.REVIEW)
    assert core.needs_human(Status.CONTAINED, Decision.REVIEW)
    assert not core.needs_human(Status.CONTAINED, Decision.DROP)
    assert not core.needs_human(Status.APPLIES_MOVED, Decision.KEEP)


# ----------------------------------------------------------------------------- one head

SERIES = f"{A}\n{B}\n".encode()
FILES = {"series": SERIES, A: b"patch a\n", B: b"patch b\n"}
HEAD = "1" * 40


def checked(*found: tuple[str, Status, Decision, bool], auto_drop: bool = True) -> SeriesState:
    state = SeriesState(id="s")
    patches = tuple(
        tr.CheckedPatch(name, status, decision, f"{status} reason", changed=changed)
        for name, status, decision, changed in found
    )
    tr.apply_check(state, tr.CheckResult(HEAD, "d", "now", patches, auto_drop))
    return state


def test_a_clean_head_proposes_nothing() -> None:
    state = checked(
        (A, Status.APPLIES, Decision.KEEP, False), (B, Status.APPLIES, Decision.KEEP, False)
    )
    published, after = core.publish_at(state, Downstream(FILES), {}, date(2026, 1, 2))
    assert published.step.step is Step.NOTHING
    assert (published.pr, published.pushed, published.merged) == (None, False, False)
    assert after == Downstream(FILES)


def test_a_refresh_opens_a_pr_that_the_team_merges() -> None:
    state = checked(
        (A, Status.APPLIES_MOVED, Decision.KEEP, True), (B, Status.APPLIES, Decision.KEEP, False)
    )
    published, after = core.publish_at(
        state, Downstream(FILES), {A: b"moved a\n"}, date(2026, 1, 2)
    )
    assert published.step.step is Step.OPEN and not published.step.draft
    assert (published.pr, published.pushed, published.merged) == (1, True, True)
    assert after.files[A] == b"moved a\n"
    assert after.files["VERSION"] == b"20260102.1\n"
    assert after.files["series"].startswith(f"# base: {HEAD}\n".encode())
    assert (after.open_pr, after.proposed, after.next_pr) == (None, None, 2)
    assert state.version == "20260102.1" and state.pr is not None and state.pr.state == "merged"


def test_a_pr_that_needs_a_human_stays_open_until_a_head_needs_none() -> None:
    downstream = Downstream(FILES)
    # A moved, B conflicts: a draft PR proposes A's refresh and waits.
    state = checked(
        (A, Status.APPLIES_MOVED, Decision.KEEP, True), (B, Status.CONFLICT, Decision.KEEP, False)
    )
    first, downstream = core.publish_at(state, downstream, {A: b"moved a\n"}, date(2026, 1, 2))
    assert first.step.step is Step.OPEN and first.step.draft and not first.merged
    assert (downstream.open_pr, downstream.files) == (1, FILES)
    # The same finding on the next head: the PR's report is refreshed, nothing is pushed.
    state = checked(
        (A, Status.APPLIES_MOVED, Decision.KEEP, True), (B, Status.CONFLICT, Decision.KEEP, False)
    )
    second, downstream = core.publish_at(state, downstream, {A: b"moved a\n"}, date(2026, 1, 2))
    assert second.step.step is Step.UPDATE and not second.pushed and not second.merged
    assert core.acts([], second) == (core.Act(ReplayAction.NOTHING, second.step.reason),)
    # B applies again: the PR is updated and merged.
    state = checked(
        (A, Status.APPLIES_MOVED, Decision.KEEP, True), (B, Status.APPLIES, Decision.KEEP, False)
    )
    third, downstream = core.publish_at(state, downstream, {A: b"moved a\n"}, date(2026, 1, 3))
    assert third.step.step is Step.UPDATE and third.pr == 1 and third.merged
    assert downstream.open_pr is None and downstream.files[A] == b"moved a\n"
    assert downstream.next_pr == 2


def test_acts_name_the_pr_the_drops_and_the_waits() -> None:
    state = checked(
        (A, Status.CONTAINED, Decision.DROP, False), (B, Status.CONFLICT, Decision.KEEP, False)
    )
    published, _ = core.publish_at(state, Downstream(FILES), {}, date(2026, 1, 2))
    record = core.head_record(0, commits("2026-01-02T00:00:00Z")[0], state, (), published)
    assert [(a.action, a.patch) for a in record.acts] == [
        (ReplayAction.OPEN_PR, None),
        (ReplayAction.DROP, A),
        (ReplayAction.WAIT_HUMAN, B),
    ]
    assert record.acts[0].pr == 1 and "draft" in record.acts[0].why


def test_auto_drop_off_reviews_and_still_records_the_engines_drop() -> None:
    state = checked((A, Status.CONTAINED, Decision.DROP, False), auto_drop=False)
    found = (tr.CheckedPatch(A, Status.CONTAINED, Decision.DROP, "r"),)
    published, _ = core.publish_at(state, Downstream(FILES), {}, date(2026, 1, 2))
    record = core.head_record(0, commits("2026-01-02T00:00:00Z")[0], state, found, published)
    (patch,) = record.patches
    assert (patch.decision, patch.engine_decision, patch.droppable) == (
        Decision.REVIEW,
        Decision.DROP,
        True,
    )


# ----------------------------------------------------------------------------- the sums


def record(
    index: int,
    day: str,
    patches: list[PatchAt],
    acts: list[ReplayAction] | None = None,
    merged: bool = False,
    subject: str = "",
) -> HeadRecord:
    return HeadRecord(
        index=index,
        sha=f"{index:040x}",
        date=f"{day}T12:00:00Z",
        subject=subject,
        outcome="clean",
        patches=tuple(patches),
        step=Step.NOTHING,
        step_reason="",
        pr=None,
        pushed=False,
        merged=merged,
        acts=tuple(core.Act(a, "why") for a in (acts or [ReplayAction.NOTHING])),
    )


def at(name: str, status: Status, decision: Decision, engine: Decision | None = None) -> PatchAt:
    return PatchAt(name, status, decision, "reason", engine or decision)


KEEP = (Status.APPLIES, Decision.KEEP)
CONFLICT = (Status.CONFLICT, Decision.KEEP)
REVIEW = (Status.UPSTREAM_VERSION, Decision.REVIEW)


def walk() -> list[HeadRecord]:
    return [
        record(0, "2026-01-30", [at(A, *KEEP), at(B, *KEEP)]),
        record(1, "2026-01-31", [at(A, *CONFLICT), at(B, *KEEP)], [ReplayAction.WAIT_HUMAN]),
        record(2, "2026-02-02", [at(A, *REVIEW), at(B, *KEEP)], [ReplayAction.WAIT_HUMAN]),
        record(3, "2026-02-03", [at(A, *KEEP), at(B, *KEEP)]),
        record(
            4,
            "2026-04-01",
            [at(A, *REVIEW), at(B, Status.CONTAINED, Decision.DROP)],
            [ReplayAction.OPEN_PR, ReplayAction.MERGED, ReplayAction.DROP, ReplayAction.WAIT_HUMAN],
            merged=True,
            subject="Take b (#31)",
        ),
        record(5, "2026-04-03", [at(A, *REVIEW)], [ReplayAction.WAIT_HUMAN]),
    ]


def test_patch_summaries_stretches_and_drops() -> None:
    a, b = core.patch_summaries(walk())
    assert [(e.status, e.start_index, e.end_index, e.heads, e.days) for e in a.episodes] == [
        (Status.CONFLICT, 1, 3, 2, 3.0),
        (Status.UPSTREAM_VERSION, 4, None, 2, 2.0),
    ]
    assert a.first_human is a.episodes[0]
    assert (a.human_heads, a.human_days, a.droppable, a.dropped_at) == (4, 5.0, None, None)
    assert b.episodes == ()
    assert b.droppable is not None
    assert (b.droppable.index, b.droppable.commit, b.droppable.pr) == (4, f"{4:040x}", 31)
    assert b.droppable.from_evidence is False
    assert b.dropped_at == 4


def test_summarize_counts_and_months_without_gaps() -> None:
    summary = core.summarize(walk())
    assert summary.heads_walked == 6
    assert (summary.prs_opened, summary.prs_merged, summary.automatic_drops) == (1, 1, 1)
    assert (summary.conflicts, summary.reviews, summary.human_actions) == (1, 2, 2)
    assert summary.human_actions_per_month == {
        "2026-01": 1,
        "2026-02": 0,
        "2026-03": 0,
        "2026-04": 1,
    }
    assert core.summarize([]).heads_walked == 0


def test_changed_heads_leave_out_quiet_ones() -> None:
    still = record(6, "2026-04-04", [at(A, *REVIEW)], [ReplayAction.WAIT_HUMAN])
    shown = core.changed_heads([*walk(), still])
    assert [r.index for r in shown] == [0, 1, 2, 3, 4, 5]  # 5: B is gone; 6: A still waits


def test_a_pending_drop_and_waits_repeated_head_after_head_are_not_news() -> None:
    # real vllm-gaudi history: a port main took (drop) waits in a draft PR beside a review;
    # every later head said the same things again and filled the timeline
    waits = [ReplayAction.WAIT_HUMAN, ReplayAction.DROP]
    same = [at(A, *REVIEW), at(B, Status.CONTAINED, Decision.DROP)]
    acts = [
        [ReplayAction.OPEN_PR, *waits],
        waits,
        waits,
        [ReplayAction.UPDATE_PR, *waits],
        waits,
        waits,
    ]
    heads = [record(i, f"2026-08-0{i + 1}", same, said) for i, said in enumerate(acts)]
    heads.append(record(6, "2026-08-07", same, [ReplayAction.WAIT_HUMAN]))  # the drop went quiet
    assert [r.index for r in core.changed_heads(heads)] == [0, 3]


def test_progress_round_trips_through_json_and_resumes_only_its_own_walk() -> None:
    state = checked((A, Status.APPLIES, Decision.KEEP, False))
    downstream = Downstream(FILES, 3, {**FILES, "VERSION": b"\x00\xff"}, 4)
    records = tuple(walk())
    progress = core.Progress("key", tuple(r.sha for r in records), state, downstream, records)
    again = core.Progress.from_dict(json.loads(json.dumps(progress.as_dict())))
    assert again == progress
    shas = [r.sha for r in records]
    assert again.resumes("key", [*shas, "f" * 40])
    assert not again.resumes("other", shas)
    assert not again.resumes("key", shas[:-1])
    with pytest.raises(ValueError, match="schema"):
        core.Progress.from_dict({**progress.as_dict(), "schema": 99})


def test_moved_patches_are_those_whose_finding_changed() -> None:
    records = walk()
    before = core.previous_heads(records)
    assert before[0] is None and before[3] is records[2]
    assert core.moved_patches(None, records[0]) == records[0].patches
    assert [p.name for p in core.moved_patches(records[0], records[1])] == [A]
    assert [p.name for p in core.moved_patches(records[3], records[4])] == [A, B]
    assert core.moved_patches(records[4], records[5]) == ()


# ----------------------------------------------------------------------------- the planner


def test_a_head_is_planned_as_the_service_plans_it() -> None:
    """The replay's events and facts lead the planner to what the service does: a rebase of
    the head, then a publish that names the series' runners; a head of a paused series is
    recorded only; a head carry's open PR sits on is planned with that PR."""
    from bot.core import actions as act
    from bot.core.planner import plan

    watch = core.Watch("s", "owner/up", "refs/heads/main", runners=("gaudi2",))
    state = SeriesState(id="s", upstream_repo="owner/up", base="replay")
    first = Commit("a" * 40, "2026-01-01T00:00:00Z")
    second = Commit("b" * 40, "2026-01-02T00:00:00Z")
    moved = core.head_moved(watch, state, first)
    assert (moved.before, moved.after, moved.source) == ("0" * 40, first.sha, "poll")
    (rebase,) = plan(moved, core.facts(watch, state))
    assert isinstance(rebase, act.Rebase) and rebase.head_sha == first.sha
    tr.start_check(state, first.sha, watch.ref, None, first.date)
    (publish,) = plan(core.rebase_finished(watch, state, "d1", "t" * 40), core.facts(watch, state))
    assert isinstance(publish, act.Publish) and publish.tree == "t" * 40
    assert "then test the exact tree on gaudi2" in publish.reason
    assert [p.done for p in core.planned([rebase, publish])] == [True, True]

    paused = core.Watch("s", "owner/up", "refs/heads/main", paused=True)
    (held,) = plan(core.head_moved(paused, state, second), core.facts(paused, state))
    assert isinstance(held, act.RecordHead) and held.replaces == (first.sha,)
    assert "series is paused by its policy" in held.reason
    finished = core.rebase_finished(paused, state, "d1", None)
    (note,) = plan(finished, core.facts(paused, state))
    assert isinstance(note, act.Note) and "paused" in note.reason
    assert [(p.kind, p.done) for p in core.planned([note])] == [("note", False)]
