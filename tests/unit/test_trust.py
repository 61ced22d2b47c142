"""Trust covers the range of pushes, not the last pusher (issue 33): a head runs on the
hardware unapproved only if every push since a trusted or approved head was a trusted
author's, or it is approved by exact SHA (or is in an approved head, as git says)."""

from __future__ import annotations

import itertools

import pytest

from bot.core.trust import MAX_PUSHES, ZERO_SHA, Basis, Push, decide, record

BASE, STRANGER, FIXUP, NEXT, OTHER = ("1" * 40, "2" * 40, "3" * 40, "4" * 40, "5" * 40)


def by(who: str, before: str, after: str, *, forced: bool = False) -> Push:
    return Push(before, after, who, trusted=who == "maintainer", forced=forced)


CREATED = by("maintainer", ZERO_SHA, BASE)  # the maintainer created the ref at BASE


def test_a_trusted_push_onto_a_covered_head_runs() -> None:
    pushes = [CREATED, by("maintainer", BASE, NEXT)]
    assert decide(BASE, pushes, []).may_run
    trust = decide(NEXT, pushes, [])
    assert trust.may_run and trust.basis is Basis.TRUSTED_RANGE
    assert "@maintainer" in trust.reason


def test_a_strangers_push_waits() -> None:
    trust = decide(STRANGER, [CREATED, by("stranger", BASE, STRANGER)], [])
    assert not trust.may_run and trust.basis is Basis.UNTRUSTED_PUSH
    assert trust.reason == (
        f"head {STRANGER[:12]} was pushed by @stranger, who is not a trusted author"
    )


def test_a_maintainers_fixup_on_a_strangers_head_still_waits() -> None:
    """GitHub's "Update branch" or a maintainer's fixup made the maintainer the last pusher;
    the stranger's commits are still in the head."""
    pushes = [CREATED, by("stranger", BASE, STRANGER), by("maintainer", STRANGER, FIXUP)]
    trust = decide(FIXUP, pushes, [])
    assert not trust.may_run and trust.basis is Basis.UNTRUSTED_PUSH
    assert trust.blamed == pushes[1]
    assert f"contains {STRANGER[:12]}, pushed by @stranger" in trust.reason
    # and so does everything pushed on top of it by trusted hands, until someone approves
    assert not decide(NEXT, [*pushes, by("maintainer", FIXUP, NEXT)], []).may_run


def test_approving_a_head_covers_it_and_what_trusted_users_push_on_top() -> None:
    pushes = [CREATED, by("stranger", BASE, STRANGER), by("maintainer", STRANGER, FIXUP)]
    approved = decide(STRANGER, pushes, [STRANGER.upper()])
    assert approved.may_run and approved.basis is Basis.APPROVED
    assert decide(FIXUP, pushes, [STRANGER]).may_run  # the fixup on an approved head
    assert decide(FIXUP, pushes, [FIXUP]).may_run  # or the fixup itself, by exact SHA
    assert not decide(NEXT, [*pushes, by("stranger", FIXUP, NEXT)], [FIXUP]).may_run


def test_an_approved_sha_covers_its_ancestors() -> None:
    """git says STRANGER is in FIXUP, which was approved: the adapter passes that answer."""
    pushes = [CREATED, by("stranger", BASE, STRANGER), by("maintainer", STRANGER, FIXUP)]
    trust = decide(STRANGER, pushes, [FIXUP], approved_descendant=True)
    assert trust.may_run and trust.basis is Basis.APPROVED_DESCENDANT
    assert not decide(STRANGER, pushes, [FIXUP]).may_run  # without git's answer: no


def test_a_trusted_force_push_onto_a_covered_head_stays_trusted() -> None:
    pushes = [CREATED, by("maintainer", BASE, NEXT, forced=True)]
    assert decide(NEXT, pushes, []).may_run
    # a force push by a stranger is a stranger's push
    assert not decide(OTHER, [*pushes, by("stranger", NEXT, OTHER, forced=True)], []).may_run


def test_a_force_push_away_from_a_strangers_head_still_waits() -> None:
    """The trusted force push replaced an uncovered head: carry cannot tell what it kept of
    it, so it waits (fail closed)."""
    pushes = [
        CREATED,
        by("stranger", BASE, STRANGER),
        by("maintainer", STRANGER, NEXT, forced=True),
    ]
    assert not decide(NEXT, pushes, []).may_run


def test_a_head_nobody_is_known_to_have_pushed_waits() -> None:
    trust = decide(NEXT, [CREATED], [])
    assert not trust.may_run and trust.basis is Basis.UNKNOWN_PUSHER
    # a trusted push onto a head never recorded (the head carry found at install) waits too
    assert not decide(NEXT, [by("maintainer", OTHER, NEXT)], []).may_run


def test_any_covered_route_to_a_sha_covers_it() -> None:
    """A SHA is its content: once a trusted range reached it, a stranger's force push back
    to it adds nothing new."""
    pushes = [
        CREATED,
        by("maintainer", BASE, NEXT),
        by("stranger", NEXT, OTHER, forced=True),
        by("stranger", OTHER, NEXT, forced=True),
    ]
    assert decide(NEXT, pushes, []).may_run
    assert not decide(OTHER, pushes, []).may_run


def test_force_pushes_back_and_forth_cover_nothing_by_themselves() -> None:
    pushes = [by("maintainer", NEXT, OTHER), by("maintainer", OTHER, NEXT)]
    assert not decide(NEXT, pushes, []).may_run
    assert not decide(OTHER, pushes, []).may_run


def test_a_long_trusted_range_is_decided_without_recursion() -> None:
    shas = [f"{n:040x}" for n in range(1, 5001)]
    pushes = [CREATED, by("maintainer", BASE, shas[0])]
    pushes += [by("maintainer", a, b) for a, b in itertools.pairwise(shas)]
    assert decide(shas[-1], pushes, []).may_run


@pytest.mark.parametrize("who", ["maintainer", "stranger"])
def test_record_keeps_the_newest_pushes_once(who: str) -> None:
    pushes: list[Push] = []
    for n in range(MAX_PUSHES + 10):
        added = record(pushes, by(who, f"{n:040x}", f"{n + 1:040x}"))
        assert added is not None
        pushes = added
    assert len(pushes) == MAX_PUSHES and pushes[0].before == f"{10:040x}"
    assert record(pushes, pushes[-1]) is None  # a redelivered webhook adds nothing


def test_a_push_reads_back_from_its_stored_form() -> None:
    push = by("maintainer", BASE, NEXT, forced=True)
    assert Push.from_dict(push.to_dict()) == push
    assert Push.from_dict({"before": BASE, "after": NEXT, "pusher": "x", "trusted": "yes"}) == (
        Push(BASE, NEXT, "x", trusted=False)  # only a real True is trust
    )
