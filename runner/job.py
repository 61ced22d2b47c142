"""One hardware job on a runner: materialize the exact tree, run setup, run the checks, keep
the artifacts. Results go out through the callbacks in `JobContext` as each check ends, so the
service shows them live; runner/task.py supplies those callbacks (and the Redis bookkeeping).

A check already concluded (success or failure) in an earlier attempt of the same run is not run
again: an infrastructure retry repeats only what did not get a verdict.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from bot.ci.spec import JobPayload, StepSpec
from bot.core.ci_plan import (
    REUSABLE,
    UPSTREAM_VARIANT,
    Outcome,
    StepKind,
    ci_key,
    classify_outcome,
    should_rerun,
)
from bot.git.runner import GitError
from runner import job_python
from runner.job_python import python_dir
from runner.sandbox import Isolation, Sandbox, StepUser, unreachable
from runner.steps import CancelCheck, RunLog, StepResult, reap_orphans, run_step
from runner.tree import (
    Materialized,
    TreeError,
    clone_lock,
    clone_path,
    git_dir_of,
    materialize,
    remove_entry,
    step_git_env,
    write_git_file,
)


@dataclass(frozen=True)
class CheckResult:
    key: str  # ci_key(kind, check, variant)
    name: str
    variant: str  # "" or "upstream" (A/B)
    verdict: str  # success | failure | infra-error | cancelled
    reason: str
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    reruns: int = 0

    @property
    def final(self) -> bool:
        """A verdict about the code (or an inconclusive measurement of it), which no retry
        changes."""
        return self.verdict in REUSABLE


# What a step gets of the runner host's environment when nothing else is configured: enough to
# find programs and write temporary files. Steps run code nobody here wrote, so the runner's own
# variables (the broker URL with its password, GitHub credentials, carry's settings) never reach
# them; a host passes more by name with CARRY_RUNNER_PASS_ENV. The accelerator's device
# selection and library path are no secrets, and a check cannot reach its device without them.
# HOME and the Python environment (VIRTUAL_ENV, first on PATH) are the job's own (home_dir,
# job_python), never the runner's.
BASE_STEP_ENV = (
    *("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME"),
    *("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "HABANA_VISIBLE_DEVICES"),
    "HABANA_VISIBLE_MODULES",
)


def host_env_for_steps(host: Mapping[str, str], passed: Iterable[str] = ()) -> dict[str, str]:
    """The part of the runner host's environment that setup and check steps receive."""
    names = (*BASE_STEP_ENV, *passed)
    return {name: host[name] for name in names if name in host}


def shared_dirs(env: Mapping[str, str]) -> list[Path]:
    """The directories that variables passed by name (CARRY_RUNNER_PASS_ENV) name, such as a
    model cache in HF_HOME: jobs share them on purpose, so they stay writable where a
    sandbox makes the host's files read-only."""
    passed = (env[name] for name in env if name not in BASE_STEP_ENV)
    return [Path(value) for value in passed if os.path.isabs(value) and os.path.isdir(value)]


@dataclass
class JobContext:
    workdir: Path
    log: RunLog
    cancelled: CancelCheck
    on_check: Callable[[CheckResult], None]
    on_phase: Callable[[str], None] = lambda phase: None
    done: Mapping[str, CheckResult] = field(default_factory=dict)  # from earlier attempts
    env: Mapping[str, str] = field(default_factory=dict)  # host_env_for_steps(): all they get
    attempt: int = 1
    sandbox: Sandbox = field(default_factory=lambda: Sandbox(Isolation.NONE, "none configured"))
    networked: frozenset[tuple[str, str]] = frozenset()  # (step kind, name): host network


@dataclass(frozen=True)
class JobResult:
    checks: tuple[CheckResult, ...]
    artifacts: tuple[str, ...] = ()
    tree: str | None = None

    @property
    def unresolved(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if not c.final)


