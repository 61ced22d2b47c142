"""The hardware CI harness (tests/integration/test_hardware_ci.py and the tests that start
real runners): the runners' own config file, a world of real upstream and downstream
repositories, runner processes (`python -m runner.cli`) started and stopped, and the waits and
reads a test of a run needs. The fixtures that hold these stay in the test module."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.utils.nodenames import host_format

from bot.ci.spec import StepSpec, TreeSpec
from bot.core.ci_plan import ACTIVE_STATES, FINAL_STATES, RetryPolicy
from bot.core.policy import series_digest
from bot.core.state import CiState
from bot.store import runner_channel as channel
from bot.store.runners import runlog, runners
from bot.store.series import history, load_series
from harness.gitrepo import RepoBuilder, git
from harness.job_keys import job_issuer
from harness.pushes import push
from tests.support.paths import REPO_ROOT
from workers.ci import requests as ci

SERIES = "s1"
TRUSTED = ["ada"]
PATCH_SUBJECT = "fix: add fixed.txt"


# --------------------------------------------------------------------------- polling


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """A live process (a zombie waiting for its parent counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in ("Z", "X")


def host_pid(ns_pid: int, marker: str) -> int:
    """The host's pid of a live step process that knows itself as `ns_pid` ($$ in the step's
    own PID namespace), found by `marker` (NAME=value) in its environment."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        nspid = next(
            (line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), []
        )
        if marker.encode() in environ and nspid and int(nspid[-1]) == ns_pid:
            return int(nspid[0])
    raise AssertionError(f"no live process with {marker} is pid {ns_pid} in its namespace")


def runner_process_of(pid: int) -> int:
    """The runner (pool) process that started a step: its nearest ancestor running runner.cli
    (the step itself cannot see it from its own PID namespace)."""
    while pid > 1:
        if b"runner.cli" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat[stat.rfind(")") + 2 :].split()[1])
    raise AssertionError("the step has no runner process among its ancestors")


# --------------------------------------------------------------------------- repositories


@dataclass
class RunnerConfig:
    """The runners' own config file: `runners.<kind>` with the setup and checks that the
    targets of a test name (a runner refuses any other command)."""

    path: Path
    runners: dict[str, dict[str, Any]] = field(default_factory=dict)
    networked: set[str] = field(default_factory=set)  # steps whose config says network: true
    # the repositories a runner may fetch: its config's upstream for series s1, and its
    # downstream repository (CARRY_DOWNSTREAM_GIT_URL of the runners start_runners starts)
    upstream_url: str = "https://example.invalid/up.git"
    downstream_url: str = "https://example.invalid/down.git"

    def serve(self, upstream_url: str, downstream_url: str) -> None:
        self.upstream_url, self.downstream_url = upstream_url, downstream_url
        self._write()

    def add_kind(self, kind: str) -> None:
        workdir = str(self.path.parent / "runners")
        self.runners.setdefault(kind, {"queue": f"hw.{kind}", "workdir": workdir, "checks": {}})
        self._write()

    def allow(self, targets: list[ci.CiTarget]) -> None:
        """Makes the targets' setup the kind's setup and adds their checks."""
        for t in targets:
            self.add_kind(t.kind)
            runner = self.runners[t.kind]
            runner["setup"] = [{"name": s.name, **self._command(s)} for s in t.setup]
            runner["checks"].update({c.name: self._command(c) for c in t.checks})
        self._write()

    def set(self, kind: str, **settings: Any) -> None:
        """Runner settings of a kind, e.g. sandbox="none"."""
        self.add_kind(kind)
        self.runners[kind].update(settings)
        self._write()

    def _command(self, step: StepSpec) -> dict[str, Any]:
        return {**_command(step), **({"network": True} if step.name in self.networked else {})}

    def _write(self) -> None:
        config = {
            "downstream": {"repo": "carry/downstream"},
            "upstreams": {"engine": {"url": self.upstream_url, "repo": "up/up"}},
            "series": [
                {"id": sid, "upstream": "engine", "base": {"branch": "main"}, "patches": sid}
                for sid in ("s1", "s2")
            ],
            "runners": self.runners,
        }
        scratch = self.path.with_suffix(".tmp")  # a runner never reads half a file
        scratch.write_text(json.dumps(config, indent=2))
        scratch.replace(self.path)


def _command(step: StepSpec) -> dict[str, Any]:
    assert step.timeout_s == int(step.timeout_s), "the config holds whole seconds"
    return {"run": list(step.run), "timeout_s": int(step.timeout_s), "env": dict(step.env)}


@dataclass
class World:
    """An upstream repository, carry's downstream repository with series s1 (one patch that
    adds fixed.txt) on its PR branch, and a scratch clone that computes expected trees the
    way the engine would; `runner_config` is what the runners may run."""

    root: Path
    runner_config: RunnerConfig
    upstream: RepoBuilder = field(init=False)
    downstream: RepoBuilder = field(init=False)
    patches: list[bytes] = field(init=False)
    heads: int = 0

    def __post_init__(self) -> None:
        self.upstream = RepoBuilder(self.root / "upstream")
        self.upstream.commit("base", {"app.txt": "hello\n"})
        self.upstream.checkout("main", new_branch="fix")
        self.upstream.commit(PATCH_SUBJECT, {"fixed.txt": "fixed\n"})
        files = self.upstream.format_patch("main..fix", self.root / "patchfiles")
        self.upstream.checkout("main")
        self.patches = [f.read_bytes() for f in files]
        self.downstream = RepoBuilder(self.root / "downstream")
        self.downstream.write(f"patches/{SERIES}/series", "".join(f"{f.name}\n" for f in files))
        for f in files:
            self.downstream.write(f"patches/{SERIES}/{f.name}", f.read_bytes())
        self.downstream.commit("carry: series s1")
        self.downstream.git("branch", "carry/s1")
        RepoBuilder(self.root / "scratch")
        self.runner_config.serve(str(self.upstream.path), str(self.downstream.path))

    def head(self, files: dict[str, str | bytes | None] | None = None) -> str:
        """A new upstream head (commits on main)."""
        self.heads += 1
        return self.upstream.commit(f"upstream change {self.heads}", files or {})

    def tree(self, upstream_sha: str, *, expected_tree: str | None = None) -> TreeSpec:
        return TreeSpec(
            upstream_url=str(self.upstream.path),
            upstream_sha=upstream_sha,
            downstream_url=str(self.downstream.path),
            downstream_ref="refs/heads/carry/s1",
            downstream_sha=self.downstream.head("carry/s1"),
            patches_dir=f"patches/{SERIES}",
            series_digest=series_digest(enumerate_patches(self.patches)),
            expected_tree=expected_tree or self.expected_tree(upstream_sha),
        )

    def expected_tree(self, upstream_sha: str) -> str:
        scratch = self.root / "scratch"
        git(scratch, "fetch", "-q", str(self.upstream.path), upstream_sha)
        git(scratch, "checkout", "-q", "--detach", "--force", upstream_sha)
        for index, patch in enumerate(self.patches):
            (self.root / f"p{index}.patch").write_bytes(patch)
            git(scratch, "am", "-q", "-3", "--keep-cr", str(self.root / f"p{index}.patch"))
        return git(scratch, "rev-parse", "HEAD^{tree}")


# --------------------------------------------------------------------------- runners


@dataclass
class Runner:
    kind: str
    name: str
    proc: subprocess.Popen[bytes]
    workdir: Path
    log: Path

    def kill_host(self) -> None:
        """SIGKILL to the worker's whole process group: main process and pool child."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def spawn_runner(kind: str, name: str, url: str, tmp_path: Path, extra: dict[str, str]) -> Runner:
    name = host_format(name)
    workdir = tmp_path / "runners" / name
    workdir.mkdir(parents=True)
    log = tmp_path / f"{name}.log"
    env = {**os.environ, "REDIS_URL": url, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("CARRY_CONFIG", None)
    env.update(extra)
    argv = [sys.executable, "-m", "runner.cli", "--kind", kind, "--name", name]
    argv += ["--workdir", str(workdir), "--loglevel", "INFO"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Runner(kind, name, proc, workdir, log)


def runners_ready(client: redis.Redis, batch: list[Runner], names: set[str]) -> bool:
    for runner in batch:
        if runner.proc.poll() is not None:
            tail = runner.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"runner {runner.name} exited {runner.proc.returncode}:\n{tail}")
    return {r["name"] for r in runners(client) if r.get("ready") == "1"} >= names


def stop_runner(runner: Runner) -> None:
    if runner.proc.poll() is not None:
        return
    os.killpg(runner.proc.pid, signal.SIGTERM)
    try:
        runner.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(runner.proc.pid, signal.SIGKILL)
        runner.proc.wait(timeout=10)


# --------------------------------------------------------------------------- helpers


def sh(script: str) -> tuple[str, ...]:
    return ("sh", "-c", script)


def target(
    kind: str,
    *checks: StepSpec,
    setup: tuple[StepSpec, ...] = (),
    retry: RetryPolicy | None = None,
    artifacts: tuple[str, ...] = (),
) -> ci.CiTarget:
    policy = retry or RetryPolicy(max_attempts=3, base_delay_s=0.2, max_delay_s=1)
    return ci.CiTarget(kind, f"hw.{kind}", setup, checks, artifacts=artifacts, retry=policy)


def request(
    client: redis.Redis,
    app: Celery,
    world: World,
    head: str,
    targets: list[ci.CiTarget],
    *,
    actor: str = "ada",
    debounce_s: float = 0,
    **kwargs: Any,
) -> list[CiState]:
    world.runner_config.allow(targets)
    push(client, SERIES, head, actor, trusted=actor in TRUSTED)  # `actor` created the ref at it
    return ci.request_ci(
        client,
        app,
        SERIES,
        targets,
        world.tree(head),
        issuer=job_issuer(),
        debounce_s=debounce_s,
        **kwargs,
    )


def finished(client: redis.Redis, run_id: str, timeout: float = 30) -> dict[str, Any]:
    """Waits for the run to end, for the runner's reports of it (history, rows) to be applied
    by the service, and for its CI rows to show that."""

    def done() -> dict[str, Any] | None:
        info = ci.run_info(client, run_id)
        if not info or info["state"] not in FINAL_STATES:
            return None
        if channel.pending_reports(client, info["kind"]):
            return None
        state = load_series(client, SERIES)
        own = [row for row in state.ci.values() if row.run_id == run_id] if state else []
        return None if any(row.state in ACTIVE_STATES for row in own) else info

    return wait_for(done, f"run {run_id} to finish", timeout)


def state_of(client: redis.Redis, run_id: str) -> str:
    info = ci.run_info(client, run_id)
    return info["state"] if info else "missing"


def events(client: redis.Redis, kind: str, run_id: str | None = None) -> list[dict[str, Any]]:
    found = [e for e in history(client, SERIES, limit=1000) if e["kind"] == kind]
    if run_id is None:
        return found
    return [e for e in found if run_id in (e["data"].get("run_id"), *e["data"].get("run_ids", []))]


def log_text(client: redis.Redis, run_id: str) -> str:
    return "\n".join(f"{e['stream']}: {e['text']}" for e in runlog(client, run_id, limit=5000))


def reported(client: redis.Redis) -> list[dict[str, Any]]:
    """The CI rows handed to the planner (ChecksRecorded events queued as carry.ingest tasks on
    the service's queue), oldest first (the queue is a Redis list that kombu pushes on the
    left): each becomes a carry.ci.report task there."""
    sent = []
    for raw in reversed(client.lrange("carry", 0, -1)):
        message = json.loads(raw)
        if message["headers"]["task"] == "carry.ingest":
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            if args[0]["kind"] == "checks_recorded":
                sent.extend(args[0]["rows"])
    return sent


def rows(client: redis.Redis) -> dict[str, CiState]:
    state = load_series(client, SERIES)
    assert state is not None
    return state.ci


def enumerate_patches(patches: list[bytes]) -> Iterator[tuple[str, bytes]]:
    return ((f"{i:04d}.patch", data) for i, data in enumerate(patches))
