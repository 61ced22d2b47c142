"""Hardware CI decisions, as pure functions over plain values.

What is tested (the tree key), who may reach the hardware (approval), a runner kind's budget, what a
step's end means (success, test failure, infrastructure error) and when to try again. What to do
with a request for a run (reuse, join, wait for approval, enqueue, supersede, pace, defer over
budget) is the planner's (bot.core.planner.plan of a bot.core.events.RunRequested, answering
with bot.core.actions' RUN_ACTIONS); workers/ci/requests.py gathers its facts from Redis and
carries the actions out; runner/ runs the steps. Nothing here does I/O: no celery, redis, git or github.
"""

from __future__ import annotations

import hashlib
import re
import signal as signals
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from bot.core.state import CiStatus

Verdict = Literal["success", "failure", "inconclusive", "infra-error", "cancelled"]
StepKind = Literal["materialize", "setup", "check", "job"]


# A run in one of these states may still use a runner; the others are final.
ACTIVE_STATES = (CiStatus.WAITING_APPROVAL, CiStatus.QUEUED, CiStatus.RUNNING)
FINAL_STATES = (
    CiStatus.SUCCESS,
    CiStatus.FAILURE,
    CiStatus.INCONCLUSIVE,
    CiStatus.INFRA_ERROR,
    CiStatus.CANCELLED,
    CiStatus.REUSED,
)
# Only what a check measured on the code can be reused: an infra error or a cancel says nothing
# about it (an inconclusive check did run: the same tree and load would measure the same).
REUSABLE = (CiStatus.SUCCESS, CiStatus.FAILURE, CiStatus.INCONCLUSIVE)
UPSTREAM_VARIANT = "upstream"  # the A/B run of a check on plain upstream

_SHA_RE = re.compile(r"[0-9a-f]{7,64}\Z")


# --------------------------------------------------------------------------- identity


def tree_key(upstream_sha: str, series_digest: str, checks: Iterable[str], recipe: str = "") -> str:
    """The identity of what a hardware run tests: the upstream commit, the carried series, the
    checks (order does not matter) and the recipe (a digest of the setup and check commands, so
    a changed command is not answered with an old result)."""
    parts = ["carry-tree-v1", upstream_sha.lower(), series_digest, *sorted(set(checks)), recipe]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def ci_key(kind: str, check: str, variant: str = "") -> str:
    """The key of one check's row in SeriesState.ci: 'gaudi/async-inputs', 'gaudi/x@upstream'."""
    return f"{kind}/{check}@{variant}" if variant else f"{kind}/{check}"


def split_ci_key(key: str) -> tuple[str, str, str]:
    """'gaudi/x@upstream' -> ('gaudi', 'x', 'upstream')."""
    kind, _, rest = key.partition("/")
    check, _, variant = rest.partition("@")
    return kind, check, variant


def short(sha: str) -> str:
    return sha[:12]


# --------------------------------------------------------------------------- trust


class ApprovalError(ValueError):
    """`/carry approve <sha>` that cannot be bound to exactly one head."""


def resolve_approval(given: str, candidates: Iterable[str]) -> str:
    """The full SHA an approval binds to. A full SHA binds as given; an abbreviation (7+ hex)
    must name exactly one of the heads waiting, so a later push that happens to share the
    prefix is never approved by it."""
    wanted = given.strip().lower()
    if not _SHA_RE.match(wanted):
        raise ApprovalError(f"{given!r} is not a commit SHA (7 to 64 hex digits)")
    if len(wanted) in (40, 64):
        return wanted
    matches = sorted({c.lower() for c in candidates if c.lower().startswith(wanted)})
    if not matches:
        raise ApprovalError(f"no head waiting for approval matches {wanted}")
    if len(matches) > 1:
        raise ApprovalError(f"{wanted} is ambiguous: {', '.join(short(m) for m in matches)}")
    return matches[0]


# --------------------------------------------------------------------------- scheduling