class _Stop(Exception):
    """Ends the current phase: every check still pending gets `outcome`."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.reason)
        self.outcome = outcome


def execute(job: JobPayload, ctx: JobContext) -> JobResult:
    """Runs the job; never raises for a step's failure (that is a result)."""
    pending = [c for c in job.checks if ci_key(job.kind, c.name) not in ctx.done]
    pending_ab = [
        c for c in job.checks if c.ab and ci_key(job.kind, c.name, UPSTREAM_VARIANT) not in ctx.done
    ]
    results: dict[str, CheckResult] = dict(ctx.done)
    path = clone_path(ctx.workdir, job.tree.upstream_url)
    tree: str | None = None
    artifacts: list[str] = []
    try:
        with clone_lock(path, ctx.cancelled):
            _reap(ctx.log, path)
            if pending:
                tree = _phase(job, ctx, path, pending, "", results)
                artifacts += _collect_artifacts(job, ctx, path, "")
            if pending_ab:
                _phase(job, ctx, path, pending_ab, UPSTREAM_VARIANT, results)
                artifacts += _collect_artifacts(job, ctx, path, UPSTREAM_VARIANT)
            _forget_tmp(ctx.log, path)
    except TreeError as err:  # cancelled while waiting for the clone lock
        _conclude_all(job, ctx, [*pending, *pending_ab], results, _tree_outcome(ctx, err))
    order = [ci_key(job.kind, c.name) for c in job.checks]
    order += [ci_key(job.kind, c.name, UPSTREAM_VARIANT) for c in job.checks if c.ab]
    return JobResult(tuple(results[k] for k in order if k in results), tuple(artifacts), tree)


def steps_dir(clone: Path) -> Path:
    """Where the steps running in a clone are recorded (see steps.reap_orphans)."""
    return clone.with_name(clone.name + ".steps")


def home_dir(clone: Path) -> Path:
    """The steps' HOME while a job runs in `clone`. It is made anew for each job (and each
    A/B phase): what one job's code leaves in its home (a Python user site with a .pth file,
    shell or tool dotfiles, caches) never reaches the next job's steps, nor the runner."""
    return clone.with_name(clone.name + ".home")


def tmp_dir(clone: Path) -> Path:
    """The steps' own /tmp while a job runs in `clone` (TMPDIR, and /tmp itself where the
    sandbox has a mount namespace): made anew for each job and A/B phase and removed after
    the job, so that nothing one job leaves there is seen by the next or stays on the host."""
    return clone.with_name(clone.name + ".tmp")


def _fresh_home(clone: Path) -> None:
    for what, where, mode in (("home", home_dir(clone), 0o700), ("/tmp", tmp_dir(clone), 0o700)):
        try:
            remove_entry(where)
            where.mkdir(mode=mode)
        except OSError as err:
            raise _Stop(
                Outcome("infra-error", f"cannot make the steps' {what} {where} anew: {err}")
            ) from err


def _forget_tmp(log: RunLog, clone: Path) -> None:
    try:
        remove_entry(tmp_dir(clone))
    except OSError as err:
        log.note(f"[carry] cannot remove the steps' /tmp {tmp_dir(clone)}: {err}")


def _fresh_python(clone: Path) -> None:
    """The steps' own virtual environment (job_python), made anew like their home."""
    where = python_dir(clone)
    try:
        remove_entry(where)
        job_python.make(where)
    except OSError as err:
        raise _Stop(
            Outcome("infra-error", f"cannot make the steps' Python {where} anew: {err}")
        ) from err


def _reap(log: RunLog, clone: Path) -> None:
    """Under the clone lock, any recorded step belongs to a job whose runner died."""
    killed = reap_orphans(steps_dir(clone))
    if killed:
        log.note(f"[carry] killed {len(killed)} process(es) left by a lost runner: {killed}")


def reap_idle(workdir: Path) -> list[int]:
    """At runner start: reaps the leftovers of every clone that no running job holds."""
    killed: list[int] = []
    for clone in sorted((workdir / "clones").glob("*.steps")):
        path = clone.with_name(clone.name.removesuffix(".steps"))
        with suppress(TreeError), clone_lock(path, lambda: "busy", poll_s=0):
            killed += reap_orphans(clone)
    return killed


def _phase(
    job: JobPayload,
    ctx: JobContext,
    path: Path,
    checks: list[StepSpec],
    variant: str,
    results: dict[str, CheckResult],
) -> str | None:
    """Materialize (plain upstream for the A/B variant), set up, run `checks`."""
    try:
        ctx.on_phase("materializing the plain upstream tree" if variant else "materializing")
        user = ctx.sandbox.user
        if user is not None and path.exists():  # the runner's git works on its own files only
            hand_over(path, os.geteuid(), os.getegid())
        built = _materialize(job, ctx, path, plain_upstream=bool(variant))
        write_git_file(path)
        _fresh_home(path)
        _fresh_python(path)
        if user is not None:
            _hand_to_step_user(ctx, path, user)
            hand_over(home_dir(path), user.uid, user.gid)
            hand_over(tmp_dir(path), user.uid, user.gid)
            hand_over(python_dir(path), user.uid, user.gid)
        for step in job.setup:
            _setup(job, ctx, built, step, variant)
        for check in checks:
            _check(job, ctx, built, check, variant, results)
        return built.tree
    except _Stop as stop:
        remaining = [c for c in checks if ci_key(job.kind, c.name, variant) not in results]
        _conclude_all(job, ctx, remaining, results, stop.outcome, variant)
        return None


