"""`python -m bot.demo --no-wait` end to end: the storyline's five steps happen, as its output
says and as the store records: the PR head moves, carry rebases, a PR is opened downstream, CI
passes on both runner kinds, and the patch upstream took is dropped. And its safe defaults: its
own redis-server unless told otherwise, never a database of someone else's emptied unasked."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from bot.local_redis import free_port
from bot.store import series as store
from tests.support.demo import demo_env, stop_leftovers

SERIES = "calc-fixes"
DROPPED = "0001-return-none-when-dividing-by-zero.patch"
KINDS = ("gaudi", "gb10")
LIMIT_S = 120


class DemoRun:
    def __init__(self, output: str, returncode: int | None, redis_url: str, logs: Path):
        self.output, self.returncode = output, returncode
        self.client = redis.Redis.from_url(redis_url)
        self.logs = logs  # carry's processes' logs

    def history(self, kind: str) -> list[dict[str, Any]]:
        entries = store.history(self.client, SERIES, limit=5000)
        return [e for e in reversed(entries) if e["kind"] == kind]  # oldest first

    def heads(self) -> tuple[str, str, str]:
        """The PR head before and after the move (step 1) and after the merge (step 5)."""
        moved = re.search(r"head moved: ([0-9a-f]{12}) -> ([0-9a-f]{12})", self.output)
        merged = re.search(r"head is now ([0-9a-f]{12})", self.output)
        assert moved and merged, self.output
        return moved.group(1), moved.group(2), merged.group(1)


def run_demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A demo run expected to stop early (a refusal or a failure), from outside the checkout."""
    argv = [sys.executable, "-m", "bot.demo", "--no-wait", "--dir", str(tmp_path / "demo")]
    return subprocess.run(
        [*argv, *args], cwd=tmp_path, env=demo_env(), capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def demo(tmp_path: Path, redis_url: str) -> Iterator[DemoRun]:
    directory = tmp_path / "demo"
    argv = [sys.executable, "-m", "bot.demo", "--no-wait", "--dir", str(directory)]
    argv += ["--port", str(free_port()), "--redis-url", redis_url, "--timeout", "60"]
    argv += ["--log-level", "info"]
    log = tmp_path / "demo.out"
    with open(log, "wb") as out:
        # Run from outside the checkout: nothing of the demo may depend on the current directory.
        proc = subprocess.Popen(
            argv, cwd=tmp_path, env=demo_env(), stdout=out, stderr=subprocess.STDOUT
        )
        try:
            returncode: int | None = proc.wait(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            returncode = None
            proc.terminate()  # the demo stops every process it started
            proc.wait(timeout=30)
    try:
        yield DemoRun(log.read_text(errors="replace"), returncode, redis_url, directory / "logs")
    finally:
        stop_leftovers(directory / "pids")


def test_demo_plays_the_whole_storyline(demo: DemoRun) -> None:
    assert demo.returncode is not None, f"the demo ran over {LIMIT_S}s:\n{demo.output}"
    assert demo.returncode == 0, demo.output
    steps = [demo.output.find(f"Step {n}/5") for n in range(1, 6)]
    assert -1 not in steps and steps == sorted(steps), demo.output
    assert "Storyline complete" in demo.output
    before, moved, merged = demo.heads()

    # 1. The PR head moved, and carry heard of it through the webhook. The poll beat queues at
    # start-up may have planned the same rebase first; the webhook's plan is then skipped as
    # already done, under the same key.
    assert "pull_request webhook (synchronize): HTTP 202" in demo.output
    planned = [e["data"] for e in demo.history("rebase") if e["data"]["head_sha"].startswith(moved)]
    assert planned, demo.history("rebase")
    heard = [r["reason"] for r in planned] + [
        "skipped" for e in demo.history("skipped") if e["data"]["key"] == planned[0]["key"]
    ]
    assert f"refs/pull/1/head moved to {moved}" in heard or "skipped" in heard

    # 2. carry rebased the series on the new head.
    rebased = [e["data"] for e in demo.history("rebased")]
    assert any(r["head"].startswith(moved) for r in rebased)

    # 3. A PR was opened on the downstream repository.
    published = [e["data"] for e in demo.history("published")]
    first = next(p for p in published if p["head"].startswith(moved))
    # carry's dashboard issue (on by default where the token can write issues) may take #1
    assert first["pushed"] and first["pr"] in (1, 2)
    assert f"PR #{first['pr']} opened on downstream-org/calc-carry" in demo.output

    # 4. CI passed on both runner kinds, on the moved head.
    passed = {
        e["data"]["runner_kind"]
        for e in demo.history("ci-success")
        if e["data"]["head"].startswith(moved)
    }
    assert passed == set(KINDS)
    for kind in KINDS:
        assert f"carry/{kind}/divide-by-zero: success" in demo.output

    # 5. Upstream merged the fix of patch 0001: carry dropped it, with evidence.
    decision = next(
        e["data"]
        for e in demo.history("decision")
        if e["data"]["head"].startswith(merged) and e["data"]["patch"] == DROPPED
    )
    assert decision["decision"] == "drop" and decision["status"] == "contained"
    assert {"signal": "reverse-apply", "result": "ok"} in decision["evidence"]
    last = next(p for p in published if p["head"].startswith(merged))
    assert last["pushed"] and DROPPED in last["files"]
    assert f"dropped: {DROPPED}" in demo.output
    state = store.load_series(demo.client, SERIES)
    assert state is not None and state.head_sha and state.head_sha.startswith(merged)
    assert before != moved != merged

    # carry's processes log at the demo's --log-level (failed on af85829: the demo refused
    # '--log-level info'; without it they log warnings and above only).
    web_log = (demo.logs / "web.log").read_text()
    assert '"level": "info", "logger": "bot.web.webhooks", "msg": "delivery accepted"' in web_log


def test_a_database_holding_keys_is_refused_and_left_alone(tmp_path: Path, redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set("someone:else", "precious")
    result = run_demo(tmp_path, "--port", str(free_port()), "--redis-url", redis_url)
    assert result.returncode == 1, result.stdout + result.stderr
    error = result.stderr.strip()
    assert error.startswith("carry demo: database ") and "holds 1 keys" in error, error
    assert "--redis-flush" in error and "\n" not in error
    assert client.get("someone:else") == b"precious"


def test_redis_flush_says_it_empties_the_database(tmp_path: Path, redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set("stale", "1")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()  # the emulator's port is taken: the demo stops right after choosing Redis
    with busy:
        github_port = str(busy.getsockname()[1])
        args = ["--redis-url", redis_url, "--redis-flush", "--github-port", github_port]
        result = run_demo(tmp_path, "--port", str(free_port()), *args)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        f"emptying database {redis_url.rsplit('/', 1)[1]} of {redis_url} (1 keys)" in result.stdout
    )
    assert client.get("stale") is None
    assert f"cannot listen on port {github_port}" in result.stderr


@pytest.mark.skipif(not shutil.which("redis-server"), reason="redis-server is not installed")
def test_by_default_the_demo_runs_its_own_redis_and_stops_it(tmp_path: Path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    with busy:
        result = run_demo(
            tmp_path, "--port", str(free_port()), "--github-port", str(busy.getsockname()[1])
        )
    assert result.returncode == 1, result.stdout + result.stderr
    own = re.search(
        r"Redis: the demo's own redis-server on redis://:\*\*\*@127\.0\.0\.1:(\d+)/0 "
        r"\(in \S+, not saved; its password in (\S+)\)",
        result.stdout,
    )
    assert own, result.stdout
    assert own.group(1) != "6379"
    with socket.socket() as probe:  # nothing listens there any more
        assert probe.connect_ex(("127.0.0.1", int(own.group(1)))) != 0, "the demo left it running"


def test_a_taken_dashboard_port_is_one_clear_line(tmp_path: Path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    with busy:
        port = busy.getsockname()[1]
        result = run_demo(tmp_path, "--port", str(port))
    assert result.returncode == 2
    assert result.stderr.strip() == f"carry demo: port {port} is in use: pass another --port"
    assert not (tmp_path / "demo").exists()  # refused before building anything