@dataclass(frozen=True)
class Budget:
    """Per runner kind: jobs waiting in its queue, and jobs running on its hosts."""

    queued: int = 2
    running: int = 1

    @property
    def capacity(self) -> int:
        """Jobs that may be handed to the broker at once (waiting or running)."""
        return self.queued + self.running


# --------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    reason: str

    @property
    def retryable(self) -> bool:
        return self.verdict == "infra-error"


# Signals that come from outside the code under test: the OOM killer, an operator, a shutdown.
INFRA_SIGNALS = frozenset({signals.SIGKILL, signals.SIGTERM, signals.SIGHUP, signals.SIGINT})
# vllm_checks' exit-code contract (vllm_checks/report.py)
EXIT_PASSED, EXIT_FAILED, EXIT_NO_VERDICT, EXIT_INCONCLUSIVE = 0, 1, 2, 77
EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND = 126, 127  # POSIX shells


def signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


def classify_outcome(
    step: StepKind,
    exit_code: int | None,
    signal: int | None = None,
    timed_out: bool = False,
    *,
    name: str = "",
    timeout_s: float | None = None,
    cancelled: str | None = None,
    lost: bool = False,
) -> Outcome:
    """What the end of one step means.

    Infrastructure (retried): the runner was lost, anything going wrong while materializing the
    tree or in a setup step (timeouts included), a check exiting 2 (no verdict) or 126/127 (the
    command cannot run), a check killed by SIGKILL/SIGTERM/SIGHUP/SIGINT (the OOM killer, a
    shutdown), also when a shell reports it as exit 128+N.
    Test failure (not retried): a check exiting 1 or any other non-zero code, crashing with
    another signal (SIGSEGV, SIGABRT: a crash is a bug), or running past its timeout.
    Inconclusive (not retried): a check exiting 77 (the test harnesses' "could not test"): it
    ran but could not observe its condition.
    """
    label = f"{step} {name}".strip()
    if cancelled is not None:
        return Outcome("cancelled", f"{label}: cancelled ({cancelled})")
    if lost:
        return Outcome("infra-error", f"{label}: runner lost mid-job")
    if step == "check":
        return _classify_check(label, exit_code, signal, timed_out, timeout_s)
    return _classify_infra_step(label, exit_code, signal, timed_out, timeout_s)


def _timeout_text(timeout_s: float | None) -> str:
    return f"timed out after {timeout_s:g}s" if timeout_s is not None else "timed out"


def _classify_infra_step(
    label: str, exit_code: int | None, signal: int | None, timed_out: bool, timeout_s: float | None
) -> Outcome:
    if timed_out:
        return Outcome("infra-error", f"{label} {_timeout_text(timeout_s)}")
    if signal is not None:
        return Outcome("infra-error", f"{label} killed by {signal_name(signal)}")
    if exit_code == 0:
        return Outcome("success", f"{label} passed")
    return Outcome("infra-error", f"{label} exited {exit_code}")


def _classify_check(
    label: str, exit_code: int | None, signal: int | None, timed_out: bool, timeout_s: float | None
) -> Outcome:
    if timed_out:
        return Outcome("failure", f"{label} {_timeout_text(timeout_s)}")
    if signal is None and exit_code is not None and exit_code > 128:
        signal = exit_code - 128  # a shell reporting its child's signal
        if signal in INFRA_SIGNALS:
            return Outcome("infra-error", f"{label} exited {exit_code}: {_killed(signal)}")
        return Outcome("failure", f"{label} exited {exit_code}: crashed with {signal_name(signal)}")
    if signal is not None:
        if signal in INFRA_SIGNALS:
            return Outcome("infra-error", f"{label} {_killed(signal)}")
        return Outcome("failure", f"{label} crashed with {signal_name(signal)}")
    return _classify_check_exit(label, exit_code)


def _killed(signal: int) -> str:
    hint = " (out of memory?)" if signal == signals.SIGKILL else ""
    return f"killed by {signal_name(signal)}{hint}"


