"""Webhook intake under sustained load, next to a bare Starlette endpoint doing the same HMAC check.

Both servers run as their own processes on 127.0.0.1 (uvicorn, one worker) and get signed
`push` deliveries at fixed rates for a few seconds each. For carry a delivery is "lost" when it
was acknowledged but is not in the Redis delivery log afterwards, or its task is not queued. Usage:
  python bench/webhook.py [--rates 100,300,600] [--seconds 5] [--baseline DIR] [--repeat N]
--baseline DIR also runs the carry of another checkout (`git worktree add DIR <commit>`, or
`git archive <commit> | tar -x -C DIR`) in the same run, for a before/after on one machine;
--repeat runs every rate N times, interleaving the endpoints, to show the noise.
A third endpoint, "bare + 1 Redis script", is the bare one plus one script round trip to the
same Redis before it answers: the floor of any intake that stores a delivery before its 2xx.
--unix-socket also runs the floor and carry reaching the same Redis by its unix socket (as
`make run`'s own Redis is reached) instead of TCP.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import redis

from bot.local_redis import LocalRedis

ROOT = Path(__file__).resolve().parents[1]

SECRET = "bench-secret"
FAILURES: Counter[str] = Counter()  # what the errors were, over the whole run
BARE = "bare starlette + HMAC"
FLOOR = "bare + 1 Redis script"
SOCKET_FLOOR = "floor, unix socket"
SOCKET_CARRY = "carry, unix socket"
QUEUE = "carry"  # the Celery queue carry.ingest goes to (no worker runs: it only grows)
BARE_APP = """
import hashlib, hmac, os
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
SECRET = os.environ["CARRY_WEBHOOK_SECRET"].encode()
async def hook(request):
    body = await request.body()
    given = request.headers.get("x-hub-signature-256", "")
    wanted = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(given, wanted):
        return JSONResponse({"error": "bad signature"}, status_code=401)
    return JSONResponse({"status": "accepted"}, status_code=202)
app = Starlette(routes=[Route("/webhooks/github", hook, methods=["POST"])])
"""
# The floor of any intake that stores before it answers: the bare endpoint plus one round trip
# to the same Redis (one script: store the body once, queue it), no framework, no Celery.
FLOOR_APP = BARE_APP.replace(
    "app = Starlette(",
    """import redis.asyncio
STORE = redis.asyncio.Redis.from_url(os.environ["REDIS_URL"])
SCRIPT = STORE.register_script(
    "if redis.call('HSETNX', KEYS[1], 'body', ARGV[1]) == 1 then "
    "redis.call('LPUSH', KEYS[2], ARGV[1]) end"
)
async def stored(request):
    answer = await hook(request)
    if answer.status_code == 202:
        delivery = request.headers["x-github-delivery"]
        keys = ["bench:floor:" + delivery, "bench:floor"]
        await SCRIPT(keys=keys, args=[await request.body()])
    return answer
