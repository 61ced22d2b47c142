"""The commands the service gives to reproduce a conflict work on another machine: they clone
the downstream repository and name the patches by their paths in it (they used to name the
worker's own files), and running them stops where carry stopped."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bot.store import series as store
from harness.carry_env import BODY, SERIES, one_fix_in_this_process
from harness.gitrepo import PINNED_ENV
from workers import runtime as runtime_module
from workers.rebase import rebase_series


@pytest.fixture
def env(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch):
    with one_fix_in_this_process(tmp_path, redis_url, monkeypatch, committed=True) as carry:
        yield carry


def test_the_reproduce_commands_of_a_conflict_run_on_a_clean_machine(env, tmp_path):
    head = env.upstream.commit(
        "upstream rewrites 10", {"mod.py": BODY.replace("compute(10)", "x(10)")}
    )
    rt = runtime_module.runtime()
    assert rebase_series(rt, SERIES, head, "refs/heads/main") is not None
    state = store.load_series(rt.redis, SERIES)
    assert state is not None
    (patch,) = state.patches
    assert patch.status == "conflict"
    commands = patch.conflict["reproduce"]
    # The patch comes from a clone of the downstream repository, by its path in it.
    assert commands[0].startswith("git clone --depth 1 -b main ")
    assert commands[-1] == f"git am -3 ../carry-downstream/patches/{SERIES}/{patch.name}"
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    run = subprocess.run(
        ["bash", "-c", " && ".join(commands)],
        cwd=laptop,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(laptop), **PINNED_ENV},
        timeout=60,
    )
    output = run.stdout + run.stderr
    assert run.returncode != 0 and "No such file" not in output, output
    assert f"Patch failed at 0001 {patch.subject}" in output or "patch does not apply" in output
