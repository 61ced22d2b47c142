"""Table tests of the policy on top of the engine: overrides, the series outcome, budgets."""

from __future__ import annotations

import pytest

from bot.core.classify import Decision, Status
from bot.core.policy import Overrides, final_decision, outcome, over_budget, series_digest
from bot.core.state import Outcome

D, S = Decision, Status
PIN = Overrides(pinned=True)
DROP_ASKED = Overrides(drop_requested_by="bob")
NO_AUTO_DROP = Overrides(auto_drop=False)
PLAIN = Overrides()


@pytest.mark.parametrize(
    ("status", "engine", "overrides", "decided", "reason_has"),
    [
        # the engine's word stands without overrides
        (S.CONTAINED, D.DROP, PLAIN, D.DROP, "engine reason"),
        (S.APPLIES, D.KEEP, PLAIN, D.KEEP, "engine reason"),
        (S.CONFLICT, D.REVIEW, PLAIN, D.REVIEW, "engine reason"),
        # a pin turns only a drop into a keep, and says what the engine wanted
        (S.CONTAINED, D.DROP, PIN, D.KEEP, "pinned with /carry keep; the engine would drop"),
        (S.CONFLICT, D.REVIEW, PIN, D.REVIEW, "engine reason"),
        (S.APPLIES, D.KEEP, PIN, D.KEEP, "engine reason"),
        # auto-drop off: a drop needs a human
        (S.CONTAINED, D.DROP, NO_AUTO_DROP, D.REVIEW, "auto-drop is off"),
        (S.APPLIES, D.KEEP, NO_AUTO_DROP, D.KEEP, "engine reason"),
        # a maintainer's drop request wins over the engine and over a pin
        (S.APPLIES, D.KEEP, DROP_ASKED, D.DROP, "at the request of @bob (engine: keep"),
        (S.CONFLICT, D.REVIEW, DROP_ASKED, D.DROP, "at the request of @bob"),
        (
            S.APPLIES,
            D.KEEP,
            Overrides(pinned=True, drop_requested_by="bob"),
            D.DROP,
            "at the request of @bob",
        ),
        # except for a patch file carry cannot read: it stays in front of a human
        (S.INVALID, D.REVIEW, DROP_ASKED, D.REVIEW, "engine reason"),
    ],
)
def test_final_decision(status, engine, overrides, decided, reason_has):
    decision, reason = final_decision(status, engine, "engine reason", overrides)
    assert decision is decided
    assert reason_has in reason


@pytest.mark.parametrize(
    ("statuses", "decisions", "changed", "expected"),
    [
        ([], [], False, Outcome.CLEAN),
        ([S.APPLIES, S.APPLIES], [D.KEEP, D.KEEP], False, Outcome.CLEAN),
        ([S.APPLIES_MOVED], [D.KEEP], True, Outcome.CHANGED),
        ([S.CONTAINED, S.APPLIES], [D.DROP, D.KEEP], False, Outcome.CHANGED),
        ([S.UPSTREAM_VERSION, S.CONTAINED], [D.REVIEW, D.DROP], True, Outcome.REVIEW),
        ([S.CONFLICT, S.APPLIES], [D.REVIEW, D.KEEP], False, Outcome.CONFLICT),
        ([S.INVALID], [D.REVIEW], False, Outcome.CONFLICT),
        ([S.APPLIES, S.PARTIAL], [D.KEEP, D.REVIEW], False, Outcome.REVIEW),
    ],
)
def test_outcome(statuses, decisions, changed, expected):
    assert outcome(statuses, decisions, changed) is expected


@pytest.mark.parametrize(
    ("sizes", "problems"),
    [
        ([("a.patch", 10), ("b.patch", 100)], []),
        ([("big.patch", 101)], ["big.patch is 101 bytes, over the limit of 100"]),
        (
            [("a", 1), ("b", 1), ("c", 1), ("d", 1)],
            ["the series has 4 patches, over the limit of 3"],
        ),
    ],
)
def test_over_budget_names_each_limit(sizes, problems):
    found = over_budget(sizes, max_patch_bytes=100, max_patches=3)
    assert len(found) == len(problems)
    for line, expected in zip(found, problems, strict=True):
        assert line.startswith(expected)


def test_series_digest_changes_with_names_bytes_and_order():
    one = series_digest([("a.patch", b"x"), ("b.patch", b"y")])
    assert one == series_digest([("a.patch", b"x"), ("b.patch", b"y")])
    assert (
        len(
            {
                one,
                series_digest([("b.patch", b"y"), ("a.patch", b"x")]),
                series_digest([("a.patch", b"x"), ("b.patch", b"z")]),
                series_digest([("c.patch", b"x"), ("b.patch", b"y")]),
            }
        )
        == 4
    )