app = Starlette(""",
).replace('Route("/webhooks/github", hook,', 'Route("/webhooks/github", stored,')
CONFIG = {
    "downstream": {"repo": "bench/carry", "patches_dir": "patches"},
    "upstreams": {"up": {"url": "/dev/null", "repo": "bench/upstream"}},
    "series": [],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_up(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.post(url, content=b"{}", timeout=0.5)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"server at {url} did not start")


def payload(n: int) -> bytes:
    return json.dumps(
        {
            "ref": "refs/heads/main",
            "before": "0" * 39 + "1",
            "after": f"{n:040x}",
            "repository": {"full_name": "bench/upstream"},
            "pusher": {"name": "bench"},
            "sender": {"login": "bench"},
        }
    ).encode()


async def fire(url: str, rate: int, seconds: float) -> tuple[list[float], list[str], int]:
    """Sends rate*seconds deliveries on a fixed schedule; returns latencies (ms), acked ids,
    and the count of failed requests."""
    latencies: list[float] = []
    acked: list[str] = []
    failed = 0
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with httpx.AsyncClient(timeout=10, limits=limits) as client:

        async def one(n: int) -> None:
            nonlocal failed
            body = payload(n)
            delivery = str(uuid.uuid4())
            headers = {
                "X-GitHub-Event": "push",
                "X-GitHub-Delivery": delivery,
                "X-Hub-Signature-256": "sha256="
                + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest(),
                "Content-Type": "application/json",
            }
            started = time.perf_counter()
            try:
                response = await client.post(url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                failed += 1
                FAILURES[type(exc).__name__] += 1
                return
            latencies.append((time.perf_counter() - started) * 1000)
            if response.status_code in (200, 202):
                acked.append(delivery)
            else:
                failed += 1
                FAILURES[f"HTTP {response.status_code}"] += 1

        tasks = []
        start = time.perf_counter()
        for n in range(int(rate * seconds)):
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(n)))
        await asyncio.gather(*tasks)
    return latencies, acked, failed


def full_collections(url: str) -> int | None:
    """The garbage collector's full (generation 2) collections so far in the carry process
    behind `url`, from its /metrics (prometheus_client's python_gc_collections_total); each
    walks every object the process tracks while the event loop waits."""
    try:
        text = httpx.get(url.replace("/webhooks/github", "/metrics"), timeout=10).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith('python_gc_collections_total{generation="2"}'):
            return int(float(line.split()[-1]))
    return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc): less sensitive than latency
    to what else runs on a shared machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default="100,300,600")
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout's carry, run alongside")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--unix-socket",
        action="store_true",
        help="also run carry and the floor reaching Redis by its unix socket, not TCP",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="carry-webhook-bench-"))
    server = LocalRedis(work / "redis", persist=True, unix_socket=args.unix_socket).start()
    (work / "patches").mkdir()
    config = work / "carry.yaml"
    config.write_text(json.dumps(CONFIG))
    (work / "bare.py").write_text(BARE_APP)
    (work / "floor.py").write_text(FLOOR_APP)
    env = {
        **os.environ,
        "REDIS_URL": server.tcp_url,
        "CARRY_CONFIG": str(config),
        "CARRY_DOWNSTREAM_DIR": str(work),
        "CARRY_CACHE_DIR": str(work / "cache"),
        "CARRY_WEBHOOK_SECRET": SECRET,
    }
    # name -> (checkout, Redis URL): each carry endpoint
    carries = {"carry": (ROOT, server.tcp_url)}
    if args.unix_socket:
        carries[SOCKET_CARRY] = (ROOT, server.url)
    if args.baseline is not None:
        carries["carry (baseline)"] = (args.baseline.resolve(), server.tcp_url)
    # name -> (uvicorn app, Redis URL): the bare endpoint and the floor
    bares = {BARE: ("bare:app", server.tcp_url), FLOOR: ("floor:app", server.tcp_url)}
    if args.unix_socket:
        bares[SOCKET_FLOOR] = ("floor:app", server.url)
    ports = {name: free_port() for name in [*carries, *bares]}
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "bot.cli", "web", "--port", str(ports[name])],
            env={**env, "REDIS_URL": url, "PYTHONPATH": str(checkout)},
            cwd=checkout,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, (checkout, url) in carries.items()
    }
    procs |= {
        name: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                app,
                "--port",
                str(ports[name]),
                "--log-level",
                "warning",
            ],
            env={**env, "REDIS_URL": url},
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, (app, url) in bares.items()
    }
    # The bare endpoint first: a saturated carry leaves the machine busy for a while after.
    order = [*bares, *carries]
    targets = {name: f"http://127.0.0.1:{ports[name]}/webhooks/github" for name in order}
    pids = {name: proc.pid for name, proc in procs.items()}
    try:
        for url in targets.values():
            wait_up(url)
            asyncio.run(fire(url, 50, 1))  # warm-up: connections, imports, first Redis calls
        client = redis.Redis.from_url(server.url)
        rows = []
        runs = [int(r) for r in args.rates.split(",") for _ in range(args.repeat)]
        for run, rate in enumerate(runs):
            for name, url in targets.items():
                queued_before = client.llen(QUEUE)
                gc_before = full_collections(url) if name in carries else None
                time.sleep(1)  # the previous endpoint's connections and work wind down
                cpu_before = cpu_seconds(pids[name])
                latencies, acked, failed = asyncio.run(fire(url, rate, args.seconds))
                cpu_ms = (cpu_seconds(pids[name]) - cpu_before) * 1000 / max(1, len(latencies))
                lost, full_gc = "-", "-"
                gc_after = full_collections(url) if name in carries else None
                if gc_before is not None and gc_after is not None:
                    full_gc = str(gc_after - gc_before)
                if name in carries:  # acknowledged, but not stored or its task not queued
                    stored = sum(1 for d in acked if client.exists(f"carry:delivery:{d}"))
                    queued = int(client.llen(QUEUE)) - int(queued_before)
                    lost = str(len(acked) - min(stored, queued))
                rows.append(
                    (
                        run,
                        rate,
                        name,
                        len(latencies) + failed,
                        failed,
                        percentile(latencies, 0.5),
                        percentile(latencies, 0.99),
                        lost,
                        cpu_ms,
                        full_gc,
                    )
                )
        print(
            f"\n{'rate/s':>7} {'endpoint':24}{'sent':>7}{'errors':>8}{'p50 ms':>9}{'p99 ms':>9}{'lost':>6}{'p99 x bare':>12}{'cpu ms/req':>12}{'full gc':>9}"
        )
        bare: dict[int, float] = {r[0]: r[6] for r in rows if r[2] == BARE}
        for run, rate, name, sent, failed, p50, p99, lost, cpu_ms, full_gc in rows:
            ratio = p99 / bare[run] if bare.get(run) else float("nan")
            print(
                f"{rate:>7} {name:24}{sent:>7}{failed:>8}{p50:>9.1f}{p99:>9.1f}{lost:>6}{ratio:>12.1f}{cpu_ms:>12.2f}{full_gc:>9}"
            )
        if FAILURES:
            print("errors:", ", ".join(f"{n} x {kind}" for kind, n in FAILURES.most_common()))
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(timeout=10)
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
