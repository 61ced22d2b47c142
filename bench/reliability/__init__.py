"""Reliability figures: what carry loses or duplicates when things fail, and how it recovers.

`python -m bench.reliability --help` (cli.py) lists the scenarios; `make reliability` runs them
all. common.py holds what the scenarios share (the result row, the scale, private
redis-servers, a carry deployment, signed deliveries, an emulated GitHub); each scenario has
its module: load, worker_kill, redis_restart, github_errors (github-5xx, github-429,
github-faults), mirror, full_disk (disk-full), fuzz_webhooks, fuzz_parser, override_race,
hostile (hostile-check and its modes; hostile_script.py is the check's code), intake_abuse and
every_head. This package re-exports the names the tests import from it.
"""

from __future__ import annotations

from bench.reliability.cli import SCENARIOS, main, run_scenario
from bench.reliability.common import (
    FIX,
    NAME,
    OTHER_REPO,
    OWNER,
    QUICK,
    ROOT,
    TOKEN,
    WEBHOOK_EXAMPLES,
    RedisServer,
    Row,
    Scale,
    carry_env,
    emulated_github,
    free_port,
    percentile,
    push_body,
    queued_deliveries,
    render,
    run_engine,
    say,
    signed_headers,
    stop_proc,
    stored,
)
from bench.reliability.every_head import scenario_every_head
from bench.reliability.full_disk import scenario_full_disk
from bench.reliability.fuzz_parser import (
    PARSER_EDGE_CASES,
    ParserFuzz,
    fuzz_parser,
    parse_one,
    scenario_fuzz_parser,
)
from bench.reliability.fuzz_webhooks import (
    edge_cases,
    fuzz_webhooks,
    post_webhook,
    scenario_fuzz_webhooks,
)
from bench.reliability.github_errors import (
    scenario_github_5xx,
    scenario_github_429,
    scenario_github_faults,
)
from bench.reliability.hostile import (
    BLOB_BOMB_ATTEMPT,
    NEEDS_NAMESPACES,
    RUNNER_SITE,
    RefusedAtStart,
    render_attempts,
    run_hostile_check,
    scenario_hostile_check,
    scenario_hostile_check_every_mode,
    shipped_row,
    shipped_runner,
)
from bench.reliability.hostile_script import (
    BROKER_NET_ATTEMPT,
    COMMONDIR_ATTEMPT,
    DISK_ATTEMPT,
    GIT_LINK_ATTEMPT,
    GIT_SWAP_ATTEMPT,
    HOST_FILE_ATTEMPT,
    HOSTILE_SCRIPT,
    LINGER_ATTEMPT,
    MKNOD_ATTEMPT,
    POISON_ATTEMPT,
    RUNNER_PTH,
    RUNNER_PYTHON_ATTEMPT,
    SHARED_TMP_ATTEMPT,
    SOCKET_ATTEMPT,
    SYSCTL_ATTEMPT,
    UNDO_ATTEMPT,
)
from bench.reliability.intake_abuse import (
    Attack,
    Footprint,
    LogWritten,
    run_intake_abuse,
    scenario_intake_abuse,
)
from bench.reliability.load import scenario_load
from bench.reliability.mirror import scenario_mirror
from bench.reliability.override_race import run_override_race, scenario_override_race
from bench.reliability.redis_restart import scenario_redis_restart
from bench.reliability.worker_kill import scenario_worker_kill

__all__ = [
    "BLOB_BOMB_ATTEMPT",
    "BROKER_NET_ATTEMPT",
    "COMMONDIR_ATTEMPT",
    "DISK_ATTEMPT",
    "FIX",
    "GIT_LINK_ATTEMPT",
    "GIT_SWAP_ATTEMPT",
    "HOSTILE_SCRIPT",
    "HOST_FILE_ATTEMPT",
    "LINGER_ATTEMPT",
    "MKNOD_ATTEMPT",
    "NAME",
    "NEEDS_NAMESPACES",
    "OTHER_REPO",
    "OWNER",
    "PARSER_EDGE_CASES",
    "POISON_ATTEMPT",
    "QUICK",
    "ROOT",
    "RUNNER_PTH",
    "RUNNER_PYTHON_ATTEMPT",
    "RUNNER_SITE",
    "SCENARIOS",
    "SHARED_TMP_ATTEMPT",
    "SOCKET_ATTEMPT",
    "SYSCTL_ATTEMPT",
    "TOKEN",
    "UNDO_ATTEMPT",
    "WEBHOOK_EXAMPLES",
    "Attack",
    "Footprint",
    "LogWritten",
    "ParserFuzz",
    "RedisServer",
    "RefusedAtStart",
    "Row",
    "Scale",
    "carry_env",
    "edge_cases",
    "emulated_github",
    "free_port",
    "fuzz_parser",
    "fuzz_webhooks",
    "main",
    "parse_one",
    "percentile",
    "post_webhook",
    "push_body",
    "queued_deliveries",
    "render",
    "render_attempts",
    "run_engine",
    "run_hostile_check",
    "run_intake_abuse",
    "run_override_race",
    "run_scenario",
    "say",
    "scenario_every_head",
    "scenario_full_disk",
    "scenario_fuzz_parser",
    "scenario_fuzz_webhooks",
    "scenario_github_5xx",
    "scenario_github_429",
    "scenario_github_faults",
    "scenario_hostile_check",
    "scenario_hostile_check_every_mode",
    "scenario_intake_abuse",
    "scenario_load",
    "scenario_mirror",
    "scenario_override_race",
    "scenario_redis_restart",
    "scenario_worker_kill",
    "shipped_row",
    "shipped_runner",
    "signed_headers",
    "stop_proc",
    "stored",
]
