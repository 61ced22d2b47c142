"""Limits per task (issue 33, bounded work per head): each pool process of a service
worker runs under CARRY_TASK_MEMORY_MB (RLIMIT_AS and RLIMIT_DATA), and so does every git it
starts. A git past it ends with GitOutOfMemory, which says so and names the setting, and a
rebase that ends that way is the series' error, recorded once, not a task retried in a loop.
Failed before: no limit was set, and a git out of memory was a plain GitError, retried.
The same processes run at the workers' CPU priority, CARRY_WORKER_NICE (the last tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.config import ConfigError, load_settings
from bot.git.runner import GitOutOfMemory, out_of_memory
from harness.carry_env import BODY, CarryEnv, wait_for
from harness.gitrepo import RepoBuilder
from tests.support.paths import REPO_ROOT
from tests.support.procs import children_of

MIB = 1024 * 1024


def limits_of(pid: int) -> dict[str, tuple[str, str]]:
    """/proc/PID/limits: name -> (soft, hard)."""
    out = {}
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]:
        name, soft, hard = line[:26].strip(), *line[26:].split()[:2]
        out[name] = (soft, hard)
    return out


@pytest.fixture
def carry(tmp_path: Path, redis_url: str):
    env = CarryEnv(tmp_path, redis_url)
    env.carry_patches([{"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}])
    env.write_config()
    yield env
    env.stop()


def test_each_pool_process_of_a_worker_runs_under_the_task_memory_limit(carry: CarryEnv) -> None:
    carry.extra_env["CARRY_TASK_MEMORY_MB"] = "1536"
    carry.start_carry_worker("limited")
    (worker,) = carry.procs
    children = wait_for(lambda: children_of(worker.pid), 10, "the worker's pool process")
    wanted = str(1536 * MIB)
    for child in children:
        limits = limits_of(child)
        assert limits["Max address space"] == (wanted, wanted)
        assert limits["Max data size"] == (wanted, wanted)
    # The worker's main process (the pool's parent) only hands out tasks: not limited.
    assert limits_of(worker.pid)["Max address space"][0] == "unlimited"


BOMB_MB = 300


@pytest.fixture
def history_bomb(make_repo) -> tuple[RepoBuilder, str, str]:
    """An upstream whose range holds a commit that made mod.py 300 MB (in a pack of about a
    megabyte); the head has the small file again, so the head itself passes the blob limit."""
    repo = make_repo("upstream")
    base = repo.commit("base", {"mod.py": BODY})
    with open(repo.path / "mod.py", "wb") as out:
        line = b"# " + b"x" * 97 + b"\n"
        for _ in range(BOMB_MB):
            out.write(line * 10_000)
    repo.commit("Upstream grows the module", {})
    head = repo.commit("Upstream shrinks it again", {"mod.py": BODY.replace("(1)", "(1.0)")})
    return repo, base, head


PROBE = """
import json, sys
from workers.memory import limit_task_memory
from bot.git.runner import Git, GitOutOfMemory
from bot.git import history

limit_task_memory(int(sys.argv[2]))
try:
    history.read_range(Git(git_dir=sys.argv[1]), sys.argv[3], ("mod.py",))
except GitOutOfMemory as err:
    print(json.dumps({"error": type(err).__name__, "message": str(err), "code": err.returncode}))
else:
    print(json.dumps({"error": None}))