def _hand_to_step_user(ctx: JobContext, path: Path, user: StepUser) -> None:
    blocked = unreachable(path, user)
    if blocked is not None:
        mode = f"{blocked.stat().st_mode & 0o777:o}"
        raise _Stop(
            Outcome(
                "infra-error",
                f"the step user {user.name} cannot enter {blocked} (mode {mode}), above the "
                f"tree {path}: put the runner's workdir where it can",
            )
        )
    hand_over(path, user.uid, user.gid)
    ctx.log.note(
        f"[carry] the tree belongs to {user.name} for the steps (its git directory "
        f"{git_dir_of(path)} stays root's, outside the tree)"
    )


def hand_over(tree: Path, uid: int, gid: int) -> None:
    """Makes `uid` the owner of everything in `tree`. Links are changed themselves, never
    followed: a step's symlink to a file of the host gives it nothing. (The clone's git
    directory is not in the tree: it stays the runner's.)"""
    os.lchown(tree, uid, gid)
    for root, dirs, files in os.walk(tree):
        for name in (*dirs, *files):
            os.lchown(os.path.join(root, name), uid, gid)


def _materialize(
    job: JobPayload, ctx: JobContext, path: Path, plain_upstream: bool
) -> Materialized:
    try:
        built = materialize(job.tree, path, ctx.log.note, plain_upstream=plain_upstream)
    except (TreeError, GitError, OSError, subprocess.SubprocessError) as err:  # fetch timeout
        ctx.log.note(f"[carry] materialize failed: {err}")
        raise _Stop(_tree_outcome(ctx, err)) from err
    what = "plain upstream" if plain_upstream else f"upstream + {len(built.patches)} patch(es)"
    ctx.log.note(f"[carry] tree {built.tree} verified ({what}) at {built.head}")
    return built


def _tree_outcome(ctx: JobContext, err: Exception) -> Outcome:
    reason = ctx.cancelled()
    if reason is not None:
        return classify_outcome("materialize", None, cancelled=reason)
    return Outcome("infra-error", f"materialize: {err}")


def _setup(
    job: JobPayload, ctx: JobContext, built: Materialized, step: StepSpec, variant: str
) -> None:
    ctx.on_phase(f"setup {step.name}" + (f" ({variant})" if variant else ""))
    result = _run(job, ctx, built, "setup", step, variant)
    outcome = _classify("setup", step, result)
    if outcome.verdict != "success":
        raise _Stop(outcome)


def _check(
    job: JobPayload,
    ctx: JobContext,
    built: Materialized,
    check: StepSpec,
    variant: str,
    results: dict[str, CheckResult],
) -> None:
    key = ci_key(job.kind, check.name, variant)
    ctx.on_phase(f"check {check.name}" + (f" ({variant})" if variant else ""))
    reruns = 0
    while True:
        result = _run(job, ctx, built, "check", check, variant)
        outcome = _classify("check", check, result)
        if outcome.verdict == "cancelled":
            raise _Stop(outcome)
        if not should_rerun(job.retry, outcome.verdict, reruns):
            break
        reruns += 1
        ctx.log.note(f"[carry] {outcome.reason}; rerun {reruns} of {job.retry.reruns}")
    reason = outcome.reason
    if reruns:
        reason = f"rerun {reruns} of {job.retry.reruns} after a test failure: {reason}"
    if variant:
        reason = f"A/B on plain upstream: {reason}"
    checked = CheckResult(
        key,
        check.name,
        variant,
        outcome.verdict,
        reason,
        result.exit_code,
        result.signal,
        result.timed_out,
        result.duration_s,
        reruns,
    )
    results[key] = checked
    ctx.on_check(checked)


def _classify(kind: StepKind, step: StepSpec, result: StepResult) -> Outcome:
    return classify_outcome(
        kind,
        result.exit_code,
        result.signal,
        result.timed_out,
        name=step.name,
        timeout_s=step.timeout_s,
        cancelled=result.cancelled,
    )


