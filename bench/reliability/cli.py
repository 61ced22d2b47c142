"""Reliability figures: what carry loses or duplicates when things fail, and how it recovers.

Every scenario uses real processes on 127.0.0.1 (the `carry web` process, Celery workers,
private redis-server instances, the GitHub emulator, git) and is bounded in time and count.
The result is one table: scenario | what was done | lost | duplicated | recovered how.

  python -m bench.reliability                 # every scenario (a few minutes)
  python -m bench.reliability --quick         # smaller counts (CI)
  python -m bench.reliability --only fuzz-parser --only fuzz-webhooks
  python -m bench.reliability --scenario override-race   # --scenario is --only
  python -m bench.reliability --seed 7        # the fuzzers' seed (printed with the table)

Exit status 1 when a scenario's expectation failed (something lost or duplicated, a 500, an
unexpected parser exception, no recovery); the table says which.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from bench.reliability.common import QUICK, Row, Scale, render
from bench.reliability.every_head import scenario_every_head
from bench.reliability.full_disk import scenario_full_disk
from bench.reliability.fuzz_parser import scenario_fuzz_parser
from bench.reliability.fuzz_webhooks import scenario_fuzz_webhooks
from bench.reliability.github_errors import (
    scenario_github_5xx,
    scenario_github_429,
    scenario_github_faults,
)
from bench.reliability.hostile import scenario_hostile_check, scenario_hostile_check_every_mode
from bench.reliability.intake_abuse import scenario_intake_abuse
from bench.reliability.load import scenario_load
from bench.reliability.mirror import scenario_mirror
from bench.reliability.override_race import scenario_override_race
from bench.reliability.redis_restart import scenario_redis_restart
from bench.reliability.worker_kill import scenario_worker_kill

# A scenario answers one row, or one per part (intake-abuse: one per attack).
SCENARIOS: dict[str, Callable[[Path, Scale, int], Row | list[Row]]] = {
    "load": lambda root, scale, _seed: scenario_load(root, scale),
    "worker-kill": lambda root, scale, _seed: scenario_worker_kill(root, scale),
    "redis-restart": lambda root, scale, _seed: scenario_redis_restart(root, scale),
    "redis-no-aof": lambda root, scale, _seed: scenario_redis_restart(root, scale, aof=False),
    "github-5xx": lambda root, scale, _seed: scenario_github_5xx(root, scale),
    "github-429": lambda root, scale, _seed: scenario_github_429(root, scale),
    "github-faults": lambda root, scale, _seed: scenario_github_faults(root, scale),
    "mirror": lambda root, scale, _seed: scenario_mirror(root, scale),
    "disk-full": lambda root, scale, _seed: scenario_full_disk(root, scale),
    "fuzz-webhooks": scenario_fuzz_webhooks,
    "fuzz-parser": scenario_fuzz_parser,
    "override-race": scenario_override_race,
    "hostile-check": lambda root, scale, _seed: scenario_hostile_check_every_mode(root, scale),
    "hostile-check-bwrap": lambda root, scale, _seed: scenario_hostile_check(root, scale, "bwrap"),
    "hostile-check-step-user": lambda root, scale, _seed: scenario_hostile_check(
        root, scale, "none", step_user="nobody"
    ),
    "intake-abuse": lambda root, scale, _seed: scenario_intake_abuse(root, scale),
    "every-head": lambda root, scale, _seed: scenario_every_head(root, scale),
}


def run_scenario(name: str, scale: Scale, seed: int) -> list[Row]:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"carry-reliability-{name}-") as tmp:
        try:
            answered = SCENARIOS[name](Path(tmp), scale, seed)
            rows = answered if isinstance(answered, list) else [answered]
        except Exception as err:  # one broken scenario must not hide the others
            traceback.print_exc()
            rows = [Row(name, "scenario crashed", "?", "?", f"{type(err).__name__}: {err}", False)]
    ok = all(row.ok for row in rows)
    print(
        f"  {name}: {'ok' if ok else 'FAILED'} in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reliability", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="smaller counts (CI)")
    parser.add_argument(
        "--only",
        "--scenario",
        dest="only",
        action="append",
        choices=sorted(SCENARIOS),
        default=[],
        metavar="SCENARIO",
        help=f"run only this scenario (repeatable): {', '.join(sorted(SCENARIOS))}",
    )
    parser.add_argument("--seed", type=int, default=None, help="the fuzzers' seed")
    args = parser.parse_args(argv)
    if shutil.which("redis-server") is None:
        print("reliability: redis-server is needed (apt-get install redis-server)", file=sys.stderr)
        return 2
    scale = QUICK if args.quick else Scale()
    seed = args.seed if args.seed is not None else random.randrange(1 << 16)
    names = args.only or [n for n in SCENARIOS if n != "redis-no-aof" or scale.contrast_without_aof]
    print(f"reliability: {len(names)} scenarios, seed {seed}", file=sys.stderr, flush=True)
    logging.getLogger("github").setLevel(logging.ERROR)  # PyGithub narrates its retries
    rows = [row for name in names for row in run_scenario(name, scale, seed)]
    print(render(rows))
    failed = [row.scenario for row in rows if not row.ok]
    if failed:
        print(f"\nexpectations not met: {', '.join(failed)}")
    return 1 if failed else 0
