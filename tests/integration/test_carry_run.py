"""`carry run` (what `make run` starts) as a user runs it, with real processes: without
REDIS_URL it starts a private redis-server of its own (a free port, its data and password in
CARRY_CACHE_DIR/redis, the `default` user behind the password) and says where; it never takes
whatever Redis answers on 6379. With REDIS_URL it uses that one and starts none."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from bot.local_redis import answers, free_port
from harness.carry_env import BODY, CarryEnv, wait_for

FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
SAID = re.compile(
    r"carry: Redis: database 0 of redis://:\*\*\*@127\.0\.0\.1:(?P<port>\d+) \(a private "
    r"redis-server started for this run: data in (?P<dir>\S+), password in (?P<file>\S+); "
    r"set REDIS_URL to use another Redis\)"
)


@pytest.fixture
def carry(tmp_path: Path) -> Iterator[CarryEnv]:
    env = CarryEnv(tmp_path, redis_url="")
    env.carry_patches([FIX])
    env.write_config()
    yield env
    env.stop()


def carry_run(carry: CarryEnv, log_name: str, **extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """`carry run` on a free port; returns the process and the dashboard's URL once it
    answers. REDIS_URL is left out of its environment unless `extra` gives it."""
    env = {k: v for k, v in carry.env.items() if k != "REDIS_URL"} | extra
    port = free_port()
    argv = ["bot.cli", "run", "--host", "127.0.0.1", "--port", str(port)]
    proc, log = carry.spawn(argv, log_name, env=env)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(log.read_text(errors="replace"))
        try:
            return httpx.get(f"{url}/healthz", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 60, "carry run's dashboard")
    return proc, url


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
    proc.wait(timeout=30)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_carry_run_starts_a_private_redis_with_a_password_and_says_where(
    carry: CarryEnv,
) -> None:
    proc, url = carry_run(carry, "run.log")
    said = SAID.search((carry.root / "run.log").read_text())
    assert said, (carry.root / "run.log").read_text()
    port, workdir, password_file = int(said["port"]), Path(said["dir"]), Path(said["file"])
    assert port != 6379 and workdir == carry.root / "cache" / "redis"
    assert password_file == workdir / "password"
    password = password_file.read_text().strip()
    assert len(password) >= 32
    assert mode(password_file) == 0o600 and mode(workdir) == 0o700
    assert mode(workdir / "redis.conf") == 0o600

    # Without the password, the `default` user gets nothing; with it, everything.
    anonymous = redis.Redis(port=port, socket_timeout=5)
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()
    with pytest.raises(redis.AuthenticationError):
        anonymous.sadd("carry:approvals:x", "deadbeef")
    owner = redis.Redis(port=port, password=password, socket_timeout=5)
    assert owner.execute_command("ACL", "WHOAMI") == b"default"
    pid = int(owner.info("server")["process_id"])
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert b"redis-server" in cmdline and password.encode() not in cmdline  # `ps` shows argv

    # carry's own processes work through the password: a push is checked by the worker.
    carry.redis_url = f"redis://:{password}@127.0.0.1:{port}/0"
    before = carry.upstream.head()
    after = carry.upstream.commit("upstream change", {"other.py": "x = 1\n"})
    assert carry.deliver(url, "push", carry.push_payload(after, before)).status_code == 202
    assert carry.wait_checked(after).patches[0].status == "applies"
    # `carry fixes` beside it, with no REDIS_URL either, reads the same Redis
    fixes = subprocess.run(
        [sys.executable, "-m", "bot.cli", "fixes"],
        env={k: v for k, v in carry.env.items() if k != "REDIS_URL"},
        cwd=carry.downstream,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "unknown" not in fixes.stdout + fixes.stderr and "keep" in fixes.stdout

    # Ctrl-C stops the private server too; the next run finds its data and its password.
    stop(proc)
    assert not answers(carry.redis_url)
    proc, _ = carry_run(carry, "run-again.log")
    again = SAID.search((carry.root / "run-again.log").read_text())
    assert again and Path(again["file"]).read_text().strip() == password
    carry.redis_url = f"redis://:{password}@127.0.0.1:{again['port']}/0"
    state = carry.state()
    assert state is not None and state.head_sha == after
    stop(proc)


def test_carry_run_with_redis_url_uses_it_and_starts_no_server(
    carry: CarryEnv, redis_url: str
) -> None:
    proc, _ = carry_run(carry, "run.log", REDIS_URL=redis_url)
    log = (carry.root / "run.log").read_text()
    shown = redis_url.rsplit("/", 1)[0]
    assert f"carry: Redis: database {redis_url.rsplit('/', 1)[1]} of {shown} (REDIS_URL)" in log
    assert not (carry.root / "cache" / "redis").exists()
    stop(proc)


def test_ctrl_c_stops_carry_run_without_a_traceback(carry: CarryEnv) -> None:
    """Ctrl-C in the terminal reaches every process of the foreground group. The private
    redis-server must not be among them: carry stops it last, after its workers have written
    what they had (it is there for them on their way out), and nobody prints a traceback.
    A runner kind in the config gives each worker its reader of the runners' reports."""
    carry.write_config(
        runner_kinds={"gaudi": {"queue": "hw.gaudi", "workdir": str(carry.root / "w")}}
    )
    proc, _ = carry_run(carry, "run.log")
    said = carry.root / "run.log"
    wait_for(lambda: said.read_text().count(" ready.") == 2, 60, "both workers ready")
    stop(proc)
    log = said.read_text(errors="replace")

    assert proc.returncode == 0, log
    assert "Traceback" not in log and "Connection refused" not in log, log
