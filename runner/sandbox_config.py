"""The sandbox a runner's config and host settings ask for (runner/sandbox.py resolve): the same
for the runner's start (which refuses what it cannot give) and for every job."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bot.config.schema import Runner
from bot.config.settings import Settings
from runner import cgroup
from runner.sandbox import Sandbox, resolve


def step_memory_mb(runner: Runner | None, settings: Settings) -> int | None:
    """Each step process's memory (address space) in MiB: the runner's `step_memory_mb`, else
    CARRY_TASK_MEMORY_MB where the runner host sets it; None: no limit."""
    if runner is not None and runner.step_memory_mb is not None:
        return runner.step_memory_mb
    if "task_memory_mb" in settings.model_fields_set:
        return settings.task_memory_mb
    return None


def runner_sandbox(runner: Runner | None, settings: Settings, workdir: Path) -> Sandbox:
    """resolve() for `runner` (None: a runner with no config, which refuses every job), with
    a cgroup per step where the runner may make them."""
    if runner is None:
        return resolve("auto", None, workdir)
    setting = runner.sandbox
    box = resolve(
        setting.mode,
        runner.step_user,
        workdir,
        accept_risk=setting.accept_risk,
        step_network=setting.step_network,
        networked=bool(runner.networked()),
        broker_url=settings.redis_url.get_secret_value(),
        memory_mb=step_memory_mb(runner, settings),
    )
    try:
        return dataclasses.replace(box, cgroups=cgroup.find_root(), why_no_cgroups="")
    except OSError as err:
        return dataclasses.replace(box, why_no_cgroups=str(err))