def _classify_check_exit(label: str, exit_code: int | None) -> Outcome:
    if exit_code == EXIT_PASSED:
        return Outcome("success", f"{label} passed")
    if exit_code == EXIT_FAILED:
        return Outcome("failure", f"{label} failed (exit 1: the check saw the bug)")
    if exit_code == EXIT_NO_VERDICT:
        return Outcome("infra-error", f"{label} gave no verdict (exit 2: infrastructure)")
    if exit_code == EXIT_INCONCLUSIVE:
        return Outcome(
            "inconclusive",
            f"{label} inconclusive (exit 77: it could not observe what it checks; see its log)",
        )
    if exit_code in (EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND):
        return Outcome("infra-error", f"{label} could not run its command (exit {exit_code})")
    return Outcome("failure", f"{label} failed (exit {exit_code})")


def overall(verdicts: Iterable[str]) -> Verdict:
    """One verdict for several checks: cancelled, then infra-error, then failure, then
    inconclusive win."""
    seen = set(verdicts)
    order: tuple[Verdict, ...] = ("cancelled", "infra-error", "failure", "inconclusive")
    return next((verdict for verdict in order if verdict in seen), "success")


# --------------------------------------------------------------------------- retry policy


@dataclass(frozen=True)
class RetryPolicy:
    """Infra errors are retried up to max_attempts in all, with exponential backoff. A test
    failure is never retried; `reruns` > 0 reruns a failed check that many times, and every
    rerun is marked as one."""

    max_attempts: int = 3
    base_delay_s: float = 30.0
    factor: float = 2.0
    max_delay_s: float = 900.0
    reruns: int = 0


def backoff_s(policy: RetryPolicy, attempt: int) -> float:
    """Delay before attempt `attempt + 1`, after attempt `attempt` (1-based) hit an infra error."""
    delay = policy.base_delay_s * policy.factor ** max(0, attempt - 1)
    return float(min(policy.max_delay_s, delay))


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    delay_s: float
    reason: str


def next_attempt(policy: RetryPolicy, verdict: str, attempt: int) -> RetryDecision:
    """Whether a run whose attempt `attempt` ended with `verdict` is tried again."""
    if verdict != "infra-error":
        return RetryDecision(False, 0.0, f"{verdict} is final (only infra errors are retried)")
    if attempt >= policy.max_attempts:
        why = f"gave up after {attempt} of {policy.max_attempts} attempts"
        return RetryDecision(False, 0.0, why)
    delay = backoff_s(policy, attempt)
    why = f"infra error: attempt {attempt + 1} of {policy.max_attempts} in {delay:g}s"
    return RetryDecision(True, delay, why)


def should_rerun(policy: RetryPolicy, verdict: str, reruns_done: int) -> bool:
    """A test failure is rerun only when configured (and then marked as a rerun)."""
    return verdict == "failure" and reruns_done < policy.reruns


# --------------------------------------------------------------------------- reporting


def reused_detail(state: str, run_id: str, detail: str = "") -> str:
    """The detail of a reused row starts with the reused verdict: 'success: ...'."""
    tail = f" ({detail})" if detail else ""
    return f"{state}: reused from run {run_id}, same tree{tail}"


def reused_verdict(detail: str) -> str | None:
    head = detail.split(":", 1)[0]
    return head if head in REUSABLE else None


def check_run_status(state: str, detail: str = "") -> tuple[str, str | None]:
    """(status, conclusion) of the GitHub check run for a CI row."""
    if state in ("queued", "running"):
        return ("queued" if state == "queued" else "in_progress"), None
    conclusions = {
        "success": "success",
        "failure": "failure",
        "infra-error": "failure",
        "inconclusive": "neutral",
        "cancelled": "cancelled",
        "waiting-approval": "action_required",
    }
    if state == "reused":
        return "completed", conclusions.get(reused_verdict(detail) or "", "neutral")
    return "completed", conclusions.get(state, "neutral")
