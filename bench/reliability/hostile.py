"""The hostile check: a check whose code tries everything check code could want, run by a
real runner in every sandbox mode."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import yaml

from bench.reliability.common import (
    FIX,
    ROOT,
    Row,
    Scale,
    _carry_in_this_process,
    _pings,
    free_port,
    run_engine,
)
from bot.ci import runs as ci_runs
from bot.ci.spec import StepSpec, TreeSpec
from bot.core.ci_plan import FINAL_STATES, RetryPolicy
from bot.core.trust import ZERO_SHA, Push
from bot.git.engine import PatchInput
from bot.git.mirror import Mirror
from bot.queue.celery_app import app as celery_app
from bot.store import runner_channel as channel
from bot.store import runners
from bot.store import series as store
from harness.carry_env import SERIES, CarryEnv, wait_for
from harness.gitrepo import RepoBuilder, git
from harness.hostile_script import (
    BROKER_NET_ATTEMPT,
    COMMONDIR_ATTEMPT,
    GIT_LINK_ATTEMPT,
    GIT_SWAP_ATTEMPT,
    HOSTILE_NET_CHECK,
    HOSTILE_NET_SCRIPT,
    HOSTILE_SCRIPT,
    LINGER_ATTEMPT,
    RUNNER_ENV_FILE,
    RUNNER_PTH,
    RUNNER_SITE,
    SHARED_TMP_ATTEMPT,
    SOCKET_ATTEMPT,
)
from harness.unprivileged import (
    NO_USER_NAMESPACES,
    RUNNER_USER,
    ensure_user,
    unavailable,
    unprivileged_argv,
    user_namespaces_unavailable,
)
from runner.sandbox import ACCEPTED_RISK, bwrap_unavailable, namespaces_unavailable
from runner.sandbox_net import host_addresses
from workers.ci import requests as ci
from workers.ci.reports import ReportApplier
from workers.runtime import Runtime

HOSTILE_KIND, HOSTILE_CHECK = "gaudi", "hostile"
# The check's code needs only the standard library: the host's own Python runs it, which a
# step user can (this host's runner Python may sit under root's 0700 home).
HOSTILE_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
HOSTILE_TOKEN = "ghp_hostile" + "7" * 29  # in the runner host's environment, as a careless host has


@dataclass(frozen=True)
class Attempt:
    attempt: str
    achieved: bool
    how: str


def render_attempts(attempts: list[Attempt]) -> str:
    lines = ["| attempt by the check's code | result | how |", "|---|---|---|"]
    for a in attempts:
        lines.append(f"| {a.attempt} | {'ACHIEVED' if a.achieved else 'blocked'} | {a.how} |")
    return "\n".join(lines)


class RefusedAtStart(Exception):
    """The runner refused to start with the scenario's config: the one-line reason."""


