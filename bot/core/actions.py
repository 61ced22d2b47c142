"""What the planner decides to do: one frozen dataclass per kind of action. Pure.

Every action has the same envelope (`Action`): an idempotency key, the reason it is done
(its history entry says it), the series it is for and how long carry remembers it was done.
Each kind adds its own typed inputs. The dispatcher (workers.dispatch) maps each class of
ACTIONS to its adapter, and an adapter that hands the work to a Celery task names the task and
the task's arguments here (`TASK`, `task_args`), so a task's signature and the action that feeds
it are read in one place. The planner's decision on a request for a hardware run (a
bot.core.events.RunRequested event) answers with RUN_ACTIONS, which workers.ci.requests carries
out under the runner kind's lock.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from bot.core.bisect import BISECT_TASK
from bot.core.owners import RED_STREAK_TASK
from bot.core.tree_branch import GOOD_REF_TASK


class ActionKind(StrEnum):
    """What an action does; each kind has one class below, one adapter (workers.dispatch for
    ACTIONS, workers.ci.requests for RUN_ACTIONS) and one history entry of the same name
    (bot.core.history.HistoryKind)."""

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
    # what the planner does with a request for a hardware run, events.RunRequested (RUN_ACTIONS)
    CI_SUPERSEDE = "ci-supersede"
    CI_REUSE = "ci-reuse"
    CI_JOIN = "ci-join"
    CI_WAIT_APPROVAL = "ci-wait-approval"
    CI_ENQUEUE = "ci-enqueue"
    CI_OVER_BUDGET = "ci-over-budget"
    CI_PACED = "ci-paced"


@dataclass(frozen=True, kw_only=True)
class Action:
    """The envelope every action has. `kind` names its adapter and history entry; `args` are
    its own inputs by name (what its history entry records)."""

    KIND: ClassVar[ActionKind]
    # the Celery task that does the work, where an adapter only hands it on (None: the
    # dispatcher does it, or a specific adapter sends it)
    TASK: ClassVar[str | None] = None

    key: str
    reason: str
    series_id: str | None = None
    # how long carry remembers it was done (None: the store's default, 90 days); an action
    # whose key no later event can repeat needs only to outlive redeliveries
    remember_s: int | None = None

    @property
    def kind(self) -> ActionKind:
        return self.KIND

    @property
    def args(self) -> dict[str, Any]:
        own = (f for f in dataclasses.fields(self) if f.name not in _ENVELOPE)
        return {f.name: getattr(self, f.name) for f in own}

    def task_args(self) -> dict[str, Any]:
        """The keyword arguments of TASK."""
        return {"series_id": self.series_id, **self.args}


_ENVELOPE = frozenset(f.name for f in dataclasses.fields(Action))


# --------------------------------------------------------------------------- heads


@dataclass(frozen=True, kw_only=True)
class Note(Action):
    """Nothing to do but say why (its history entry is the whole effect)."""

    KIND = ActionKind.NOTE


@dataclass(frozen=True, kw_only=True)
class Rebase(Action):
    """Check the series on a head: the engine's rebase (task carry.rebase)."""

    KIND = ActionKind.REBASE
    TASK = "carry.rebase"
    head_sha: str
    head_ref: str
    actor: str | None = None  # who pushed the head (None: not known, or not a push)
    force: bool = False  # a re-check (`/carry rebase`, a command's change): of the newest head
    trigger: str = ""  # the key of the command that asked for it
    replaces: tuple[str, ...] = ()  # older heads this one moves the series past
    recheck: bool = False  # never folded into a re-check already queued: it must publish

    def task_args(self) -> dict[str, Any]:
        return {
            "series_id": self.series_id,
            "head_sha": self.head_sha,
            "head_ref": self.head_ref,
            "actor": self.actor,
            "force": self.force,
            "trigger": self.trigger,
        }


@dataclass(frozen=True, kw_only=True)
class RecordHead(Action):
    """A head the series follows without checking it now (paused, waiting for import)."""

    KIND = ActionKind.RECORD_HEAD
    head_sha: str
    head_ref: str
    actor: str | None = None
    replaces: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RecordStaleHead(Action):
    """A head behind the series' own: recorded, never checked or published."""

    KIND = ActionKind.RECORD_STALE_HEAD
    head_sha: str
    head_ref: str
    newest: str | None


@dataclass(frozen=True, kw_only=True)
class RecordPush(Action):
    """A push of the watched ref, for the series' trust (bot.core.trust)."""

    KIND = ActionKind.RECORD_PUSH
    before: str
    after: str
    actor: str
    trusted: bool
    forced: bool = False


@dataclass(frozen=True, kw_only=True)
class ReleaseRuns(Action):
    """The runs waiting for approval that a trusted push now covers start."""

    KIND = ActionKind.RELEASE_RUNS
    after: str
    actor: str


@dataclass(frozen=True, kw_only=True)
class RecordPusher(Action):
    """The pusher of a head a poll saw first."""

    KIND = ActionKind.RECORD_PUSHER
    head_sha: str
    actor: str
    trusted: bool