def _run(
    job: JobPayload,
    ctx: JobContext,
    built: Materialized,
    kind: StepKind,
    step: StepSpec,
    variant: str,
) -> StepResult:
    env = {**ctx.env, **_job_env(job, ctx, built, step, variant), **step.env}
    network = (kind, step.name) in ctx.networked
    ctx.log.note(f"[carry] $ {' '.join(step.run)}  (timeout {step.timeout_s:g}s)")
    ctx.log.note(f"[carry] {step.name} {ctx.sandbox.describe(network=network)}")
    result = run_step(
        ctx.sandbox.wrap(
            step.run,
            network=network,
            tree=built.path,
            writable=[home_dir(built.path), python_dir(built.path), *shared_dirs(ctx.env)],
            protected=[git_dir_of(built.path)],
            private_tmp=tmp_dir(built.path),
        ),
        cwd=built.path,
        env=env,
        timeout_s=step.timeout_s,
        log=ctx.log,
        cancelled=ctx.cancelled,
        state_dir=steps_dir(built.path),
        cgroups=ctx.sandbox.cgroups,
        memory_mb=ctx.sandbox.memory_mb,
    )
    ctx.log.note(f"[carry] {step.name}: {_ending(result)} after {result.duration_s:.1f}s")
    return result


def _ending(result: StepResult) -> str:
    if result.cancelled:
        return f"cancelled ({result.cancelled})"
    if result.timed_out:
        return "timed out, process group killed"
    if result.out_of_memory and result.signal is not None:
        return f"killed by signal {result.signal}: out of memory (the step's memory limit)"
    if result.signal is not None:
        return f"killed by signal {result.signal}"
    return f"exit {result.exit_code}"


def _job_env(
    job: JobPayload, ctx: JobContext, built: Materialized, step: StepSpec, variant: str
) -> dict[str, str]:
    return {
        **job_python.step_env(python_dir(built.path), ctx.env),
        "HOME": str(home_dir(built.path)),
        "TMPDIR": str(tmp_dir(built.path)),
        "CARRY_RUN_ID": job.run_id,
        "CARRY_SERIES": job.series_id,
        "CARRY_RUNNER_KIND": job.kind,
        "CARRY_TREE_KEY": job.tree_key,
        "CARRY_TREE": built.tree,
        "CARRY_UPSTREAM_SHA": job.tree.upstream_sha,
        "CARRY_PR_HEAD_SHA": job.tree.downstream_sha,
        "CARRY_STEP": step.name,
        "CARRY_VARIANT": variant,
        "CARRY_ATTEMPT": str(ctx.attempt),
        "CARRY_ARTIFACTS_DIR": str(artifacts_dir(ctx.workdir, job.run_id)),
        # The clone's git directory stays the runner's (a step user's git would refuse it as
        # another user's repository) and read-only to the steps: what a job could plant there
        # (a replace ref, an object) would change the tree the next job builds and tests.
        **step_git_env(),
    }


def _conclude_all(
    job: JobPayload,
    ctx: JobContext,
    checks: list[StepSpec],
    results: dict[str, CheckResult],
    outcome: Outcome,
    variant: str | None = None,
) -> None:
    for check in checks:
        for var in (variant,) if variant is not None else _variants(check):
            key = ci_key(job.kind, check.name, var)
            if key in results:
                continue
            result = CheckResult(key, check.name, var, outcome.verdict, outcome.reason)
            results[key] = result
            ctx.on_check(result)


def _variants(check: StepSpec) -> tuple[str, ...]:
    return ("", UPSTREAM_VARIANT) if check.ab else ("",)


# --------------------------------------------------------------------------- artifacts


def artifacts_dir(workdir: Path, run_id: str) -> Path:
    return workdir / "artifacts" / run_id


def _collect_artifacts(job: JobPayload, ctx: JobContext, tree: Path, variant: str) -> list[str]:
    """Copies files matching the job's globs (relative to the tree, never outside it) into
    workdir/artifacts/<run_id>/ (<run_id>/upstream/ for the A/B variant), before the next
    checkout cleans the tree; returns their paths relative to workdir/artifacts/<run_id>."""
    base = artifacts_dir(ctx.workdir, job.run_id)
    target = base / variant if variant else base
    copied: list[str] = []
    root = tree.resolve()
    for pattern in job.artifacts:
        for found in sorted(glob.glob(pattern, root_dir=tree, recursive=True)):
            source = (tree / found).resolve()
            if not source.is_file() or not source.is_relative_to(root):
                continue
            relative = source.relative_to(root)
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / relative)
            copied.append(str((target / relative).relative_to(base)))
    if copied:
        ctx.log.note(f"[carry] kept {len(copied)} artifact(s) in {target}")
    return copied
