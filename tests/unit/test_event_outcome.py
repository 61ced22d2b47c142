"""What a history entry amounts to, for the events page's outcome filter (table test, pure):
the entries the workers write, with the fields they write them with."""

from __future__ import annotations

from typing import Any

import pytest

from bot.web.timeline import OUTCOME_WORDS, OUTCOMES, Outcome, outcome_of

HEAD = "3f2a1c9d8e7f" + "0" * 28

TABLE: list[tuple[str, dict[str, Any], Outcome]] = [
    # workers/rebase.py: the check and one decision per patch
    ("rebased", {"head": HEAD, "outcome": "conflict", "summary": "1 conflict"}, "problem"),
    ("rebased", {"head": HEAD, "outcome": "review"}, "problem"),
    ("rebased", {"head": HEAD, "outcome": "changed", "summary": "1 drop"}, "changed"),
    ("rebased", {"head": HEAD, "outcome": "clean"}, "routine"),
    ("decision", {"patch": "p", "status": "conflict", "decision": "review"}, "problem"),
    ("decision", {"patch": "p", "status": "partial", "decision": "review"}, "problem"),
    ("decision", {"patch": "p", "status": "invalid", "decision": "keep"}, "problem"),
    ("decision", {"patch": "p", "status": "contained", "decision": "drop"}, "changed"),
    ("decision", {"patch": "p", "status": "applies", "decision": "keep"}, "routine"),
    ("series-invalid", {"problems": ["series: 0002-x.patch is missing"]}, "problem"),
    ("superseded", {"head": HEAD, "newest": "9" * 40}, "nothing"),
    ("unchanged", {"head": HEAD, "reason": "this head and series content were checked"}, "nothing"),
    ("awaiting-import", {"reason": "series awaits carry import"}, "routine"),
    # workers/tasks.py: failed steps, timed-out rebases, duplicates
    ("rebase-failed", {"error": "git: bad object", "attempt": 2, "final": False}, "problem"),
    ("publish-failed", {"error": "403", "attempt": 6, "final": True}, "problem"),
    ("rebase-timed-out", {"error": "timed out after 900 s", "limit_s": 900}, "problem"),
    ("command-not-checked", {"author": "bob", "pr": 3, "error": "HTTP 502"}, "problem"),
    ("lease-lost", {"head": "a" * 40, "reason": "no longer holds its lock"}, "problem"),
    ("duplicate-event", {"key": "push:o/r:main:abc"}, "nothing"),
    # workers/dispatch.py: the planner's actions, and actions already done
    ("note", {"reason": "ignored: ping", "key": "note:1"}, "nothing"),
    ("record_ci", {"reason": "gaudi check success", "key": "ci-result:1"}, "nothing"),
    ("skipped", {"action": "rebase", "reason": "already done"}, "nothing"),
    ("rebase", {"reason": "refs/heads/main moved", "head_sha": HEAD}, "routine"),
    ("record_head", {"reason": "series is paused by alice", "head_sha": HEAD}, "routine"),
    ("check_permission", {"reason": "comment by bob", "number": 3}, "routine"),
    ("publish", {"reason": "rebased", "head_sha": HEAD, "changed": True}, "routine"),
    ("set_paused", {"paused": True, "by": "alice"}, "changed"),
    ("pin_patch", {"patch": "p", "by": "alice"}, "changed"),
    ("request_drop", {"patch": "p", "by": "alice"}, "changed"),
    ("retarget", {"base": {"branch": "main"}, "by": None}, "changed"),
    ("reply", {"number": 3, "reason": "/carry help by @bob"}, "changed"),
    # workers/publish.py and workers/publish_github.py
    ("proposal", {"read_only": True, "changed": True, "title": "t", "body": "b"}, "changed"),
    ("proposal", {"read_only": True, "changed": False, "title": "t", "body": "b"}, "nothing"),
    ("published", {"pr": 12, "pushed": True, "head": HEAD}, "changed"),
    ("published", {"pr": 12, "pushed": False, "head": HEAD}, "nothing"),
    ("published", {"result": "nothing to propose", "head": HEAD}, "nothing"),
    ("publish-skipped", {"reason": "a newer rebase replaced this result"}, "nothing"),
    ("draft-refused", {"reason": "drafts not supported", "label": "carry"}, "problem"),
    ("publish-refused", {"code": "GH013", "branch": "carry/s", "setting": "s"}, "problem"),
    ("label-removed", {"pr": 12, "label": "carry:conflict", "now": "clean"}, "changed"),
    ("branch-commits-kept", {"pr": 12, "backup": "carry/x-kept", "commits": ["a"]}, "changed"),
    ("push-read-back", {"branch": "carry/x", "landed": True, "version": "20261206.2"}, "changed"),
    ("notice-said", {"pr": 12, "notice": "n1", "comment_id": 5}, "changed"),
    # workers/poller.py and workers/successor.py
    ("poll-failed", {"upstream": "engine", "error": "does not exist"}, "problem"),
    ("waiting-for-ref", {"ref": "refs/tags/v1.2"}, "routine"),
    ("ref-appeared", {"ref": "refs/tags/v1.2"}, "routine"),
    ("successor-proposed", {"closed": "o/r#5", "summary": "o/r#9 carries it on"}, "problem"),
    # workers/ci/requests.py and workers/ci/github.py
    ("ci-enqueue", {"runner_kind": "gaudi", "run_ids": ["r1"], "reason": "new tree"}, "routine"),
    ("ci-wait-approval", {"runner_kind": "gaudi", "run_ids": ["r1"]}, "routine"),
    ("ci-started", {"run_id": "r1", "runner": "gaudi-1", "attempt": 1}, "routine"),
    ("ci-check", {"run_id": "r1", "runner": "gaudi", "verdict": "success"}, "routine"),
    ("ci-check", {"run_id": "r1", "runner": "gaudi", "verdict": "failure"}, "problem"),
    ("ci-check", {"run_id": "r1", "runner": "gaudi", "state": "infra-error"}, "problem"),
    ("ci-check", {"run_id": "r1", "runner": "gaudi", "verdict": "cancelled"}, "nothing"),
    ("ci-success", {"run_id": "r1", "reason": "1 check passed"}, "routine"),
    ("ci-reused", {"run_id": "r2", "reason": "same tree as r1"}, "routine"),
    ("ci-failure", {"run_id": "r1", "reason": "check greedy failed"}, "problem"),
    ("ci-infra-error", {"run_id": "r1", "reason": "runner lost mid-job"}, "problem"),
    ("ci-cancelled", {"run_id": "r1", "reason": "superseded by a newer tree"}, "nothing"),
    ("ci-refused", {"run_id": "r1", "runner": "gaudi-1", "reason": "unknown command"}, "problem"),
    ("ci-runner-lost", {"run_id": "r1", "runner": "gaudi-1", "attempt": 1}, "problem"),
    (
        "ci-report-refused",
        {"run_id": "r1", "runner": "gaudi-1", "reason": "run r1 is a gb10 run, not gaudi"},
        "problem",
    ),
    ("ci-retry", {"run_id": "r1", "attempt": 2, "delay_s": 30}, "problem"),
    ("ci-duplicate-delivery", {"run_id": "r1", "runner": "gaudi-2"}, "nothing"),
    ("ci-approved", {"sha": HEAD, "by": "alice", "runs": ["r1"]}, "changed"),
    ("ci-report-failed", {"runner": "gaudi", "error": "HTTP 502"}, "problem"),
    ("ci-table-failed", {"runner": "gaudi", "error": "HTTP 502"}, "problem"),
    ("retest", {"result": "no proposed tree to test yet", "by": "bob"}, "nothing"),
    ("retest", {"reason": "/carry retest by @bob", "runner": None, "by": "bob"}, "routine"),
    ("downstream-renamed", {"was": "o/old", "now": "o/new", "action": "set it"}, "problem"),
    # kinds this table does not know: routine, unless they report an error
    ("head-moved", {"head": HEAD, "ref": "refs/heads/main"}, "routine"),
    ("something-new", {"error": "it broke"}, "problem"),
]


@pytest.mark.parametrize(("kind", "data", "expected"), TABLE)
def test_each_entry_has_the_outcome_a_maintainer_expects(
    kind: str, data: dict[str, Any], expected: Outcome
) -> None:
    assert outcome_of(kind, data) == expected


def test_every_outcome_is_described_and_reachable() -> None:
    assert tuple(OUTCOME_WORDS) == OUTCOMES == ("problem", "changed", "routine", "nothing")
    assert {expected for _, _, expected in TABLE} == set(OUTCOMES)
    for key, words in OUTCOME_WORDS.items():
        assert words.startswith(f"{key}: ")  # the row shows the key, the filter its words
