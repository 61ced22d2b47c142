"""The pure transitions of a series state: each writer changes only what it owns."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.core import transitions as tr
from bot.core.state import CiState, PatchState, Phase, SeriesState

HEAD, DIGEST, AT = "a" * 40, "d" * 20, "2026-12-01T00:00:00Z"
FOUND_KEEP = tr.CheckedPatch("0001-a.patch", "applies", "keep", "applies as is")
FOUND_DROP = tr.CheckedPatch("0002-b.patch", "contained", "drop", "the head has every change")


def result(*patches: tr.CheckedPatch, auto_drop: bool = True) -> tr.CheckResult:
    return tr.CheckResult(HEAD, DIGEST, AT, patches, auto_drop)


def running(**fields: object) -> SeriesState:
    patches = [PatchState("0001-a.patch"), PatchState("0002-b.patch")]
    return replace(SeriesState(id="s", phase=Phase.RUNNING, patches=patches), **fields)  # type: ignore[arg-type]


def pin(state: SeriesState, name: str = "0002-b.patch", **fields: object) -> SeriesState:
    patch = state.patch(name)
    assert patch is not None
    for key, value in fields.items():
        setattr(patch, key, value)
    return state


# (what happened meanwhile, engine findings, auto_drop) -> (decision of 0002, its reason starts,
# outcome)
DECISIONS = [
    ("nothing", running(), True, ("drop", "the head has", "changed")),
    ("pinned", pin(running(), pinned=True), True, ("keep", "pinned with /carry keep", "clean")),
    (
        "drop requested",
        pin(running(), drop_requested_by="bob"),
        True,
        ("drop", "dropped at", "changed"),
    ),
    ("auto-drop off", running(), False, ("review", "auto-drop is off", "review")),
]


@pytest.mark.parametrize(
    ("meanwhile", "state", "auto_drop", "expected"), DECISIONS, ids=[d[0] for d in DECISIONS]
)
def test_the_check_decides_with_the_overrides_stored_now(
    meanwhile: str, state: SeriesState, auto_drop: bool, expected: tuple[str, str, str]
) -> None:
    assert tr.apply_check(state, result(FOUND_KEEP, FOUND_DROP, auto_drop=auto_drop))
    patch = state.patch("0002-b.patch")
    assert patch is not None
    assert (patch.decision, patch.reason[: len(expected[1])], state.outcome) == expected
    assert state.patch("0001-a.patch").decision == "keep"  # type: ignore[union-attr]


PHASES = [
    ("running", running(), Phase.IDLE),
    ("paused meanwhile", running(paused_by="alice", phase=Phase.PAUSED), Phase.PAUSED),
    ("paused at the start", running(paused_by="alice"), Phase.PAUSED),
    ("resumed meanwhile", running(paused_by=None, phase=Phase.IDLE), Phase.IDLE),
]


@pytest.mark.parametrize(("case", "state", "phase"), PHASES, ids=[p[0] for p in PHASES])
def test_a_check_never_unpauses_a_series(case: str, state: SeriesState, phase: Phase) -> None:
    tr.apply_check(state, result(FOUND_KEEP))
    assert state.phase == phase


def test_a_check_keeps_what_other_writers_own() -> None:
    row = CiState(runner="gaudi/fixed", state="running", run_id="r1")
    state = running(paused_by="alice", approvals=[HEAD], ci={row.runner: row}, version="v3")
    pin(state, pinned=True, upstream_prs=[{"ref": "up#7", "state": "open"}])
    tr.apply_check(state, result(FOUND_KEEP, FOUND_DROP))
    patch = state.patch("0002-b.patch")
    assert patch is not None
    assert (patch.pinned, patch.upstream_prs) == (True, [{"ref": "up#7", "state": "open"}])
    assert (state.paused_by, state.approvals, state.ci, state.version) == (
        "alice",
        [HEAD],
        {row.runner: row},
        "v3",
    )
    assert (state.checked_head, state.checked_digest, state.checked_at) == (HEAD, DIGEST, AT)


def test_the_check_owns_the_list_of_patches() -> None:
    state = running()
    tr.apply_check(state, result(tr.CheckedPatch("0003-c.patch", "applies", "keep", "")))
    assert [p.name for p in state.patches] == ["0003-c.patch"]
    assert not state.patches[0].pinned


RESUME = [
    ("pause an idle series", Phase.IDLE, "alice", Phase.PAUSED),
    ("pause a running series", Phase.RUNNING, "alice", Phase.PAUSED),
    ("resume a paused series", Phase.PAUSED, None, Phase.IDLE),
    ("resume while a rebase runs", Phase.RUNNING, None, Phase.RUNNING),
    ("resume a failed series", Phase.ERROR, None, Phase.ERROR),
]


@pytest.mark.parametrize(("case", "before", "by", "after"), RESUME, ids=[r[0] for r in RESUME])
def test_pause_and_resume(case: str, before: Phase, by: str | None, after: Phase) -> None:
    state = SeriesState(id="s", phase=before)
    assert tr.set_paused(state, by)
    assert (state.paused_by, state.phase) == (by, after)


QUEUE = [(Phase.IDLE, True), (Phase.ERROR, True), (Phase.RUNNING, False), (Phase.PAUSED, False)]


@pytest.mark.parametrize(("phase", "queued"), QUEUE)
def test_only_an_idle_or_failed_series_shows_queued(phase: Phase, queued: bool) -> None:
    state = SeriesState(id="s", phase=phase)
    assert tr.queue_check(state) is queued
    assert state.phase == (Phase.QUEUED if queued else phase)


def test_keep_and_drop_replace_each_other_and_name_an_existing_patch() -> None:
    state = running()
    assert tr.set_pin(state, "0002-b.patch", keep=False, by="bob")
    assert tr.set_pin(state, "0002-b.patch", keep=True, by="alice")
    patch = state.patch("0002-b.patch")
    assert patch is not None and (patch.pinned, patch.drop_requested_by) == (True, None)
    assert not tr.set_pin(state, "0009-typo.patch", keep=True, by="alice")


def test_waiting_for_import_keeps_the_pins_of_its_patches() -> None:
    state = pin(running(), pinned=True)
    assert tr.awaiting_import(state, ["0002-b.patch", "0004-new.patch"], "waiting for import")
    assert [(p.name, p.status, p.pinned) for p in state.patches] == [
        ("0002-b.patch", "awaiting-import", True),
        ("0004-new.patch", "awaiting-import", False),
    ]
    assert (state.phase, state.last_event) == (Phase.AWAITING_IMPORT, "waiting for import")


FAILURES = [(False, Phase.QUEUED, "none"), (True, Phase.ERROR, "error")]


@pytest.mark.parametrize(("final", "phase", "outcome"), FAILURES)
def test_a_failed_step_is_queued_again_until_its_last_retry(
    final: bool, phase: Phase, outcome: str
) -> None:
    state = SeriesState(id="s", paused_by="alice")
    tr.step_failed(state, "publish failed", final=final)
    assert (state.phase, state.outcome, state.error) == (phase, outcome, "publish failed")
    assert state.paused_by == "alice"


def test_a_pusher_belongs_to_its_sha_whichever_event_came_first() -> None:
    head, other = "a" * 40, "b" * 40
    polled = SeriesState(id="s", head_sha=other)  # a poll saw `other`; nobody known for it
    assert tr.record_pusher(polled, head, "maintainer")  # the webhook for `head` came first
    assert polled.head_actor is None  # never given to another SHA
    tr.start_check(polled, head, "refs/heads/main", None, "now")  # the poll's check of `head`
    assert polled.head_actor == "maintainer"
    assert not tr.record_pusher(polled, head, "stranger")  # a known pusher is never replaced
    assert polled.pushers == {head: "maintainer"}
    late = SeriesState(id="s", head_sha=head)  # the check started before the webhook came
    assert tr.record_pusher(late, head, "maintainer") and late.head_actor == "maintainer"
    many = SeriesState(id="s")
    for n in range(tr.MAX_PUSHERS + 5):
        tr.record_pusher(many, f"{n:040x}", "maintainer")
    assert len(many.pushers) == tr.MAX_PUSHERS and f"{0:040x}" not in many.pushers


@pytest.mark.parametrize(
    ("phase", "error", "after"),
    [
        (Phase.QUEUED, "publish failed (attempt 1): 502", (Phase.IDLE, None)),  # retry got through
        (
            Phase.RUNNING,
            "publish failed (attempt 1): 502",
            (Phase.RUNNING, "publish failed (attempt 1): 502"),
        ),
        (Phase.QUEUED, None, (Phase.QUEUED, None)),  # a rebase waits: not this publish's to end
    ],
)
def test_a_publish_that_got_through_after_a_retry_ends_the_retry(
    phase: Phase, error: str | None, after: tuple[Phase, str | None]
) -> None:
    """A failed publish showed the series as queued (its retry) and kept that forever: a later
    `/carry rebase` then took it for a check already waiting."""
    state = SeriesState(id="s", phase=phase, error=error)
    tr.published(state, None, None, "PR #1 updated")
    assert (state.phase, state.error) == after


def test_a_queued_rebase_that_found_nothing_to_do_rests() -> None:
    state = SeriesState(id="s", phase=Phase.QUEUED)
    assert tr.unqueue(state) and state.phase == Phase.IDLE
    paused = SeriesState(id="s", phase=Phase.QUEUED, paused_by="alice")
    assert tr.unqueue(paused) and paused.phase == Phase.PAUSED
    assert not tr.unqueue(SeriesState(id="s", phase=Phase.RUNNING))


PINS = [
    # (engine finding of 0002, auto_drop, the override) -> (decision, reason starts, outcome)
    (FOUND_DROP, True, "keep", ("keep", "pinned with /carry keep", "clean")),
    (FOUND_DROP, False, "keep", ("keep", "pinned with /carry keep", "clean")),
    (FOUND_KEEP, True, "drop", ("drop", "dropped at the request of @bob", "changed")),
    (FOUND_DROP, False, "drop", ("drop", "dropped at the request of @bob", "changed")),
]


@pytest.mark.parametrize(("found", "auto_drop", "override", "expected"), PINS)
def test_a_pin_decides_a_checked_patch_at_once_from_the_engines_finding(
    found: tr.CheckedPatch, auto_drop: bool, override: str, expected: tuple[str, str, str]
) -> None:
    """The re-check a pin asks for may be superseded by a head that is not checked yet (a paused
    series): the patch is decided again as the next check would decide it."""
    state = running()
    other = tr.CheckedPatch("0001-a.patch", "applies", "keep", "applies as is")
    tr.apply_check(state, result(other, replace(found, name="0002-b.patch"), auto_drop=auto_drop))
    if override == "keep":
        tr.set_pin(state, "0002-b.patch", keep=False, by="alice")
    assert tr.set_pin(state, "0002-b.patch", keep=override == "keep", by="bob", auto_drop=auto_drop)
    patch = state.patch("0002-b.patch")
    assert patch is not None
    assert (patch.decision, patch.reason[: len(expected[1])], state.outcome) == expected
    # and exactly what the next check of the same findings decides
    decided = (patch.decision, patch.reason)
    tr.apply_check(state, result(other, replace(found, name="0002-b.patch"), auto_drop=auto_drop))
    again = state.patch("0002-b.patch")
    assert again is not None and (again.decision, again.reason) == decided


def test_a_pin_on_a_patch_never_checked_leaves_its_decision_to_the_check() -> None:
    state = running()
    assert tr.set_pin(state, "0002-b.patch", keep=True, by="bob")
    assert state.patch("0002-b.patch").decision == "none"  # type: ignore[union-attr]