@dataclass(frozen=True, kw_only=True)
class Poll(Action):
    """Look at the upstream heads now rather than at the next interval (task carry.poll)."""

    KIND = ActionKind.POLL
    TASK = "carry.poll"

    def task_args(self) -> dict[str, Any]:
        return {}


# --------------------------------------------------------------------------- pull requests


@dataclass(frozen=True, kw_only=True)
class RecordCarryPr(Action):
    """A state of carry's own PR (a person's close stops a new PR)."""

    KIND = ActionKind.RECORD_CARRY_PR
    number: int
    state: str
    by: str | None
    person: bool
    at: str | None


@dataclass(frozen=True, kw_only=True)
class RecordBasePr(Action):
    """A state of the upstream PR a series is based on."""

    KIND = ActionKind.RECORD_BASE_PR
    state: str
    merge_commit: str | None


@dataclass(frozen=True, kw_only=True)
class RecordUpstreamPr(Action):
    """A state of an upstream PR a series links to."""

    KIND = ActionKind.RECORD_UPSTREAM_PR
    ref: str
    state: str
    merge_commit: str | None


@dataclass(frozen=True, kw_only=True)
class Retarget(Action):
    """The series follows another base (`/carry retarget`, or its base PR merged)."""

    KIND = ActionKind.RETARGET
    base: dict[str, Any]
    words: str
    by: str | None


@dataclass(frozen=True, kw_only=True)
class FindSuccessor(Action):
    """A base PR closed unmerged: look for the PR that carries its work on."""

    KIND = ActionKind.FIND_SUCCESSOR
    TASK = "carry.find_successor"
    repo: str
    number: int


# --------------------------------------------------------------------------- commands


@dataclass(frozen=True, kw_only=True)
class CheckPermission(Action):
    """A `/carry` command (a comment, or a ticked box): its author's permission first."""

    KIND = ActionKind.CHECK_PERMISSION
    TASK = "carry.check_permission"
    number: int
    comment_id: int
    author: str
    body: str
    # the head the commenter could have seen: `/carry approve` without a SHA means this one
    head_at_comment: str | None
    source: str = ""  # where a command that is no comment came from (a dashboard tick)


@dataclass(frozen=True, kw_only=True)
class Reply(Action):
    """A comment on carry's PR (task carry.reply)."""

    KIND = ActionKind.REPLY
    TASK = "carry.reply"
    number: int
    body: str


@dataclass(frozen=True, kw_only=True)
class SetPaused(Action):
    KIND = ActionKind.SET_PAUSED
    paused: bool
    by: str


@dataclass(frozen=True, kw_only=True)
class PinPatch(Action):
    """`/carry keep`: the patch is never dropped automatically."""

    KIND = ActionKind.PIN_PATCH
    patch: str
    by: str


@dataclass(frozen=True, kw_only=True)
class RequestDrop(Action):
    """`/carry drop`: the next proposal removes the patch."""

    KIND = ActionKind.REQUEST_DROP
    patch: str
    by: str


@dataclass(frozen=True, kw_only=True)
class Reopen(Action):
    """`/carry reopen`: a person's close no longer stops a new PR."""

    KIND = ActionKind.REOPEN
    by: str
    closed_pr: int | None


@dataclass(frozen=True, kw_only=True)
class Approve(Action):
    """`/carry approve`: the head runs on the hardware (task carry.approve)."""

    KIND = ActionKind.APPROVE
    TASK = "carry.approve"
    sha: str
    by: str


@dataclass(frozen=True, kw_only=True)
class Retest(Action):
    """`/carry retest`: the last proposed tree runs again (task carry.retest)."""

    KIND = ActionKind.RETEST
    TASK = "carry.retest"
    runner: str | None
    by: str


@dataclass(frozen=True, kw_only=True)
class RefreshDashboardIssue(Action):
    """The dashboard issue written again (task carry.dashboard_issue)."""

    KIND = ActionKind.REFRESH_DASHBOARD_ISSUE
    TASK = "carry.dashboard_issue"
    force: bool = True

    def task_args(self) -> dict[str, Any]:
        return {"force": self.force}


# --------------------------------------------------------------------------- trees and checks


@dataclass(frozen=True, kw_only=True)
class Publish(Action):
    """A rebase's result to GitHub: the tree branch, and a PR where one is due."""

    KIND = ActionKind.PUBLISH
    TASK = "carry.publish"
    head_sha: str
    digest: str
    changed: bool
    tree: str | None
    every_head: bool


@dataclass(frozen=True, kw_only=True)
class TestTree(Action):
    """Runs of an exact tree on the series' runners (workers.ci.github.test_tree)."""

    __test__ = False  # a class named Test* that pytest must not collect
    KIND = ActionKind.TEST_TREE
    head_sha: str
    tree: str
    branch: str
    branch_sha: str
    series_sha: str
    patches_dir: str


