"""What carry records after GitHub answered an error that may have come after the effect
(issue 34, items 6 and 8): the version carry's branch carries, and the notices it must say."""

from __future__ import annotations

import copy
import json

import pytest

from bot.core import transitions as tr
from bot.core.render import NOTICE_MARKER, commits_kept_notice, landed_version, notice_comment
from bot.core.state import Notice, NoticeKind, SeriesState
from tests.support.stored_states import stored_by_schema_1

BRANCHES = ("carry/x", "carry-backup/x/aaaaaaaaaaaa", "main")
TIP = "a" * 40


@pytest.mark.parametrize(
    ("recorded", "carried", "landed"),
    [
        # a push that landed and answered 502: the branch is ahead of the state
        ("20261206.1", "20261206.2\n", "20261206.2"),
        (None, b"20261206.1\n", "20261206.1"),
        ("20261205.4", "20261206.1", "20261206.1"),
        # the branch behind or equal: a build number once recorded is never handed out again
        ("20261206.3", "20261206.2", "20261206.3"),
        ("20261206.2", "20261206.2", "20261206.2"),
        ("20261206.10", "20261206.9", "20261206.10"),  # numbers, not text
        # no VERSION on the branch, or one carry did not write: the state stays
        ("20261206.1", None, "20261206.1"),
        ("20261206.1", "v1.2.3\n", "20261206.1"),
        (None, "", None),
    ],
)
def test_landed_version(recorded: str | None, carried: str | bytes | None, landed: str) -> None:
    assert landed_version(recorded, carried) == landed


def test_published_records_the_version_the_branch_carries_never_an_older_one() -> None:
    state = SeriesState(id="x", version="20261206.1")
    tr.published(state, None, "20261206.2", "PR #1 report refreshed (nothing pushed)")
    assert state.version == "20261206.2"
    tr.published(state, None, "20261206.1", "PR #1 report refreshed (nothing pushed)")
    assert state.version == "20261206.2"
    tr.published(state, None, None, "read-only")
    assert state.version == "20261206.2"


def test_version_landed_says_whether_the_state_changed() -> None:
    state = SeriesState(id="x", version="20261206.1")
    assert tr.version_landed(state, "20261206.2") and state.version == "20261206.2"
    assert not tr.version_landed(state, "20261206.2")
    assert not tr.version_landed(state, None) and state.version == "20261206.2"


def kept() -> Notice:
    commits = [(TIP, "alice", "Note the follow-up"), ("b" * 40, "bob", "Fix a typo")]
    return commits_kept_notice(BRANCHES, TIP, "c" * 40, commits, "2026-12-06T01:00:00Z")


def test_the_commits_kept_notice_names_the_backup_and_each_commit() -> None:
    notice = kept()
    assert notice.id == f"commits-kept-{TIP[:12]}" and notice.kind is NoticeKind.COMMITS_KEPT
    assert notice.due and notice.details == {
        "backup": BRANCHES[1],
        "commits": [TIP, "b" * 40],
        "authors": ["alice", "bob"],
    }
    text = notice_comment(notice)
    assert text.startswith(NOTICE_MARKER.format(id=notice.id) + "\n")
    assert "<!-- carry:notice=commits-kept-aaaaaaaaaaaa -->" in text
    assert BRANCHES[1] in text and "Note the follow-up" in text and "`bbbbbbbbbbbb`" in text


def test_a_notice_is_recorded_once_and_said_once() -> None:
    state = SeriesState(id="x")
    assert tr.notice_due(state, kept())
    # a retried publish finds the same commits to keep: recorded already
    assert not tr.notice_due(state, kept())
    assert [n.id for n in state.notices if n.due] == [kept().id]
    assert tr.notice_said(state, kept().id, 7, 1234, "2026-12-06T01:00:05Z")
    (said,) = state.notices
    assert (said.due, said.pr, said.comment_id) == (False, 7, 1234)
    # said already (a retry after the comment landed): nothing changes, no second history entry
    assert not tr.notice_said(state, kept().id, 7, 1234, "2026-12-06T01:00:09Z")
    assert not tr.notice_due(state, kept())
    assert not tr.notice_said(state, "unknown", 7, 1, "2026-12-06T01:00:09Z")


def test_said_notices_are_trimmed_and_due_ones_kept() -> None:
    state = SeriesState(id="x")
    for n in range(tr.MAX_SAID_NOTICES + 5):
        notice = Notice(id=f"n{n}", kind=NoticeKind.COMMITS_KEPT, body="said")
        tr.notice_due(state, notice)
        tr.notice_said(state, notice.id, 1, n, "t")
    tr.notice_due(state, Notice(id="due", kind=NoticeKind.COMMITS_KEPT, body="to say"))
    assert len(state.notices) == tr.MAX_SAID_NOTICES + 1
    assert state.notices[0].id == "n5" and state.notices[-1].due


def test_notices_round_trip_and_an_old_state_loads_without_them() -> None:
    state = SeriesState(id="x")
    tr.notice_due(state, kept())
    loaded = SeriesState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert loaded.notices == state.notices
    assert loaded.notices[0].kind is NoticeKind.COMMITS_KEPT
    old = SeriesState.from_dict(copy.deepcopy(stored_by_schema_1()))
    assert old.notices == []


def test_a_notice_of_an_unknown_kind_is_still_said() -> None:
    data = {"id": "n", "kind": "from-a-newer-carry", "body": "hello", "comment_id": "0"}
    loaded = SeriesState.from_dict({"id": "x", "notices": [data]})
    (notice,) = loaded.notices
    assert notice.kind is NoticeKind.OTHER and notice.due and notice.body == "hello"
