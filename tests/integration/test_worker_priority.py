"""The workers yield the CPU to the web process: each pool process of `carry worker` (and
every git it starts) runs at CARRY_WORKER_NICE (10) or nicer, the worker's main process and
`carry web` at the priority they were started with. bench/scale.py found the overview's p95
at 200 series 4-5x its figure alone while the git lane saturated the CPUs. Failed before:
the pool processes ran at the web's priority."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.config import ConfigError, load_settings
from harness.carry_env import BODY, CarryEnv, wait_for
from tests.support.procs import children_of


def nice_of(pid: int) -> int:
    """The nice value of a process, from /proc/PID/stat (field 19)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[16])


@pytest.fixture
def carry(tmp_path: Path, redis_url: str):
    env = CarryEnv(tmp_path, redis_url)
    env.carry_patches([{"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}])
    env.write_config()
    yield env
    env.stop()


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
