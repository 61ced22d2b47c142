"""A series too big to check is refused before the engine runs, naming the limit (issue 13:
twenty patches on a 37 MB file kept every other series queued for minutes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.store import series as store
from harness.carry_env import BODY, SERIES, CarryEnv, in_this_process
from workers import rebase
from workers import runtime as runtime_module
from workers.rebase import rebase_series
from workers.runtime import Runtime

FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
BIG = {"mod.py": FIX["mod.py"] + "".join(f"extra_{n} = {n}\n" for n in range(3000))}


@pytest.fixture
def env(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[CarryEnv]:
    carry = CarryEnv(tmp_path, redis_url)
    carry.carry_patches([FIX, BIG])
    carry.write_config()
    with in_this_process(carry, monkeypatch):
        yield carry


def limited(monkeypatch: pytest.MonkeyPatch, variable: str, value: int) -> Runtime:
    """A fresh runtime whose settings have `variable` set to `value`."""
    monkeypatch.setenv(variable, str(value))
    runtime_module.reset()
    return runtime_module.runtime()


def test_a_patch_over_the_size_limit_is_refused_before_the_engine_runs(
    env: CarryEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = limited(monkeypatch, "CARRY_MAX_PATCH_BYTES", 20000)
    ran: list[str] = []
    monkeypatch.setattr(rebase, "_check", lambda *a, **k: ran.append("engine"))
    assert rebase_series(rt, SERIES, env.upstream.head(), "refs/heads/main") is None
    assert ran == []
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.phase == "error"
    assert "0002-Carried-fix-number-2.patch is" in (state.error or "")
    assert "over the limit of 20,000 (CARRY_MAX_PATCH_BYTES)" in (state.error or "")
    (entry,) = env.history("series-invalid")
    assert "CARRY_MAX_PATCH_BYTES" in entry["data"]["problems"][0]


def test_too_many_patches_are_refused_and_within_the_limits_it_checks(
    env: CarryEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = limited(monkeypatch, "CARRY_MAX_SERIES_PATCHES", 1)
    assert rebase_series(rt, SERIES, env.upstream.head(), "refs/heads/main") is None
    assert "2 patches, over the limit of 1" in (store.load_series(rt.redis, SERIES).error or "")  # type: ignore[union-attr]
    rt = limited(monkeypatch, "CARRY_MAX_SERIES_PATCHES", 2)
    finished = rebase_series(rt, SERIES, env.upstream.head(), "refs/heads/main", force=True)
    assert finished is not None and finished.outcome != "error"
