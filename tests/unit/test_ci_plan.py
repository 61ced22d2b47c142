"""bot.core.ci_plan: identity, trust, outcome classification and retries, and the planner's
decision on a request for a hardware run (bot.core.planner.plan of a RunRequested event), as
tables."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from bot.ci.spec import JobPayload, StepSpec, TreeSpec, job_mismatch
from bot.config import Runner
from bot.core import actions as act
from bot.core.ci_pacing import Pace, PacePolicy
from bot.core.ci_plan import (
    ApprovalError,
    Budget,
    RetryPolicy,
    backoff_s,
    check_run_status,
    ci_key,
    classify_outcome,
    next_attempt,
    overall,
    resolve_approval,
    reused_detail,
    reused_verdict,
    should_rerun,
    split_ci_key,
    tree_key,
)
from bot.core.events import RunRequested
from bot.core.planner import ActiveRun, Facts, LaneFacts, StoredResult, plan
from bot.core.policy import series_digest
from bot.core.state import CiStatus

A = "a" * 40
B = "b" * 40
DIGEST = series_digest([("0001.patch", b"patch one\n"), ("0002.patch", b"patch two\n")])

# --------------------------------------------------------------------------- identity


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        ([b"x", b"y"], [b"x", b"y"], True),
        ([b"x", b"y"], [b"y", b"x"], False),  # order is part of a series
        ([b"xy", b""], [b"x", b"y"], False),  # bytes moved between patches
        ([b"x"], [b"x", b""], False),  # an empty patch still counts
        ([], [], True),
    ],
)
def test_series_digest(left: list[bytes], right: list[bytes], same: bool) -> None:
    def digest(patches: list[bytes]) -> str:
        return series_digest((f"{i:04d}.patch", data) for i, data in enumerate(patches))

    assert (digest(left) == digest(right)) is same


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        ((A, DIGEST, ["x", "y"], ""), (A, DIGEST, ["y", "x"], ""), True),  # check order
        ((A, DIGEST, ["x"], ""), (A.upper(), DIGEST, ["x"], ""), True),  # sha case
        ((A, DIGEST, ["x"], ""), (B, DIGEST, ["x"], ""), False),  # upstream moved
        (
            (A, DIGEST, ["x"], ""),
            (A, series_digest([("0001.patch", b"z")]), ["x"], ""),
            False,
        ),  # series
        ((A, DIGEST, ["x"], ""), (A, DIGEST, ["x", "y"], ""), False),  # another check
        ((A, DIGEST, ["x"], "r1"), (A, DIGEST, ["x"], "r2"), False),  # changed commands
    ],
)
def test_tree_key(left: tuple, right: tuple, same: bool) -> None:
    assert (tree_key(*left) == tree_key(*right)) is same


@pytest.mark.parametrize(
    ("kind", "check", "variant", "key"),
    [
        ("gaudi", "async-inputs", "", "gaudi/async-inputs"),
        ("gb10", "ple", "upstream", "gb10/ple@upstream"),
    ],
)
def test_ci_key_round_trip(kind: str, check: str, variant: str, key: str) -> None:
    assert ci_key(kind, check, variant) == key
    assert split_ci_key(key) == (kind, check, variant)


# --------------------------------------------------------------------------- approval


@pytest.mark.parametrize(
    ("given", "candidates", "expected"),
    [
        (A, [], A),  # a full SHA binds as given
        (A[:7], [A, B], A),
        (" " + B[:12].upper() + " ", [A, B], B),
    ],
)
def test_resolve_approval(given: str, candidates: list[str], expected: str) -> None:
    assert resolve_approval(given, candidates) == expected


@pytest.mark.parametrize(
    ("given", "candidates", "error"),
    [
        ("abc", [A], "not a commit SHA"),  # too short to bind safely
        ("not-a-sha", [A], "not a commit SHA"),
        ("c" * 7, [A, B], "no head waiting"),
        ("a" * 7, [A, "a" * 39 + "b"], "ambiguous"),
    ],
)
def test_resolve_approval_refuses(given: str, candidates: list[str], error: str) -> None:
    with pytest.raises(ApprovalError, match=error):
        resolve_approval(given, candidates)


# --------------------------------------------------------------------------- scheduling

KEY_NEW = "tree-new"
KEY_OLD = "tree-old"


def request(trusted: bool = True, force: bool = False) -> RunRequested:
    return RunRequested(
        series_id="s1",
        runner_kind="gaudi",
        tree_key=KEY_NEW,
        head_sha=B,
        trusted=trusted,
        force=force,
    )


def plan_run(req: RunRequested, lane: LaneFacts) -> list[act.RunDecision]:
    """The planner's one entry point, with the lane's facts the request is planned over: it
    answers with run decisions only."""
    actions = plan(req, Facts.of_lane(lane))
    decisions = [a for a in actions if isinstance(a, act.RunDecision)]
    assert decisions == actions
    return decisions


def run(run_id: str, state: str, key: str = KEY_OLD, dispatched: bool = True) -> ActiveRun:
    return ActiveRun(run_id, CiStatus(state), key, A, dispatched)


DONE = StoredResult("r-done", CiStatus.SUCCESS, B)
NOW = 1_800_000_000.0
FULL = Budget(queued=1, running=1)

# (name, request, facts, expected [(action class, run_ids)])
PLANS = [
    ("fresh tree", request(), LaneFacts(), [(act.EnqueueRun, ())]),
    ("reuse", request(), LaneFacts(result=DONE), [(act.ReuseResult, ("r-done",))]),
    (
        # a verdict is no approval: a planted one turned a stranger's head green (issue 33)
        "a stored verdict is never reused for a head that needs approval",
        request(trusted=False),
        LaneFacts(result=DONE),
        [(act.WaitForApproval, ())],
    ),
    ("retest skips reuse", request(force=True), LaneFacts(result=DONE), [(act.EnqueueRun, ())]),
    (
        "newer head supersedes a queued run",
        request(),
        LaneFacts(active=(run("r1", "queued"),)),
        [(act.SupersedeRuns, ("r1",)), (act.EnqueueRun, ())],
    ),
    (
        "newer head supersedes a running run",
        request(),
        LaneFacts(active=(run("r1", "running"),), in_flight=2, budget=FULL),
        [(act.SupersedeRuns, ("r1",)), (act.EnqueueRun, ())],  # the run it replaces frees its place
    ),
    (
        "newer head with a stored result still cancels the stale run",
        request(),
        LaneFacts(result=DONE, active=(run("r1", "running"),)),
        [(act.SupersedeRuns, ("r1",)), (act.ReuseResult, ("r-done",))],
    ),
    (
        "same tree running: join",
        request(),
        LaneFacts(active=(run("r1", "running", KEY_NEW),)),
        [(act.JoinRun, ("r1",))],
    ),
    (
        "same tree running wins over a stored result (a retest in flight)",
        request(),
        LaneFacts(result=DONE, active=(run("r1", "running", KEY_NEW),)),
        [(act.JoinRun, ("r1",))],
    ),
    ("untrusted head waits", request(trusted=False), LaneFacts(), [(act.WaitForApproval, ())]),
    (
        "untrusted newer head supersedes and waits",
        request(trusted=False),
        LaneFacts(active=(run("r1", "waiting-approval", dispatched=False),)),
        [(act.SupersedeRuns, ("r1",)), (act.WaitForApproval, ())],
    ),
    (
        "untrusted, same tree already waiting: join",
        request(trusted=False),
        LaneFacts(active=(run("r1", "waiting-approval", KEY_NEW, dispatched=False),)),
        [(act.JoinRun, ("r1",))],
    ),
    (
        "approved: the waiting run is released under its own id",
        request(trusted=True),
        LaneFacts(active=(run("r1", "waiting-approval", KEY_NEW, dispatched=False),)),
        [(act.EnqueueRun, ("r1",))],
    ),
    (
        "a result appeared while waiting: the head still waits for its approval",
        request(trusted=False),
        LaneFacts(result=DONE, active=(run("r1", "waiting-approval", KEY_NEW, dispatched=False),)),
        [(act.JoinRun, ("r1",))],
    ),
    (
        "a result appeared while waiting, then the head was approved: reused",
        request(trusted=True),
        LaneFacts(result=DONE, active=(run("r1", "waiting-approval", KEY_NEW, dispatched=False),)),
        [(act.SupersedeRuns, ("r1",)), (act.ReuseResult, ("r-done",))],
    ),
    ("budget full", request(), LaneFacts(in_flight=2, budget=FULL), [(act.DeferOverBudget, ())]),
    ("budget has room", request(), LaneFacts(in_flight=1, budget=FULL), [(act.EnqueueRun, ())]),
    (
        "an undispatched stale run frees nothing",
        request(),
        LaneFacts(active=(run("r1", "queued", dispatched=False),), in_flight=2, budget=FULL),
        [(act.SupersedeRuns, ("r1",)), (act.DeferOverBudget, ())],
    ),
    (
        "released from approval into a full budget keeps its id",
        request(),
        LaneFacts(
            active=(run("r1", "waiting-approval", KEY_NEW, dispatched=False),),
            in_flight=2,
            budget=FULL,
        ),
        [(act.DeferOverBudget, ("r1",))],
    ),
    (
        "paced: a run started a minute ago holds the next head's",
        request(),
        LaneFacts(pace=Pace(PacePolicy(min_interval_s=3600), NOW, (NOW - 60,))),
        [(act.PaceRun, ())],
    ),
    (
        "paced: a newer head replaces the held run and is held in turn",
        request(),
        LaneFacts(
            active=(run("r1", "queued", dispatched=False),),
            pace=Pace(PacePolicy(min_interval_s=3600), NOW, (NOW - 60,)),
        ),
        [(act.SupersedeRuns, ("r1",)), (act.PaceRun, ())],
    ),
    (
        "paced: the interval has passed",
        request(),
        LaneFacts(pace=Pace(PacePolicy(min_interval_s=3600), NOW, (NOW - 3601,))),
        [(act.EnqueueRun, ())],
    ),
    (
        "a retest is not paced",
        request(force=True),
        LaneFacts(pace=Pace(PacePolicy(daily_budget=1), NOW, (NOW - 60,))),
        [(act.EnqueueRun, ())],
    ),
    (
        "a retest of a held tree releases the held run under its id",
        request(force=True),
        LaneFacts(
            active=(run("r1", "queued", KEY_NEW, dispatched=False),),
            pace=Pace(PacePolicy(daily_budget=1), NOW, (NOW - 60,)),
        ),
        [(act.EnqueueRun, ("r1",))],
    ),
    (
        "the same tree held: a plain request joins it",
        request(),
        LaneFacts(
            active=(run("r1", "queued", KEY_NEW, dispatched=False),),
            pace=Pace(PacePolicy(daily_budget=1), NOW, (NOW - 60,)),
        ),
        [(act.JoinRun, ("r1",))],
    ),
]


@pytest.mark.parametrize(("name", "req", "facts", "expected"), PLANS, ids=[p[0] for p in PLANS])
def test_plan_run(name: str, req: RunRequested, facts: LaneFacts, expected: list) -> None:
    actions = plan_run(req, facts)
    assert [(type(a), a.run_ids) for a in actions] == expected
    assert all(a.reason and a.key == req.key and a.series_id == req.series_id for a in actions)


def test_a_paced_run_says_when_it_may_start() -> None:
    pace = Pace(PacePolicy(min_interval_s=3600), NOW, (NOW - 60,))
    (action,) = plan_run(request(), LaneFacts(pace=pace))
    assert isinstance(action, act.PaceRun) and action.not_before == NOW - 60 + 3600


def test_a_burst_of_heads_leaves_one_active_run() -> None:
    """Each head supersedes the one before, so at most one run is active per series and kind."""
    active: tuple[ActiveRun, ...] = ()
    for number in range(20):
        head = f"{number:040x}"
        req = RunRequested(
            series_id="s1",
            runner_kind="gaudi",
            tree_key=f"tree-{number}",
            head_sha=head,
            trusted=True,
        )
        actions = plan_run(req, LaneFacts(active=active, in_flight=len(active), budget=FULL))
        cancelled = {rid for a in actions if isinstance(a, act.SupersedeRuns) for rid in a.runs}
        assert isinstance(actions[-1], act.EnqueueRun)
        run_id = f"r{number}"
        active = (
            *(r for r in active if r.run_id not in cancelled),
            run(run_id, "queued", f"tree-{number}"),
        )
        assert len(active) == 1
    assert active[0].run_id == "r19"


# --------------------------------------------------------------------------- outcomes

KILL, TERM, SEGV, ABRT = signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV, signal.SIGABRT
OUTCOMES = [
    # step, exit code, signal, timed out, verdict, reason contains
    ("check", 0, None, False, "success", "passed"),
    ("check", 1, None, False, "failure", "saw the bug"),
    ("check", 2, None, False, "infra-error", "no verdict"),
    ("check", 3, None, False, "failure", "exit 3"),  # pytest's internal error is not a pass
    ("check", 77, None, False, "inconclusive", "exit 77: it could not observe"),
    ("check", 126, None, False, "infra-error", "could not run"),
    ("check", 127, None, False, "infra-error", "could not run"),
    ("check", None, None, True, "failure", "timed out after 5s"),
    ("check", None, KILL, False, "infra-error", "SIGKILL (out of memory?)"),
    ("check", None, TERM, False, "infra-error", "SIGTERM"),
    ("check", None, SEGV, False, "failure", "crashed with SIGSEGV"),
    ("check", None, ABRT, False, "failure", "crashed with SIGABRT"),
    ("check", 137, None, False, "infra-error", "exited 137: killed by SIGKILL"),  # via a shell
    ("check", 139, None, False, "failure", "crashed with SIGSEGV"),
    ("setup", 0, None, False, "success", "passed"),
    ("setup", 1, None, False, "infra-error", "exited 1"),  # setup failures are infra
    ("setup", None, None, True, "infra-error", "timed out"),
    ("setup", None, KILL, False, "infra-error", "SIGKILL"),
    ("materialize", 128, None, False, "infra-error", "exited 128"),
    ("job", 1, None, False, "infra-error", "exited 1"),
]


@pytest.mark.parametrize(("step", "code", "sig", "timed_out", "verdict", "reason"), OUTCOMES)
def test_classify_outcome(
    step: str, code: int | None, sig: int | None, timed_out: bool, verdict: str, reason: str
) -> None:
    outcome = classify_outcome(step, code, sig, timed_out, name="x", timeout_s=5)  # type: ignore[arg-type]
    assert outcome.verdict == verdict
    assert reason in outcome.reason
    assert outcome.retryable is (verdict == "infra-error")


@pytest.mark.parametrize(
    ("kwargs", "verdict"),
    [
        ({"cancelled": "superseded"}, "cancelled"),  # wins over a timeout or a signal
        ({"lost": True}, "infra-error"),
    ],
)
def test_classify_cancel_and_lost(kwargs: dict, verdict: str) -> None:
    assert classify_outcome("check", None, KILL, True, **kwargs).verdict == verdict


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        (["success", "success"], "success"),
        ([], "success"),
        (["success", "failure"], "failure"),
        (["failure", "infra-error"], "infra-error"),
        (["infra-error", "cancelled"], "cancelled"),
        (["success", "inconclusive"], "inconclusive"),
        (["inconclusive", "failure"], "failure"),
    ],
)
def test_overall(verdicts: list[str], expected: str) -> None:
    assert overall(verdicts) == expected


# --------------------------------------------------------------------------- retries

POLICY = RetryPolicy(max_attempts=3, base_delay_s=10, factor=3, max_delay_s=60)


@pytest.mark.parametrize(("attempt", "delay"), [(1, 10), (2, 30), (3, 60), (9, 60)])
def test_backoff(attempt: int, delay: float) -> None:
    assert backoff_s(POLICY, attempt) == delay


@pytest.mark.parametrize(
    ("verdict", "attempt", "retry", "delay"),
    [
        ("infra-error", 1, True, 10),
        ("infra-error", 2, True, 30),
        ("infra-error", 3, False, 0),  # the limit counts all attempts
        ("failure", 1, False, 0),  # a test failure is never retried
        ("success", 1, False, 0),
        ("cancelled", 1, False, 0),
        ("inconclusive", 1, False, 0),  # the same tree and load would measure the same
    ],
)
def test_next_attempt(verdict: str, attempt: int, retry: bool, delay: float) -> None:
    decision = next_attempt(POLICY, verdict, attempt)
    assert (decision.retry, decision.delay_s) == (retry, delay)
    assert decision.reason


@pytest.mark.parametrize(
    ("reruns", "verdict", "done", "rerun"),
    [
        (0, "failure", 0, False),
        (1, "failure", 0, True),
        (1, "failure", 1, False),
        (2, "infra-error", 0, False),  # infra goes through the retry policy instead
        (2, "success", 0, False),
    ],
)
def test_should_rerun(reruns: int, verdict: str, done: int, rerun: bool) -> None:
    assert should_rerun(RetryPolicy(reruns=reruns), verdict, done) is rerun


# --------------------------------------------------------------------------- reporting


@pytest.mark.parametrize(
    ("state", "detail", "expected"),
    [
        ("queued", "", ("queued", None)),
        ("running", "", ("in_progress", None)),
        ("success", "", ("completed", "success")),
        ("failure", "", ("completed", "failure")),
        ("infra-error", "", ("completed", "failure")),
        ("cancelled", "", ("completed", "cancelled")),
        ("waiting-approval", "", ("completed", "action_required")),
        ("reused", reused_detail("success", "r1"), ("completed", "success")),
        ("reused", reused_detail("failure", "r1", "exit 1"), ("completed", "failure")),
        ("inconclusive", "", ("completed", "neutral")),  # GitHub's grey: neither pass nor bug
        ("reused", reused_detail("inconclusive", "r1"), ("completed", "neutral")),
    ],
)
def test_check_run_status(state: str, detail: str, expected: tuple) -> None:
    assert check_run_status(state, detail) == expected


def test_reused_detail_round_trip() -> None:
    detail = reused_detail("failure", "gaudi-1", "check x failed (exit 1)")
    assert reused_verdict(detail) == "failure"
    assert "gaudi-1" in detail and "exit 1" in detail


# --------------------------------------------------------------------------- trust boundary

RUNNER = Runner.model_validate(
    {
        "queue": "hw.gaudi",
        "workdir": "/srv/carry",
        "setup": [{"name": "install", "run": ["pip", "install", "-e", "."], "timeout_s": 600}],
        "checks": {
            "unit": {"run": ["pytest", "-q"], "timeout_s": 900, "env": {"HW": "1"}},
            "smoke": {"run": ["./smoke.sh"]},
        },
    }
)
INSTALL = StepSpec("install", ("pip", "install", "-e", "."), 600)
UNIT = StepSpec("unit", ("pytest", "-q"), 900, {"HW": "1"})
SMOKE = StepSpec("smoke", ("./smoke.sh",))


TREE = TreeSpec("u", A, "d", "refs/heads/carry/s", B, "patches/s", DIGEST, "e" * 40)


def job(
    setup: tuple[StepSpec, ...] = (INSTALL,),
    *checks: StepSpec,
    kind: str = "gaudi",
    tree: TreeSpec = TREE,
) -> JobPayload:
    return JobPayload("r1", "s", kind, f"hw.{kind}", "k", A, tree, setup, checks or (UNIT,))


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (job(), None),
        (job((INSTALL,), SMOKE, replace(UNIT, ab=True)), None),  # a subset, A/B is the series'
        (job((INSTALL,), StepSpec("evil", ("sh", "-c", "x"))), "check 'evil' is not in"),
        (job((INSTALL,), replace(UNIT, run=("sh", "-c", "x"))), "command of check 'unit' differs"),
        (job((INSTALL,), replace(UNIT, env={})), "env of check 'unit' differs"),
        (job((INSTALL,), replace(UNIT, timeout_s=1)), "timeout of check 'unit' differs"),
        (job((INSTALL,), replace(UNIT, run=(), env={})), "command and env of check 'unit'"),
        (job((replace(INSTALL, run=("curl", "x")),)), "command of setup step 'install' differs"),
        (job((StepSpec("fetch", ("curl", "x")),)), "setup step 'fetch' is not in"),
        (job(()), "the job's setup (none) is not this runner's setup (install)"),
        (job((INSTALL, INSTALL)), "the job's setup (install, install) is not"),
        (job(kind="gb10"), "the job is for runner kind 'gb10', this runner is 'gaudi'"),
    ],
)
def test_a_job_runs_only_what_the_runners_config_names(
    payload: JobPayload, reason: str | None
) -> None:
    found = job_mismatch(payload, "gaudi", RUNNER)
    if reason is None:
        assert found is None
    else:
        assert found is not None and found.startswith(reason), found


def test_a_runner_without_config_runs_nothing() -> None:
    assert job_mismatch(job(), "gaudi", None) == (
        "this runner has no config: it runs only the commands its own config names"
    )


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("upstream_url", "--upload-pack=touch /tmp/pwned", "the tree's upstream_url '--upload"),
        ("downstream_url", "-uabc@x:", "the tree's downstream_url '-uabc@x:' is not a repository"),
        ("downstream_url", "", "the tree's downstream_url '' is not a repository"),
        ("upstream_url", "https://h/r\n--x", "the tree's upstream_url"),
        ("upstream_sha", "--output=/etc/x", "the tree's upstream_sha '--output=/etc/x' is not an"),
        ("downstream_sha", "HEAD~1", "the tree's downstream_sha 'HEAD~1' is not an object id"),
        ("expected_tree", "E" * 40, "the tree's expected_tree"),
        ("downstream_ref", "refs/heads/x:refs/heads/y", "the tree's downstream_ref"),
        ("downstream_ref", "--mirror", "the tree's downstream_ref '--mirror'"),
        ("upstream_ref", "refs/../../x", "the tree's upstream_ref"),
        ("patches_dir", "../../etc", "the tree's patches_dir '../../etc'"),
        ("patches_dir", "/etc", "the tree's patches_dir '/etc'"),
        # What carry itself writes passes.
        ("upstream_url", "https://github.com/vllm-project/vllm-gaudi.git", None),
        ("upstream_url", "git@github.com:o/r.git", None),
        ("upstream_sha", "a" * 64, None),  # a SHA-256 repository
        ("upstream_ref", "refs/pull/12/head", None),
        ("upstream_ref", "v0.30.0", None),
        ("upstream_ref", None, None),
    ],
)
def test_a_job_whose_tree_carry_could_not_have_issued_runs_nothing(
    field: str, value: str | None, reason: str | None
) -> None:
    """The tree's values reach git on the runner: a URL or a ref that git would read as an
    option (`--upload-pack` runs a command) never gets there."""
    found = job_mismatch(job(tree=replace(TREE, **{field: value})), "gaudi", RUNNER)
    if reason is None:
        assert found is None
    else:
        assert found is not None and found.startswith(reason), found
