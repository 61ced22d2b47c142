"""The job payload: everything a runner needs to test one exact tree, as JSON-safe values.

The service (workers/ci/requests.py) builds it from the config and the engine's result; a
runner host (runner/job.py) executes it. It is self-contained, so a run can be understood and
repeated from its payload alone. Shape (version 1)::

    {"version": 1, "run_id": "gaudi-3f9c...", "series_id": "...", "kind": "gaudi",
     "queue": "hw.gaudi", "tree_key": "<sha256>", "head_sha": "<upstream sha>",
     "tree": {"upstream_url", "upstream_sha", "upstream_ref", "downstream_url",
              "downstream_ref", "downstream_sha", "patches_dir", "series_digest",
              "expected_tree"},
     "setup": [{"name", "run": [argv], "timeout_s", "env": {}}],
     "checks": [{"name", "run": [argv], "timeout_s", "env": {}, "ab": false}],
     "artifacts": ["glob relative to the tree", ...],
     "retry": {"max_attempts", "base_delay_s", "factor", "max_delay_s", "reruns"},
     "budget": {"queued", "running"},
     "limits": {"max_lines", "max_bytes", "max_line_bytes", "tail_lines"},
     "requested_at": "2026-01-01T00:00:00Z", "force": false, "purpose": "head"}
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from bot.config import Command, Runner
from bot.core.ci_plan import Budget, RetryPolicy

PAYLOAD_VERSION = 1


@dataclass(frozen=True)
class StepSpec:
    """A setup step or a check: an argv (no shell), a timeout and extra environment."""

    name: str
    run: tuple[str, ...]
    timeout_s: float = 3600
    env: Mapping[str, str] = field(default_factory=dict)
    ab: bool = False  # checks only: also run it on plain upstream (A/B)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "run": list(self.run),
            "timeout_s": self.timeout_s,
            "env": dict(self.env),
            "ab": self.ab,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepSpec:
        return cls(
            name=str(data["name"]),
            run=tuple(str(a) for a in data["run"]),
            timeout_s=float(data.get("timeout_s", 3600)),
            env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
            ab=bool(data.get("ab", False)),
        )


@dataclass(frozen=True)
class TreeSpec:
    """The exact tree: an upstream commit plus the series read from carry's PR branch.

    `expected_tree` is the tree SHA the engine computed for upstream + series; the runner
    rebuilds the tree with `git am -3` and refuses to test anything else. `series_digest`
    identifies the series content in the tree key (e.g. the rebase event's digest); the runner
    does not recompute it, the tree comparison is the exactness check.
    """

    upstream_url: str
    upstream_sha: str
    downstream_url: str
    downstream_ref: str  # carry's PR branch, e.g. refs/heads/carry/async-inputs-main
    downstream_sha: str  # the PR head SHA: the patches are read from it
    patches_dir: str  # e.g. patches/async-inputs-main (holds `series` and the patch files)
    series_digest: str
    expected_tree: str
    upstream_ref: str | None = None  # fetched when the server refuses a bare SHA
    # The series as downstream_sha holds it, in order: (file name, base64 of its bytes). The
    # runner then needs no access to the downstream repository, which may be private (runners
    # hold no credential); the tree comparison still proves them. None in a job from before
    # carry sent them, or a spec only kept for `/carry retest`: the runner fetches downstream.
    patches: tuple[tuple[str, str], ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TreeSpec:
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        carried = data.get("patches")
        values["patches"] = None if carried is None else tuple((str(n), str(b)) for n, b in carried)
        return cls(**values)

    def with_series(self, named: Sequence[tuple[str, bytes]]) -> TreeSpec:
        return replace(self, patches=tuple((n, base64.b64encode(b).decode()) for n, b in named))

    def series(self) -> tuple[list[str], list[bytes]] | None:
        """The patches the job carries (names, bytes), or None when it carries none."""
        if self.patches is None:
            return None
        return [n for n, _ in self.patches], [base64.b64decode(b) for _, b in self.patches]


@dataclass(frozen=True)
class LogLimits:
    """Bounds on what one run writes into its log stream (the head, then a marker and the tail)."""

    max_lines: int = 4000
    max_bytes: int = 2 * 1024 * 1024
    max_line_bytes: int = 2000
    tail_lines: int = 200


@dataclass(frozen=True)
class JobPayload:
    run_id: str
    series_id: str
    kind: str
    queue: str
    tree_key: str
    head_sha: str
    tree: TreeSpec
    setup: tuple[StepSpec, ...] = ()
    checks: tuple[StepSpec, ...] = ()
    artifacts: tuple[str, ...] = ()
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    budget: Budget = field(default_factory=Budget)
    limits: LogLimits = field(default_factory=LogLimits)
    requested_at: str = ""
    force: bool = False
    # head: the tree of a head (its rows are the series' CI rows); bisect: a probe of the
    # range between the last good head and a red one (its result goes to the bisection)
    purpose: str = "head"
    # the series' ci.inconclusive_blocks: an inconclusive check keeps the head from being good
    inconclusive_blocks: bool = False
    version: int = PAYLOAD_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "run_id": self.run_id,
            "series_id": self.series_id,
            "kind": self.kind,
            "queue": self.queue,
            "tree_key": self.tree_key,
            "head_sha": self.head_sha,
            "tree": self.tree.to_dict(),
            "setup": [s.to_dict() for s in self.setup],
            "checks": [c.to_dict() for c in self.checks],
            "artifacts": list(self.artifacts),
            "retry": asdict(self.retry),
            "budget": asdict(self.budget),
            "limits": asdict(self.limits),
            "requested_at": self.requested_at,
            "force": self.force,
            "purpose": self.purpose,
            "inconclusive_blocks": self.inconclusive_blocks,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobPayload:
        version = int(data.get("version", 0))
        if version != PAYLOAD_VERSION:
            raise ValueError(f"job payload version {version} is not {PAYLOAD_VERSION}")
        return cls(
            run_id=str(data["run_id"]),
            series_id=str(data["series_id"]),
            kind=str(data["kind"]),
            queue=str(data["queue"]),
            tree_key=str(data["tree_key"]),
            head_sha=str(data["head_sha"]),
            tree=TreeSpec.from_dict(data["tree"]),
            setup=tuple(StepSpec.from_dict(s) for s in data.get("setup", [])),
            checks=tuple(StepSpec.from_dict(c) for c in data.get("checks", [])),
            artifacts=tuple(str(a) for a in data.get("artifacts", [])),
            retry=RetryPolicy(**data.get("retry", {})),
            budget=Budget(**data.get("budget", {})),
            limits=LogLimits(**data.get("limits", {})),
            requested_at=str(data.get("requested_at", "")),
            force=bool(data.get("force", False)),
            purpose=str(data.get("purpose", "head")),
            inconclusive_blocks=bool(data.get("inconclusive_blocks", False)),
        )


def recipe_digest(setup: Sequence[StepSpec], checks: Sequence[StepSpec]) -> str:
    """A digest of the commands, timeouts and environments: part of the tree key, so a changed
    recipe is tested again instead of reusing a result that another recipe produced."""
    body = {
        "setup": [s.to_dict() for s in setup],
        "checks": sorted((c.to_dict() for c in checks), key=lambda c: c["name"]),
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]


# --------------------------------------------------------------------------- trust boundary


_OBJECT_ID = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")  # SHA-1, or SHA-256
# A ref or a relative path as carry writes them: nothing git could read as an option or a
# refspec, no way up (..), no control characters.
_REF = re.compile(r"(?!-)(?!.*\.\.)[A-Za-z0-9._/+@-]+")
_PATH = re.compile(r"(?![-/])(?!.*\.\.)[A-Za-z0-9._/+@-]+")


def tree_problem(tree: TreeSpec) -> str | None:
    """Why a job's tree is not one carry could have issued (None when its every field has
    the form carry gives it): its values reach git on the runner."""
    for name in ("upstream_sha", "downstream_sha", "expected_tree"):
        value = getattr(tree, name)
        if not _OBJECT_ID.fullmatch(value):
            return f"the tree's {name} {value!r} is not an object id"
    for name in ("upstream_url", "downstream_url"):
        value = getattr(tree, name)
        if not value or value.startswith("-") or not value.isprintable() or " " in value:
            return f"the tree's {name} {value!r} is not a repository git may be given"
    for name, form in (
        ("downstream_ref", _REF),
        ("upstream_ref", _REF),
        ("patches_dir", _PATH),
    ):
        value = getattr(tree, name)
        if value is not None and not form.fullmatch(value):
            return f"the tree's {name} {value!r} is not a ref or path carry writes"
    return None


def job_mismatch(job: JobPayload, kind: str, runner: Runner | None) -> str | None:
    """Why this runner must not run `job`, or None when every command in it is its own.

    The queue is not trusted: a job names checks, and each setup step and check must equal
    (argv, env, timeout) what the runner's own config says for its kind; the setup must be
    the configured setup, in order; its tree's fields must have the forms carry gives them. `ab` is not compared: it reruns the same command on
    plain upstream, and the series, not the runner, chooses it.
    """
    if runner is None:
        return "this runner has no config: it runs only the commands its own config names"
    if job.kind != kind:
        return f"the job is for runner kind {job.kind!r}, this runner is {kind!r}"
    problem = tree_problem(job.tree)
    if problem is not None:
        return problem
    configured = {step.name: step for step in runner.setup}
    for step in job.setup:
        if step.name not in configured:
            return f"setup step {step.name!r} is not in this runner's config"
        differs = _differences(step, configured[step.name])
        if differs:
            return f"{differs} of setup step {step.name!r} differs from this runner's config"
    wanted = [step.name for step in runner.setup]
    if [step.name for step in job.setup] != wanted:
        got = ", ".join(step.name for step in job.setup) or "none"
        return f"the job's setup ({got}) is not this runner's setup ({', '.join(wanted)})"
    for check in job.checks:
        if check.name not in runner.checks:
            return f"check {check.name!r} is not in this runner's config"
        differs = _differences(check, runner.checks[check.name])
        if differs:
            return f"{differs} of check {check.name!r} differs from this runner's config"
    return None


def _differences(step: StepSpec, configured: Command) -> str:
    """The fields (command, env, timeout) in which a step differs from its config entry."""
    differs = []
    if step.run != tuple(configured.run):
        differs.append("command")
    if dict(step.env) != dict(configured.env):
        differs.append("env")
    if step.timeout_s != float(configured.timeout_s):
        differs.append("timeout")
    return " and ".join(differs)