"""


def test_a_git_past_the_limit_is_git_out_of_memory(history_bomb, tmp_path: Path) -> None:
    """The same limit as a worker's pool process, then the history read a check makes
    (`git log -p` over the range, which inflates the 300 MB file): git, which inherited the
    limit, cannot get the memory, and carry says so."""
    repo, base, head = history_bomb
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(repo.path / ".git"), "256", f"{base}..{head}"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["error"] == "GitOutOfMemory", answer
    message = answer["message"]
    assert message.startswith("git log ")
    assert "ran out of memory (this task's limit: 256 MiB, CARRY_TASK_MEMORY_MB; exit 128)" in (
        message
    )
    assert "fatal: Out of memory" in message  # git's own words, kept


def test_a_rebase_whose_git_runs_out_of_memory_is_the_series_error_once(
    carry: CarryEnv,
) -> None:
    """A real `carry worker` under the smallest limit, a push whose range holds the 300 MB
    file: the check's history read runs out of memory, the series shows it as its error, and
    the task is not retried (it would run out again)."""
    carry.extra_env["CARRY_TASK_MEMORY_MB"] = "256"
    url = carry.start_web()
    carry.start_carry_worker("limited")
    before = carry.upstream.head()
    with open(carry.upstream.path / "mod.py", "wb") as out:
        line = b"# " + b"x" * 97 + b"\n"
        for _ in range(BOMB_MB):
            out.write(line * 10_000)
    carry.upstream.commit("Upstream grows the module", {})
    after = carry.upstream.commit("Upstream shrinks it again", {"mod.py": BODY + "tail = 1\n"})
    assert carry.deliver(url, "push", carry.push_payload(after, before)).status_code == 202
    (entry,) = wait_for(lambda: carry.history("rebase-failed"), 90, "the rebase to fail")
    data = entry["data"]
    assert data["final"] is True and data["attempt"] == 1
    assert "ran out of memory (this task's limit: 256 MiB, CARRY_TASK_MEMORY_MB" in data["error"]
    state = carry.state()
    assert state is not None and state.phase == "error"
    assert state.error.startswith(f"rebase on {after[:12]} failed (attempt 1, giving up): git ")
    time.sleep(3)  # a retry would come back within seconds (backoff 1 s, then 2 s)
    assert len(carry.history("rebase-failed")) == 1
    assert carry.history("rebased") == []


def test_what_counts_as_out_of_memory() -> None:
    assert out_of_memory(128, b"fatal: Out of memory, malloc failed (tried to allocate 9 bytes)")
    assert out_of_memory(128, b"fatal: mmap failed: Cannot allocate memory")
    assert out_of_memory(-9, b"")  # killed, as the kernel's OOM killer does
    assert not out_of_memory(128, b"fatal: bad revision 'nope'")
    assert not out_of_memory(0, b"out of memory is a fine thing to print")
    err = GitOutOfMemory(["log", "-p"], 128, b"", b"fatal: Out of memory, malloc failed")
    assert "git log -p ran out of memory" in str(err)


# --------------------------------------------------------------------------- CPU priority
# The workers yield the CPU to the web process: each pool process of `carry worker` (and every
# git it starts) runs at CARRY_WORKER_NICE (10) or nicer, the worker's main process and `carry
# web` at the priority they were started with. bench/scale.py found the overview's p95 at 200
# series far over its figure alone while the git lane saturated the CPUs. Failed before: the
# pool processes ran at the web's priority.


def nice_of(pid: int) -> int:
    """The nice value of a process, from /proc/PID/stat (field 19)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[16])


@pytest.mark.parametrize(("setting", "wanted"), [(None, 10), ("15", 15), ("0", 0)])
def test_a_workers_pool_processes_run_at_the_worker_priority(
    carry: CarryEnv, setting: str | None, wanted: int
) -> None:
    started_at = os.getpriority(os.PRIO_PROCESS, 0)  # what the worker inherits
    if setting is not None:
        carry.extra_env["CARRY_WORKER_NICE"] = setting
    log = carry.start_carry_worker("niced")
    (worker,) = carry.procs
    children = wait_for(lambda: children_of(worker.pid), 10, "the worker's pool process")
    for child in children:
        assert nice_of(child) == max(wanted, started_at)
    assert nice_of(worker.pid) == started_at  # it hands out tasks and answers the broker
    assert f"run at nice {max(wanted, started_at)} (CARRY_WORKER_NICE)" in log.read_text()


@pytest.mark.parametrize("value", ["20", "-5", "high"])
def test_a_nice_value_out_of_range_is_refused_with_its_name(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("CARRY_WORKER_NICE", value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert "CARRY_WORKER_NICE" in str(caught.value) and value in str(caught.value)