def run_hostile_check(
    root: Path,
    *,
    sandbox: str | dict[str, str] = "auto",
    step_user: str = "auto",
    shipped: bool = False,
    unprivileged: bool = False,
) -> list[Attempt]:
    """A runner process (as `carry runner` starts it, sandbox: auto) runs a check whose code
    tries everything check code could want with carry: the broker's password and a GitHub token
    (in the step's environment, in the runner's in /proc), the runner process, the broker
    itself (a write, a queued task), hooks for the next job, a .pth in HOME for the next job's
    Python or the runner's, a .pth in the runner's own Python (and undoing its read-only
    view), a device node, a kernel setting, the host's disks, a host daemon's unix socket, a
    file in /etc; then a job nobody issued is put
    in the runner's queue. One row per attempt, from the check's own output and the marks.
    `sandbox` and `step_user` are the runner's settings (none and runner show what the
    sandbox and the step user keep out). `shipped`: the runner is the shipped configuration's
    Gaudi runner as is (config/carry.yaml: its sandbox and step user, its setup step and check
    with network: true), the network attempts run as its setup step (`pip install -e .` runs
    upstream's build backend) and the others as its check; only the commands, the queue and the
    workdir are the scenario's. `unprivileged`: the runner runs as a user that is not root, as
    compose's do (a root scenario starts it as RUNNER_USER, harness/unprivileged.py; else it is
    this process's own user), with PYTHONNOUSERSITE as compose sets it and an env file holding
    its broker URL in its HOME; the check also tries that HOME (RUNNER_HOME_ATTEMPTS)."""
    password = secrets.token_hex(12)
    port = free_port()
    (root / "redis").mkdir(parents=True)
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            # where a step with the host's network would find it too ("-": an address that
            # went away since, a test's veth pair, is skipped)
            *(f"-{address}" for address in host_addresses()),
            "--save",
            "",
            "--dir",
            str(root / "redis"),
            "--requirepass",
            password,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://:{password}@127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
    wait_for(lambda: _pings(client), 20, "redis-server")
    # The check's script, the marks it reads and the runner's workdir live outside /tmp (bwrap
    # gives the step a private one), where a step user may enter.
    outside_tmp = Path(tempfile.mkdtemp(prefix="carry-hostile-", dir="/var/tmp"))
    outside_tmp.chmod(0o711)
    marks = outside_tmp / "marks"
    marks.mkdir()
    owner = ensure_user(RUNNER_USER) if unprivileged and os.geteuid() == 0 else None
    script = outside_tmp / "hostile.py"
    script.write_text(HOSTILE_SCRIPT)
    # The runner's broker user, as the README sets it up: its own keys, its queue, nothing else.
    runner_password = secrets.token_hex(12)
    channel.set_runner_user(client, HOSTILE_KIND, f"hw.{HOSTILE_KIND}", runner_password)
    user = channel.runner_user(HOSTILE_KIND)
    runner_url = f"redis://{user}:{runner_password}@127.0.0.1:{port}/0"
    env = CarryEnv(root / "carry", url)
    env.carry_patches([FIX])
    victim, common = _planted_repositories(outside_tmp, marks)
    # The runner's HOME, where its own Python would find a .pth; an unprivileged runner's where
    # a deployment keeps it (compose's `carry` has /home/carry), not under /tmp, which steps
    # get a private one of.
    runner_home = root / "runner-home"
    if unprivileged:
        runner_home = Path(tempfile.mkdtemp(prefix="carry-hostile-home-", dir=_home_parent()))
    runner_home.mkdir(mode=0o700, exist_ok=True)
    if unprivileged:  # the runner's own env file, as a careful admin keeps it
        env_file = runner_home / RUNNER_ENV_FILE
        env_file.parent.mkdir(parents=True)
        env_file.write_text(f"REDIS_URL={runner_url}\n")
        env_file.chmod(0o600)
    if owner is not None:  # what is the runner's user's: its HOME, its workdir, the marks
        # that code it runs would leave, and the repositories its git could be turned on
        for path in (runner_home, marks, victim, common, outside_tmp / "runner"):
            path.mkdir(exist_ok=True)
            for below in [path, *path.rglob("*")]:
                os.chown(below, owner.pw_uid, owner.pw_gid, follow_symlinks=False)
    check = StepSpec(
        HOSTILE_CHECK,
        (HOSTILE_PYTHON, "-I", str(script)),
        120,
        {
            "BROKER_PORT": str(port),
            "MARKS": str(marks),
            "RUNNER_SITE": str(RUNNER_SITE),
            "VICTIM": str(victim),
            "COMMON": str(common),
            "TMP_NAME": f"carry-hostile-left-{secrets.token_hex(6)}",
            **({"RUNNER_HOME": str(runner_home)} if unprivileged else {}),
        },
    )
    # What the runner holds: its broker password and (here, to show it is not passed on) a token.
    needles = {"password": runner_password[::-1], "token": HOSTILE_TOKEN[::-1]}
    (marks / "needles.json").write_text(json.dumps(needles))
    net_script = outside_tmp / "hostile_net.py"
    net_script.write_text(HOSTILE_NET_SCRIPT)
    net_check = StepSpec(
        HOSTILE_NET_CHECK,
        (HOSTILE_PYTHON, "-I", str(net_script)),
        60,
        {"BROKER_PORT": str(port), "HOST_ADDRS": " ".join(host_addresses())},
    )
    setup: tuple[StepSpec, ...] = ()
    if shipped:
        runner = shipped_runner()
        check, net_check = _shipped_steps(runner, check, net_check)
        _shipped_config(env, runner, net_check, check, outside_tmp / "runner")
        checks, setup = [check], (net_check,)
    else:
        _hostile_config(env, [check, net_check], sandbox, step_user, outside_tmp / "runner")
        checks = [check, net_check]
    served: subprocess.Popen[bytes] | None = None
    if owner is not None:  # the repositories over git's protocol, as GitHub serves them: the
        # runner's user may not fetch root's from their paths (git's safe.directory)
        served, remote = _git_daemon(env.root)
        config = json.loads(env.config_path.read_text())
        config["upstreams"]["engine"]["url"] = f"{remote}/upstream"
        env.config_path.write_text(json.dumps(config, indent=2))
        env.extra_env["CARRY_DOWNSTREAM_GIT_URL"] = f"{remote}/downstream"  # the runner's
    env.extra_env["GITHUB_TOKEN"] = HOSTILE_TOKEN
    env.extra_env["HOME"] = str(runner_home)
    home_before = _snapshot(runner_home)
    wrap = None
    if unprivileged:
        env.extra_env["PYTHONNOUSERSITE"] = "1"  # as compose's image sets it
    if owner is not None:
        public_key = Path(os.environ["CARRY_JOB_PUBLIC_KEY_PATH"])
        reach = [Path(sys.base_prefix), ROOT, env.root, runner_home, public_key]

        def wrap(line: list[str]) -> list[str]:
            return unprivileged_argv(line, reach, RUNNER_USER)

    daemon = _stand_in_daemon()
    try:
        env.extra_env["REDIS_URL"] = runner_url
        try:
            env.start_runner(HOSTILE_KIND, wrap=wrap)
        except AssertionError as err:  # it exited before it was ready: its log says why
            raise RefusedAtStart(_refusal(str(err))) from None
        del env.extra_env["REDIS_URL"]
        env.extra_env.pop("PYTHONNOUSERSITE", None)
        env.extra_env.pop("CARRY_DOWNSTREAM_GIT_URL", None)
        with _carry_in_this_process(env) as rt:
            applier = ReportApplier(
                rt.redis, celery_app, [HOSTILE_KIND], rt.job_issuer, block_ms=200
            ).start()
            try:
                return _hostile_attempts(env, rt, checks, marks, runner_home, home_before, setup)
            finally:
                applier.stop()
    finally:
        (RUNNER_SITE / RUNNER_PTH).unlink(missing_ok=True)  # if a check got that far
        env.stop()
        if served is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(served.pid, signal.SIGKILL)
            served.wait()
        server.kill()
        server.wait()
        shutil.rmtree(Path(daemon.getsockname()).parent, ignore_errors=True)
        daemon.close()
        shutil.rmtree(outside_tmp, ignore_errors=True)
        if unprivileged:
            shutil.rmtree(runner_home, ignore_errors=True)


