"""The demo's CI step decides from the series state alone: done, still running, or stopped with
the row's own reason (a head held for `/carry approve` used to look like a 60 s timeout)."""

from __future__ import annotations

import pytest

from bot.core.state import CiState, SeriesState
from bot.demo import CHECKS, KINDS, DemoError, ci_finished

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


def test_ci_still_running_is_not_an_error() -> None:
    assert ci_finished(state_with(gaudi="running"), HEAD) is None


@pytest.mark.parametrize("stuck", ["waiting-approval", "failure", "infra-error"])
def test_a_row_that_cannot_pass_stops_the_demo_with_its_reason(stuck: str) -> None:
    with pytest.raises(DemoError, match=f"gb10: {stuck} head 01a267bbcfb6 was pushed by an author"):
        ci_finished(state_with(gb10=stuck), HEAD)
