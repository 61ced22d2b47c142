"""What a series' history can say: every entry's kind, one enum. Pure.

The store writes only these (`bot.store.series.append_history` takes a HistoryKind), the timeline
(`bot.web.timeline`) reads them, and a runner may report only the run kinds below. An entry an
older carry wrote with a kind no longer here still reads back as text.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class HistoryKind(StrEnum):
    # planner actions, one entry each as the dispatcher carries them out (bot.core.planner.ActionKind)
    NOTE = "note"
    REBASE = "rebase"
    RECORD_HEAD = "record_head"
    RECORD_STALE_HEAD = "record_stale_head"
    RECORD_PUSHER = "record_pusher"
    RECORD_PUSH = "record_push"
    RECORD_BASE_PR = "record_base_pr"
    RETARGET = "retarget"
    FIND_SUCCESSOR = "find_successor"
    RECORD_UPSTREAM_PR = "record_upstream_pr"
    RECORD_CARRY_PR = "record_carry_pr"
    REOPEN = "reopen"
    SET_PAUSED = "set_paused"
    PIN_PATCH = "pin_patch"
    REQUEST_DROP = "request_drop"
    CHECK_PERMISSION = "check_permission"
    REPLY = "reply"
    PUBLISH = "publish"
    APPROVE = "approve"
    RETEST = "retest"
    RECORD_CI = "record_ci"
    REFRESH_DASHBOARD_ISSUE = "refresh_dashboard_issue"
    TEST_TREE = "test_tree"
    REPORT_CHECKS = "report_checks"
    NOTIFY = "notify"
    BISECT = "bisect"
    MENTION_OWNERS = "mention_owners"
    MOVE_GOOD_REF = "move_good_ref"
    POLL = "poll"
    RELEASE_RUNS = "release_runs"
    SKIPPED = "skipped"  # an action already done, or one its adapter found nothing to do for

    # intake and polling
    DUPLICATE_EVENT = "duplicate-event"
    POLL_FAILED = "poll-failed"
    WAITING_FOR_REF = "waiting-for-ref"
    REF_APPEARED = "ref-appeared"
    DELIVERY_REDELIVERED = "delivery-redelivered"
    REDELIVER_FAILED = "redeliver-failed"
    DELIVERY_REQUEUED = "delivery-requeued"  # an acknowledged event's lost message queued again
    DELIVERY_FAILED = "delivery-failed"  # ... and still not handled after MAX_REQUEUES runs
    COMMAND_NOT_CHECKED = "command-not-checked"

    # the rebase
    REBASED = "rebased"
    DECISION = "decision"
    UNCHANGED = "unchanged"
    SUPERSEDED = "superseded"
    AWAITING_IMPORT = "awaiting-import"
    SERIES_INVALID = "series-invalid"
    REPORT_FAILED = "report-failed"
    REBASE_FAILED = "rebase-failed"
    REBASE_TIMED_OUT = "rebase-timed-out"
    REBASE_OUT_OF_MEMORY = "rebase-out-of-memory"
    TASK_TIMED_OUT = "task-timed-out"
    LEASE_LOST = "lease-lost"

    # publishing on GitHub
    PROPOSAL = "proposal"
    PUBLISHED = "published"
    PUBLISH_SKIPPED = "publish-skipped"
    PUBLISH_FAILED = "publish-failed"
    PUBLISH_REFUSED = "publish-refused"
    PUSH_READ_BACK = "push-read-back"
    LABEL_REMOVED = "label-removed"
    DRAFT_REFUSED = "draft-refused"
    CARRY_PR_FOUND_CLOSED = "carry-pr-found-closed"
    BRANCH_COMMITS_KEPT = "branch-commits-kept"
    NOTICE_SAID = "notice-said"
    DOWNSTREAM_RENAMED = "downstream-renamed"
    REPOSITORY_MOVED = "repository-moved"  # renamed or transferred on GitHub (same id)
    SUCCESSOR_PROPOSED = "successor-proposed"
    SUCCESSOR_FAILED = "successor-failed"
    DASHBOARD_ISSUE_OPENED = "dashboard-issue-opened"
    DASHBOARD_ISSUE_FAILED = "dashboard-issue-failed"

    # people told (bot.core.verified.Change, bot.core.attention.Attention)
    WENT_RED = "went-red"
    WENT_GREEN = "went-green"
    NEW_CONFLICT = "new-conflict"
    NEW_REVIEW = "new-review"
    STUCK = "stuck"
    NOTIFIED = "notified"
    NOTIFY_FAILED = "notify-failed"
    RED_STREAK = "red-streak"  # the failing fix's owners mentioned (bot.core.owners)

    # the tested tree as branches of the downstream repository (bot.core.tree_branch)
    TREE_BRANCH = "tree-branch"
    TREE_BRANCH_SKIPPED = "tree-branch-skipped"
    GOOD_REF = "good-ref"
    GOOD_REF_REFUSED = "good-ref-refused"
    GOOD_REF_FAILED = "good-ref-failed"

    # hardware CI, the service's side: the run decisions (bot.core.actions.RUN_ACTIONS) first
    CI_SUPERSEDE = "ci-supersede"
    CI_REUSE = "ci-reuse"
    CI_JOIN = "ci-join"
    CI_WAIT_APPROVAL = "ci-wait-approval"
    CI_ENQUEUE = "ci-enqueue"
    CI_OVER_BUDGET = "ci-over-budget"
    CI_PACED = "ci-paced"
    CI_APPROVED = "ci-approved"
    CI_TRUSTED_PUSHER = "ci-trusted-pusher"
    CI_REPORT_FAILED = "ci-report-failed"
    CI_REPORT_GAVE_UP = "ci-report-gave-up"
    CI_REPORT_REFUSED = "ci-report-refused"
    CI_TABLE_FAILED = "ci-table-failed"

    # hardware CI, what runners report (RUN_KINDS) and how a run ends (ci-<final CiStatus>)
    CI_REFUSED = "ci-refused"
    CI_ORPHAN_JOB = "ci-orphan-job"
    CI_DUPLICATE_DELIVERY = "ci-duplicate-delivery"
    CI_RUNNER_LOST = "ci-runner-lost"
    CI_STARTED = "ci-started"
    CI_CHECK = "ci-check"
    CI_RETRY = "ci-retry"
    CI_SUCCESS = "ci-success"
    CI_FAILURE = "ci-failure"
    CI_INCONCLUSIVE = "ci-inconclusive"
    CI_INFRA_ERROR = "ci-infra-error"
    CI_CANCELLED = "ci-cancelled"
    CI_REUSED = "ci-reused"

    # bisection of a red head
    BISECT_STARTED = "bisect-started"
    BISECT_PROBE = "bisect-probe"
    BISECT_SKIPPED = "bisect-skipped"
    BISECT_FAILED = "bisect-failed"
    BISECTED = "bisected"


# What a runner may write into a series' history, and the two it may write about a run carry
# does not know (a forged or stale job it refused).
RUN_KINDS: Final = frozenset(
    {
        HistoryKind.CI_REFUSED,
        HistoryKind.CI_ORPHAN_JOB,
        HistoryKind.CI_DUPLICATE_DELIVERY,
        HistoryKind.CI_RUNNER_LOST,
        HistoryKind.CI_STARTED,
        HistoryKind.CI_CHECK,
        HistoryKind.CI_RETRY,
        HistoryKind.CI_SUCCESS,
        HistoryKind.CI_FAILURE,
        HistoryKind.CI_INCONCLUSIVE,
        HistoryKind.CI_INFRA_ERROR,
        HistoryKind.CI_CANCELLED,
        HistoryKind.CI_REUSED,
    }
)
UNKNOWN_RUN_KINDS: Final = frozenset({HistoryKind.CI_REFUSED, HistoryKind.CI_ORPHAN_JOB})


def ci_kind(word: str) -> HistoryKind:
    """The entry for a run's final state (`ci-<word>`); ValueError for others."""
    return HistoryKind(f"ci-{word}")