def _home_parent() -> str:
    """Where a runner user's HOME is made: /var/lib (as root), else this user's HOME."""
    return "/var/lib" if os.access("/var/lib", os.W_OK) else str(Path.home())


def _git_daemon(base: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`git daemon` serving the repositories under `base` read-only on 127.0.0.1; its URL."""
    port = free_port()
    daemon = subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            "--listen=127.0.0.1",
            f"--port={port}",
            f"--base-path={base}",
            "--export-all",
            "--informative-errors",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # `git daemon` runs git-daemon as its child: killpg ends both
    )

    def listening() -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return True
        return False

    wait_for(listening, 20, "git daemon")
    return daemon, f"git://127.0.0.1:{port}"


def _planted_repositories(where: Path, marks: Path) -> tuple[Path, Path]:
    """Two git directories of the host's that a check points carry's git at: `victim` (where
    it makes .git a link) and `common` (its commondir). Each config runs a command that leaves
    a mark in `marks` if carry's git ever reads it (core.fsmonitor, and a hook)."""
    made = []
    for name in ("victim", "common"):
        repo = where / f"{name}.git"
        subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
        (repo / "config").write_text(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
            f"\tfsmonitor = touch {marks}/{name}-fsmonitor-ran\n\thooksPath = {repo}/hooks\n"
        )
        for hook in ("post-checkout", "reference-transaction"):
            (repo / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {marks}/{name}-{hook}-ran\n")
            (repo / "hooks" / hook).chmod(0o755)
        (repo / "index.lock").write_text("the host's\n")
        made.append(repo)
    # The victim shares the common one's config, as a linked work tree's git directory does:
    # a clean-up that deletes the victim's own config still leaves git reading that one.
    (made[0] / "commondir").write_text(f"{made[1]}\n")
    return made[0], made[1]


def _snapshot(directory: Path) -> dict[str, bytes]:
    """Every file below `directory` (links not followed) and its bytes."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def _lingering(run_id: str) -> list[int]:
    """Live processes whose environment names the run: what a job left running."""
    needle = f"CARRY_RUN_ID={run_id}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
            state = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if needle in environ.split(b"\0") and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def _stand_in_daemon() -> socket.socket:
    """A listening unix socket where host daemons keep theirs (two levels under /tmp), as
    Docker's or a database's would be on a runner host."""
    directory = tempfile.mkdtemp(prefix="carry-hostile-daemon-", dir="/tmp")
    daemon = socket.socket(socket.AF_UNIX)
    daemon.bind(os.path.join(directory, "daemon.sock"))
    daemon.listen()
    return daemon


def _refusal(log: str) -> str:
    """The runner's one-line reason for refusing to start, from its log."""
    lines = [line.strip() for line in log.splitlines() if "refused" in line or "sandbox" in line]
    return lines[-1] if lines else (log.strip().splitlines() or ["no output"])[-1]


def _hostile_config(
    env: CarryEnv,
    checks: list[StepSpec],
    sandbox: str | dict[str, str],
    step_user: str,
    workdir: Path,
) -> None:
    env.write_config()
    config = json.loads(env.config_path.read_text())
    commands = {
        check.name: {
            "run": list(check.run),
            "timeout_s": int(check.timeout_s),
            "env": dict(check.env),
            **({"network": True} if check.name == HOSTILE_NET_CHECK else {}),
        }
        for check in checks
    }
    config["runners"] = {
        HOSTILE_KIND: {
            "queue": f"hw.{HOSTILE_KIND}",
            "workdir": str(workdir),
            "checks": commands,
            "sandbox": sandbox,
            "step_user": step_user,
        }
    }
    env.config_path.write_text(json.dumps(config, indent=2))


SHIPPED_CONFIG = ROOT / "config" / "carry.yaml"


def shipped_runner() -> dict[str, Any]:
    """The shipped configuration's runner of HOSTILE_KIND, as config/carry.yaml says it."""
    runner: dict[str, Any] = yaml.safe_load(SHIPPED_CONFIG.read_text())["runners"][HOSTILE_KIND]
    if len(runner.get("setup", [])) != 1 or len(runner.get("checks", {})) != 1:
        raise AssertionError(
            f"{SHIPPED_CONFIG}: the {HOSTILE_KIND} runner no longer has one setup step and one "
            "check; say here which of its steps the hostile code stands in for"
        )
    return runner


def _shipped_steps(
    runner: dict[str, Any], check: StepSpec, net_check: StepSpec
) -> tuple[StepSpec, StepSpec]:
    """The hostile steps under the shipped steps' names and timeouts: the check's attempts as
    its check, the network attempts as its setup step."""
    ((name, shipped_check),) = runner["checks"].items()
    (shipped_setup,) = runner["setup"]
    return (
        StepSpec(name, check.run, int(shipped_check["timeout_s"]), check.env),
        StepSpec(
            str(shipped_setup["name"]),
            net_check.run,
            int(shipped_setup["timeout_s"]),
            net_check.env,
        ),
    )


def _shipped_config(
    env: CarryEnv, runner: dict[str, Any], setup: StepSpec, check: StepSpec, workdir: Path
) -> None:
    """The carry config with the shipped runner as is, but for its commands (the hostile
    code), its queue (the broker user's) and its workdir (the scenario's)."""
    env.write_config()
    config = json.loads(env.config_path.read_text())
    ((_, shipped_check),) = runner["checks"].items()
    (shipped_setup,) = runner["setup"]
    config["runners"] = {
        HOSTILE_KIND: {
            **runner,
            "queue": f"hw.{HOSTILE_KIND}",
            "workdir": str(workdir),
            "setup": [{**shipped_setup, "run": list(setup.run), "env": dict(setup.env)}],
            "checks": {
                check.name: {**shipped_check, "run": list(check.run), "env": dict(check.env)}
            },
        }
    }
    env.config_path.write_text(json.dumps(config, indent=2))


def _hostile_attempts(
    env: CarryEnv,
    rt: Runtime,
    checks: list[StepSpec],
    marks: Path,
    runner_home: Path,
    home_before: dict[str, bytes],
    setup: tuple[StepSpec, ...] = (),
) -> list[Attempt]:
    check = checks[0]
    target = ci.CiTarget(
        HOSTILE_KIND,
        f"hw.{HOSTILE_KIND}",
        setup=setup,
        checks=tuple(checks),
        retry=RetryPolicy(max_attempts=1),
    )
    tree = _hostile_tree(env)
    victim, common = Path(check.env["VICTIM"]), Path(check.env["COMMON"])
    before = _snapshot(victim)
    first = _hostile_run(rt, target, tree, force=False)
    first_lines = _hostile_lines(rt, first)
    later = (*NEXT_JOB_ATTEMPTS, BROKER_NET_ATTEMPT)
    attempts = [a for a in first_lines if a.attempt not in later]
    time.sleep(1)  # a daemon the job left has long forked by now
    left = _lingering(first)
    for pid in left:  # the scenario's own clean-up: the next job must not meet it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    second = _hostile_run(rt, target, tree, force=True)  # the next job, in the same clone
    ran = sorted(p.name for p in marks.iterdir() if p.name.startswith(("hook-ran", "fsmonitor")))
    attempts.append(
        Attempt(
            "leave git hooks and config that run in the next job",
            bool(ran),
            f"ran: {', '.join(ran)}"
            if ran
            else "the next job's clone got a fresh config, no hooks",
        )
    )
    next_job = _hostile_lines(rt, second)
    attempts.append(_home_attempt(next_job, runner_home, home_before))
    attempts.append(_forged_job(rt, marks, first))
    attempts.append(_blob_bomb(env.root / "blob-bomb"))
    attempts += _next_job_attempts(next_job, marks, victim, common, before, left)
    tmp_left = Path("/tmp", check.env["TMP_NAME"])
    if tmp_left.exists():
        tmp_left.unlink()
        attempts[-1] = Attempt(
            SHARED_TMP_ATTEMPT, True, f"{attempts[-1].how}; {tmp_left} was left on the host"
        )
    return attempts + [a for a in first_lines if a.attempt == BROKER_NET_ATTEMPT]


BLOB_BOMB_ATTEMPT = "make carry read a 40 MB file that its head packs in kilobytes (blob bomb)"


def _blob_bomb(root: Path) -> Attempt:
    """An upstream head (checked approved or not) turns a file the series edits into 40 MB of
    repeated lines (issue 33; bench/blob_bomb.py measures the cost): carry must not read it."""
    from bench.blob_bomb import build

    up = build(root, 40)
    patches = [PatchInput(str(p), p.read_bytes()) for p in up.patches]
    started = time.perf_counter()
    status = run_engine(Mirror(str(up.path), root / "cache"), up.head, patches)
    elapsed = time.perf_counter() - started
    return Attempt(
        BLOB_BOMB_ATTEMPT,
        status != "invalid" or elapsed > 5,
        f"the patch on it is {status} in {elapsed:.2f} s (a {up.pack_bytes // 1024} KiB pack; "
        "CARRY_MAX_BLOB_BYTES sized the file from its header and nothing read it)",
    )


HOME_ATTEMPT = "find what an earlier job left in HOME"
NEXT_JOB_ATTEMPTS = (HOME_ATTEMPT, SHARED_TMP_ATTEMPT)


def _next_job_attempts(
    next_job: list[Attempt],
    marks: Path,
    victim: Path,
    common: Path,
    before: dict[str, bytes],
    left: list[int],
) -> list[Attempt]:
    """The rows that only the next job (and what ran or changed on the host) can tell."""
    ran = {
        name: sorted(p.name for p in marks.iterdir() if p.name.startswith(name))
        for name in ("victim", "common")
    }
    ran["either"] = ran["victim"] + ran["common"]
    after = _snapshot(victim)
    changed = sorted(name for name in {*before, *after} if before.get(name) != after.get(name))
    (found_tmp,) = [a for a in next_job if a.attempt == SHARED_TMP_ATTEMPT]
    return [
        Attempt(
            COMMONDIR_ATTEMPT,
            bool(ran["common"]),
            f"the next job's git ran: {', '.join(ran['common'])}"
            if ran["common"]
            else f"nothing of {common.name} ran in the next job's git",
        ),
        Attempt(
            GIT_SWAP_ATTEMPT,
            bool(ran["either"]),
            f"the next job's git ran: {', '.join(ran['either'])}"
            if ran["either"]
            else f"nothing of {victim.name} or {common.name} ran in the next job's git",
        ),
        Attempt(
            GIT_LINK_ATTEMPT,
            bool(changed),
            f"the next job changed {victim}: {', '.join(changed)}"
            if changed
            else f"the link was removed, not followed: {victim} is as it was",
        ),
        Attempt(
            LINGER_ATTEMPT,
            bool(left),
            f"pids {left} still ran after the job"
            if left
            else "the step's init (a subreaper) killed every process the step left",
        ),
        found_tmp,
    ]


def _hostile_lines(rt: Runtime, run_id: str) -> list[Attempt]:
    lines = [e["text"] for e in runners.runlog(rt.redis, run_id, limit=10_000)]
    if "hostile check done" not in lines or "hostile net check done" not in lines:
        raise AssertionError("the hostile check did not run to its end:\n" + "\n".join(lines))
    return _reported_attempts(lines)


def _home_attempt(
    second_job: list[Attempt], runner_home: Path, before: dict[str, bytes]
) -> Attempt:
    """The first job planted a .pth in its HOME's user site: the second job's check says
    whether it found it there, and the runner's own HOME must have stayed as it was."""
    (found,) = [a for a in second_job if a.attempt == HOME_ATTEMPT]
    after = _snapshot(runner_home)
    planted = sorted(name for name in {*before, *after} if before.get(name) != after.get(name))
    how = found.how if found.achieved else "the next job's HOME was its own, made anew"
    return Attempt(
        "leave code in HOME (a user site .pth) for the next job or the runner",
        found.achieved or bool(planted),
        f"{how}; the runner's HOME holds {planted}" if planted else f"{how}; not the runner's",
    )


def _reported_attempts(lines: list[str]) -> list[Attempt]:
    found = []
    for line in lines:
        parts = line.strip().split("|", 2)
        if len(parts) == 3 and parts[1] in ("achieved", "blocked"):
            found.append(Attempt(parts[0], parts[1] == "achieved", parts[2]))
    return found


def _hostile_tree(env: CarryEnv) -> TreeSpec:
    """The job's tree, from the repositories where the runner's config says they are (a path,
    or `git daemon`'s URL for a runner that may not read root's repositories by path)."""
    upstream_url = json.loads(env.config_path.read_text())["upstreams"]["engine"]["url"]
    served = upstream_url.startswith("git://")
    head = git(env.upstream.path, "rev-parse", "main")
    scratch = RepoBuilder(env.root / "scratch")
    scratch.git("fetch", "-q", str(env.upstream.path), head)
    scratch.git("checkout", "-q", "--detach", "--force", head)
    patches = sorted((env.downstream / "patches" / SERIES).glob("*.patch"))
    scratch.git("am", "-q", "-3", "--keep-cr", *(str(p) for p in patches))
    git(env.downstream, "init", "-q", "-b", "main")
    git(env.downstream, "add", "-A")
    git(env.downstream, "commit", "-q", "--allow-empty", "-m", "carry the series")
    return TreeSpec(
        upstream_url=upstream_url,
        upstream_sha=head,
        downstream_url=upstream_url.rsplit("/", 1)[0] + "/downstream"
        if served
        else str(env.downstream),
        downstream_ref="refs/heads/main",
        downstream_sha=git(env.downstream, "rev-parse", "HEAD"),
        patches_dir=f"patches/{SERIES}",
        series_digest="d" * 64,
        expected_tree=scratch.git("rev-parse", "HEAD^{tree}"),
    )


def _hostile_run(rt: Runtime, target: ci.CiTarget, tree: TreeSpec, *, force: bool) -> str:
    ci.record_push(rt.redis, SERIES, Push(ZERO_SHA, tree.upstream_sha, "alice", trusted=True))
    rows = ci.request_ci(
        rt.redis,
        celery_app,
        SERIES,
        [target],
        tree,
        issuer=rt.job_issuer,
        force=force,
        debounce_s=0,
    )
    (row,) = {r.run_id: r for r in rows}.values()  # one run, a row per check

    def ended() -> bool:
        info = ci.run_info(rt.redis, row.run_id)
        return info is not None and info["state"] in FINAL_STATES

    wait_for(ended, 120, f"hostile run {row.run_id}")
    return row.run_id


def _forged_job(rt: Runtime, marks: Path, model_run: str) -> Attempt:
    """Whoever can write to the broker can queue any payload: a copy of a real job whose check
    runs another command."""
    info = ci.run_info(rt.redis, model_run)
    assert info is not None
    payload = copy.deepcopy(info["payload"])
    forged = f"forged-{uuid.uuid4().hex[:8]}"
    payload["run_id"] = forged
    payload["checks"][0]["run"] = ["sh", "-c", f"touch {marks}/forged-ran"]
    celery_app.send_task(ci_runs.TASK_NAME, args=[payload], queue=payload["queue"], task_id=forged)

    def refused() -> list[dict[str, Any]]:
        entries = store.history(rt.redis, SERIES, limit=200)
        return [e for e in entries if e["kind"] == "ci-refused" and e["data"]["run_id"] == forged]

    entry = wait_for(refused, 60, "the runner to refuse the forged job")
    ran = (marks / "forged-ran").exists()
    return Attempt(
        "have the runner run a job nobody issued (a forged run_job in its queue)",
        ran,
        "it ran" if ran else f"refused, ran nothing: {entry[0]['data']['reason']}",
    )


# What only namespaces keep from a step: a step user still sees other processes (not their
# environment), has the host's network (the broker, with no credential) and reaches a
# daemon's socket that is open to every user.
NEEDS_NAMESPACES = (
    "see or signal the runner process",
    "connect to the broker",
    SOCKET_ATTEMPT,
    SHARED_TMP_ATTEMPT,  # without a mount namespace the step writes the host's /tmp
    BROKER_NET_ATTEMPT,  # without a network namespace, network: true is the host's
)


def scenario_hostile_check(
    root: Path, _scale: Scale, sandbox: str = "auto", step_user: str = "auto"
) -> Row:
    """One mode: every attempt must be blocked, or (no sandbox, the risk accepted) every
    attempt but NEEDS_NAMESPACES."""
    name = "hostile check code on a runner"
    if (sandbox, step_user) != ("auto", "auto"):
        name += f" (sandbox: {sandbox}, step_user: {step_user})"
    if sandbox == "bwrap" and bwrap_unavailable() is not None:
        return Row(name, f"not run: {bwrap_unavailable()}", "-", "-", "-", ok=True)
    if step_user not in ("auto", "runner") and os.geteuid() != 0:
        return Row(name, "not run: a step user needs a runner started as root", "-", "-", "-")
    setting: str | dict[str, str] = sandbox
    if sandbox == "none":  # what it costs, where the runner's owner accepts the risk
        setting = {"mode": "none", "accept_risk": ACCEPTED_RISK}
    attempts = run_hostile_check(root, sandbox=setting, step_user=step_user)
    print(render_attempts(attempts), flush=True)
    return _hostile_row(name, attempts, NEEDS_NAMESPACES if sandbox == "none" else ())


def _hostile_row(name: str, attempts: list[Attempt], allowed: Sequence[str]) -> Row:
    achieved = [a.attempt for a in attempts if a.achieved]
    return Row(
        name,
        f"a check's code tried {len(attempts)} things against carry's control plane "
        "(secrets, the runner, the broker, the next job) and a forged job was queued",
        f"{len(achieved)} of {len(attempts)} achieved"
        + (f": {'; '.join(achieved)}" if achieved else ""),
        "-",
        "nothing to recover: the step ran with a clean environment, in its own namespaces or "
        "as its own user; the runner ran only its own config's commands",
        ok=set(achieved) <= set(allowed) and len(attempts) >= 9,
    )


# Every sandbox mode, as a runner's config would say it (issue 33): those that cannot keep a job
# from later jobs are refused at start.
HOSTILE_MODES: tuple[tuple[str, str], ...] = (
    ("auto", "auto"),
    ("namespaces", "auto"),
    ("bwrap", "auto"),
    ("none", "auto"),  # a root runner's steps as nobody: the step-user-only mode
    ("none", "runner"),
)


def scenario_hostile_check_every_mode(root: Path, scale: Scale) -> list[Row]:
    """The hostile check under each of HOSTILE_MODES (a root runner) and UNPRIVILEGED_MODES (a
    runner started as an unprivileged user), one table per mode: every row blocked, or the
    runner refused to start and the table says so (or, for a runner that is not root, the
    host gives unprivileged users no user namespaces)."""
    rows = []
    for index, (mode, step_user) in enumerate(HOSTILE_MODES):
        title = f"sandbox: {mode}, step_user: {step_user}"
        print(f"\n### {title}\n", flush=True)
        name = f"hostile check code on a runner ({title})"
        if mode == "bwrap" and bwrap_unavailable() is not None:
            print(f"not run: {bwrap_unavailable()}", flush=True)
            rows.append(Row(name, f"not run: {bwrap_unavailable()}", "-", "-", "-"))
            continue
        where = root / f"mode-{index}"
        try:
            attempts = run_hostile_check(where, sandbox=mode, step_user=step_user)
        except RefusedAtStart as refused:
            print(render_refusal(str(refused)), flush=True)
            expected = mode == "none" or (mode == "namespaces" and namespaces_unavailable())
            rows.append(Row(name, f"refused at start: {refused}", "-", "-", "-", ok=bool(expected)))
            continue
        print(render_attempts(attempts), flush=True)
        rows.append(_hostile_row(name, attempts, ()))
    for index, mode in enumerate(UNPRIVILEGED_MODES):
        rows.append(unprivileged_row(root / f"unprivileged-{index}", mode))
    rows.append(shipped_row(root / "shipped"))
    rows.append(broker_user_row(root / "broker"))
    return rows


# The modes of a runner that is not root (compose's runners, as the unprivileged `carry`): its
# steps run as its own uid, in a user namespace.
UNPRIVILEGED_MODES = ("auto", "namespaces", "bwrap")  # compose's comment names namespaces


def unprivileged_unavailable() -> str | None:
    """Why a runner cannot run here as a user that is not root with its steps in a user
    namespace (None when it can). As root: a dedicated user, RUNNER_USER; else this process's
    own user, which is not root already."""
    if os.geteuid() != 0:
        refused = namespaces_unavailable()
        return f"{NO_USER_NAMESPACES}: {refused}" if refused else None
    return unavailable(RUNNER_USER) or user_namespaces_unavailable(RUNNER_USER)


def unprivileged_title(mode: str) -> str:
    who = RUNNER_USER if os.geteuid() == 0 else f"uid {os.geteuid()}"
    return f"not root: as {who}, sandbox: {mode}, step_user: auto"


def unprivileged_row(root: Path, mode: str) -> Row:
    """The hostile check against a runner started as an unprivileged user (issue 33), with
    the attempts on its HOME: every row blocked, or not run where the host gives that user no
    user namespaces (and only then)."""
    title = unprivileged_title(mode)
    print(f"\n### {title}\n", flush=True)
    name = f"hostile check code on a runner ({title})"
    reason = unprivileged_unavailable() or (bwrap_unavailable() if mode == "bwrap" else None)
    if reason is not None:
        print(f"not run: {reason}", flush=True)
        return Row(
            name, f"not run: {reason}", "-", "-", "-", ok=reason.startswith(NO_USER_NAMESPACES)
        )
    try:
        attempts = run_hostile_check(root, sandbox=mode, unprivileged=True)
    except RefusedAtStart as refused:
        print(render_refusal(str(refused)), flush=True)
        return Row(name, f"refused at start: {refused}", "-", "-", "-", ok=False)
    print(render_attempts(attempts), flush=True)
    return _hostile_row(name, attempts, ())


def shipped_row(root: Path) -> Row:
    """The shipped configuration as is (issue 33): what a user who deploys carry's own
    config/carry.yaml runs, every step with network: true."""
    runner = shipped_runner()
    title = (
        f"the shipped configuration as is (config/carry.yaml's {HOSTILE_KIND} runner: sandbox "
        f"{runner.get('sandbox', 'auto (default)')}, step_user "
        f"{runner.get('step_user', 'auto (default)')}, its setup step and check with "
        "network: true)"
    )
    print(f"\n### {title}\n", flush=True)
    name = f"hostile check code on a runner ({title})"
    try:
        attempts = run_hostile_check(root, shipped=True)
    except RefusedAtStart as refused:  # the default sandbox must start wherever auto does
        print(render_refusal(str(refused)), flush=True)
        return Row(name, f"refused at start: {refused}", "-", "-", "-", ok=False)
    print(render_attempts(attempts), flush=True)
    return _hostile_row(name, attempts, ())


def broker_user_row(root: Path) -> Row:
    """bench/runner_broker.py: what the runner's broker user writes decides nothing (every
    mode alike: the broker, not the step's sandbox, is what is attacked)."""
    from bench.runner_broker import run_broker_attempts  # the harness imports this module

    title = "the runner's broker user, its password stolen (every sandbox mode)"
    print(f"\n### {title}\n", flush=True)
    attempts = [Attempt(a.attempt, a.achieved, a.how) for a in run_broker_attempts(root)]
    print(render_attempts(attempts), flush=True)
    achieved = [a.attempt for a in attempts if a.achieved]
    return Row(
        f"hostile check code with {title}",
        f"it wrote run records, verdicts and reports {len(attempts)} ways",
        f"{len(achieved)} of {len(attempts)} achieved"
        + (f": {'; '.join(achieved)}" if achieved else ""),
        "-",
        "refused and recorded by the service (ci-report-refused), or waiting for /carry approve",
        ok=not achieved and len(attempts) == 5,
    )


def render_refusal(reason: str) -> str:
    return "\n".join(
        [
            "| attempt by the check's code | result | how |",
            "|---|---|---|",
            f"| every attempt | refused at start | the runner did not start: {reason} |",
        ]
    )
