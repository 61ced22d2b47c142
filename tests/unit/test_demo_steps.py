"""The demo's CI step decides from the series state alone: done, still running (a head a poll
saw before its push webhook waits for its pusher), or stopped with the row's own reason; a
timeout names the rows still held for `/carry approve` (it used to say only "waiting for CI")."""

from __future__ import annotations

import pytest

from bot.core.state import CiState, SeriesState
from bot.demo import CHECKS, KINDS, DemoError, ci_finished, ci_held

HEAD = "01a267bbcfb6" + "0" * 28


def state_with(**states: str) -> SeriesState:
    state = SeriesState(id="calc-fixes")
    for kind in KINDS:
        for check in CHECKS:
            row_state = states.get(kind, "success")
            detail = "head 01a267bbcfb6 was pushed by an author outside trusted_authors"
            state.ci[f"{kind}/{check}"] = CiState(
                runner=kind,
                state=row_state,
                head_sha=HEAD,
                detail=detail if row_state != "success" else "",
            )
    return state


def test_ci_is_done_when_every_row_of_the_head_passed() -> None:
    state = state_with()
    assert ci_finished(state, HEAD) is state
    assert ci_finished(state, "f" * 40) is None  # rows of another head: still waiting


@pytest.mark.parametrize("pending", ["running", "queued", "waiting-approval"])
def test_ci_still_running_or_held_is_not_an_error(pending: str) -> None:
    assert ci_finished(state_with(gaudi=pending), HEAD) is None


def test_a_timeout_names_the_rows_still_held_for_approval() -> None:
    held = ci_held(state_with(gb10="waiting-approval"), HEAD)
    assert held.startswith("; still held: gb10: waiting-approval head 01a267bbcfb6 was pushed")
    assert ci_held(state_with(gb10="running"), HEAD) == ""
    assert ci_held(None, HEAD) == ""


@pytest.mark.parametrize("stuck", ["failure", "infra-error", "cancelled"])
def test_a_row_that_cannot_pass_stops_the_demo_with_its_reason(stuck: str) -> None:
    with pytest.raises(DemoError, match=f"gb10: {stuck} head 01a267bbcfb6 was pushed by an author"):
        ci_finished(state_with(gb10=stuck), HEAD)