@dataclass(frozen=True, kw_only=True)
class RecordCi(Action):
    """An outside CI's result, kept in the history."""

    KIND = ActionKind.RECORD_CI
    event: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ReportChecks(Action):
    """Each row to GitHub, as a check run or a commit status (one REPORT_TASK per row)."""

    KIND = ActionKind.REPORT_CHECKS
    rows: tuple[dict[str, Any], ...]


@dataclass(frozen=True, kw_only=True)
class Notify(Action):
    """A change of verdict to the configured webhooks."""

    KIND = ActionKind.NOTIFY
    notice: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Bisect(Action):
    """A went-red notice starts a bisection; without one, its next step."""

    KIND = ActionKind.BISECT
    TASK = BISECT_TASK
    notice: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class MentionOwners(Action):
    """A red streak long enough: the failing fix's owners are mentioned, once per streak."""

    KIND = ActionKind.MENTION_OWNERS
    TASK = RED_STREAK_TASK
    grew: dict[str, Any]

    def task_args(self) -> dict[str, Any]:
        return {"grew": self.grew}


@dataclass(frozen=True, kw_only=True)
class MoveGoodRef(Action):
    """`carry/good/<series>` follows the last known good head."""

    KIND = ActionKind.MOVE_GOOD_REF
    TASK = GOOD_REF_TASK


# --------------------------------------------------------------------------- hardware runs


@dataclass(frozen=True, kw_only=True)
class RunDecision(Action):
    """What the planner does with a request for a hardware run of one tree, for one series and
    runner kind (events.RunRequested). Its key is the request's event key; workers.ci.requests
    carries it out and records it as the history entry of its kind, naming `run_ids`."""

    @property
    def run_ids(self) -> tuple[str, ...]:
        """The runs it names: those it cancels, reuses or joins, or the run it continues."""
        return ()


@dataclass(frozen=True, kw_only=True)
class SupersedeRuns(RunDecision):
    """Cancel the series' unfinished runs of the kind first: those of another tree (a newer
    head wins), or one of the same tree that a reused result makes needless."""

    KIND = ActionKind.CI_SUPERSEDE
    runs: tuple[str, ...]

    @property
    def run_ids(self) -> tuple[str, ...]:
        return self.runs


@dataclass(frozen=True, kw_only=True)
class ReuseResult(RunDecision):
    """The same tree already has a verdict: its rows say so, nothing runs."""

    KIND = ActionKind.CI_REUSE
    source_run: str  # the run whose verdict is reused

    @property
    def run_ids(self) -> tuple[str, ...]:
        return (self.source_run,)


@dataclass(frozen=True, kw_only=True)
class JoinRun(RunDecision):
    """A run of the same tree is queued, running or waiting for approval: the request is it."""

    KIND = ActionKind.CI_JOIN
    run: str

    @property
    def run_ids(self) -> tuple[str, ...]:
        return (self.run,)


@dataclass(frozen=True, kw_only=True)
class NewRun(RunDecision):
    """A run recorded for the request: a new one, or the run it continues (one that waited
    for approval, or one held back and retested), which keeps its id."""

    continues: str | None = None

    @property
    def run_ids(self) -> tuple[str, ...]:
        return (self.continues,) if self.continues is not None else ()


@dataclass(frozen=True, kw_only=True)
class WaitForApproval(RunDecision):
    """The head needs `/carry approve <sha>` before it reaches the hardware."""

    KIND = ActionKind.CI_WAIT_APPROVAL


@dataclass(frozen=True, kw_only=True)
class EnqueueRun(NewRun):
    """The run is handed to the broker for the kind's runners."""

    KIND = ActionKind.CI_ENQUEUE


@dataclass(frozen=True, kw_only=True)
class DeferOverBudget(NewRun):
    """The kind's budget is full: the run is recorded and starts when a place frees."""

    KIND = ActionKind.CI_OVER_BUDGET


@dataclass(frozen=True, kw_only=True)
class PaceRun(NewRun):
    """The series' pacing (ci.min_interval_s, ci.daily_budget) holds the run until then."""

    KIND = ActionKind.CI_PACED
    not_before: float  # epoch seconds


ACTIONS: tuple[type[Action], ...] = (
    Note,
    Rebase,
    RecordHead,
    RecordStaleHead,
    RecordPush,
    ReleaseRuns,
    RecordPusher,
    Poll,
    RecordCarryPr,
    RecordBasePr,
    RecordUpstreamPr,
    Retarget,
    FindSuccessor,
    CheckPermission,
    Reply,
    SetPaused,
    PinPatch,
    RequestDrop,
    Reopen,
    Approve,
    Retest,
    RefreshDashboardIssue,
    Publish,
    TestTree,
    RecordCi,
    ReportChecks,
    Notify,
    Bisect,
    MentionOwners,
    MoveGoodRef,
)

RUN_ACTIONS: tuple[type[RunDecision], ...] = (
    SupersedeRuns,
    ReuseResult,
    JoinRun,
    WaitForApproval,
    EnqueueRun,
    DeferOverBudget,
    PaceRun,
)
