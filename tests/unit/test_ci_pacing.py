"""bot.core.ci_pacing: when a series' next head run may start (ci.min_interval_s,
ci.daily_budget)."""

from __future__ import annotations

import pytest

from bot.core.ci_pacing import DAY_S, Pace, PacePolicy, next_start, wait_words

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
HOUR = 3600.0


def test_no_policy_never_waits() -> None:
    assert next_start(Pace(PacePolicy(), NOW, (NOW - 1, NOW - 2))) is None


def test_the_first_run_is_never_held() -> None:
    assert next_start(Pace(PacePolicy(min_interval_s=HOUR, daily_budget=1), NOW, ())) is None


def test_min_interval_counts_from_the_last_start() -> None:
    pace = Pace(PacePolicy(min_interval_s=HOUR), NOW, (NOW - 5 * HOUR, NOW - 600))
    wait = next_start(pace)
    assert wait is not None and wait.until == NOW - 600 + HOUR
    assert "ci.min_interval_s is 3600: the last run started 600 s ago" in wait.reason
    assert next_start(Pace(PacePolicy(min_interval_s=HOUR), NOW, (NOW - HOUR,))) is None


@pytest.mark.parametrize(
    ("started", "until"),
    [
        ((NOW - 3 * HOUR, NOW - 2 * HOUR, NOW - HOUR), NOW - 3 * HOUR + DAY_S),
        # four in the window, budget 3: the second-oldest frees the next place
        ((NOW - 4 * HOUR, NOW - 3 * HOUR, NOW - 2 * HOUR, NOW - HOUR), NOW - 3 * HOUR + DAY_S),
    ],
)
def test_daily_budget_waits_for_a_place_to_free(started: tuple[float, ...], until: float) -> None:
    wait = next_start(Pace(PacePolicy(daily_budget=3), NOW, started))
    assert wait is not None and wait.until == until
    assert f"ci.daily_budget is 3: {len(started)} runs started in the last 24 h" in wait.reason


def test_starts_older_than_a_day_do_not_count() -> None:
    started = (NOW - DAY_S - 1, NOW - DAY_S - 2)
    assert next_start(Pace(PacePolicy(daily_budget=2), NOW, started)) is None


def test_both_limits_the_later_time_wins() -> None:
    pace = Pace(PacePolicy(min_interval_s=HOUR, daily_budget=2), NOW, (NOW - 2 * HOUR, NOW - 60))
    wait = next_start(pace)
    assert wait is not None and wait.until == NOW - 2 * HOUR + DAY_S
    assert "daily_budget" in wait.reason


def test_the_words_name_the_time_in_utc_and_that_a_newer_head_replaces_it() -> None:
    wait = next_start(Pace(PacePolicy(min_interval_s=HOUR), NOW, (NOW - 600,)))
    assert wait is not None
    words = wait_words(wait)
    assert words.startswith("paced: starts at 2027-01-15 08:50:00 UTC unless a newer head")
