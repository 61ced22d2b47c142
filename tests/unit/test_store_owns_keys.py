"""bot/store owns every Redis key carry writes: no other module spells a key or sends a Redis
data command itself (the broker's queues are Celery's, reached through the Celery app)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.paths import PACKAGES

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "bot" / "store"
# Redis commands on keys that have no namesake on dicts, sets or files.
REDIS_COMMANDS = {
    "hset", "hget", "hgetall", "hincrby", "hincrbyfloat", "hsetnx", "hdel",
    "xadd", "xrange", "xrevrange", "xtrim", "zadd", "zrem", "zrange", "zrangebyscore",
    "zremrangebyscore", "zscore", "zcard", "lpush", "rpush", "lrange", "llen", "ltrim",
    "scan_iter", "setex", "expire", "ttl", "eval", "smembers", "sadd", "srem", "incr",
}  # fmt: skip
KEY = re.compile(r"^carry:[a-z_]+:")  # "carry:ci:...", "carry:series:..."; not "carry:conflict"


def modules_outside_the_store() -> list[Path]:
    paths = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    return sorted(p for p in paths if STORE not in p.parents)


def key_uses(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, name)):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if KEY.match(node.value):
                found.append(f"{where}: key literal {node.value!r}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bot.store"):
            for alias in node.names:
                if alias.name in ("PREFIX", "CI"):
                    found.append(f"{where}: imports the key prefix {alias.name}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in REDIS_COMMANDS
        ):
            found.append(f"{where}: Redis command {node.func.attr}()")
    return found


def test_no_module_outside_bot_store_touches_a_redis_key() -> None:
    modules = modules_outside_the_store()
    assert len(modules) > 50  # the scan sees the code base
    uses = [u for p in modules for u in key_uses(p.read_text(), str(p.relative_to(ROOT)))]
    assert uses == []


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ('KEY = f"carry:ci:run:{run_id}"', "key literal 'carry:ci:run:'"),
        ('client.hset("x", "a", 1)', "Redis command hset()"),
        ("from bot.store.series import PREFIX", "imports the key prefix PREFIX"),
    ],
)
def test_the_scan_finds_each_kind_of_key_use(source: str, why: str) -> None:
    assert key_uses(source, "probe.py") == [f"probe.py:1: {why}"]


def test_labels_and_messages_are_not_keys() -> None:
    assert key_uses('LABEL = "carry:conflict"; say = "carry: error"', "probe.py") == []


def test_the_store_decodes_answers_in_one_place() -> None:
    """Issue 31: one codec in bot/store (bot/store/codec.py), not a `_text` per module."""
    store = Path(__file__).resolve().parents[2] / "bot" / "store"
    decoders = [
        f"{path.name}: {line.strip()}"
        for path in sorted(store.glob("*.py"))
        if path.name != "codec.py"
        for line in path.read_text().splitlines()
        if ".decode(" in line or line.startswith("def _text")
    ]
    assert decoders == []
