"""A cgroup per step, where the runner may make them (issue 33): every process a step starts
stays in it, a double-forked `setsid` daemon included (it leaves the step's process group, never
its cgroup); the runner ends whatever is left in it when the step ends, in every sandbox mode;
and the step's memory is capped as a whole (step_memory_mb), where the per-process limit
(RLIMIT_AS) lets many processes together take the host's memory.

The runner makes them under its own cgroup of the memory controller: cgroup v2 (memory.max,
memory.events, cgroup.kill) or v1 (memory.limit_in_bytes, memory.oom_control). Where it cannot
(not root, no memory controller, a v2 cgroup whose controllers are not delegated), steps are
followed by their process group only, and the runner says so once at start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

log = logging.getLogger("carry.runner")

CGROUP_FS: Final = Path("/sys/fs/cgroup")
PREFIX: Final = "carry-step-"


@dataclass(frozen=True)
class CgroupRoot:
    """Where the runner makes its steps' cgroups: a directory of the memory hierarchy."""

    path: Path
    version: int  # 1 or 2

    def create(self, name: str, memory_mb: int | None) -> StepCgroup:
        """A new cgroup for one step; OSError when it cannot be made or limited."""
        path = self.path / f"{PREFIX}{name}"
        path.mkdir()
        group = StepCgroup(path, self.version)
        try:
            if memory_mb is not None:
                limit = str(memory_mb * 1024 * 1024)
                if self.version == 2:
                    (path / "memory.max").write_text(limit)
                    swap = path / "memory.swap.max"
                    if swap.exists():  # no way around the limit by swapping
                        swap.write_text("0")
                else:
                    (path / "memory.limit_in_bytes").write_text(limit)
                    swap = path / "memory.memsw.limit_in_bytes"
                    if swap.exists():  # memory and swap together: no way around it by swapping
                        with contextlib.suppress(OSError):
                            swap.write_text(limit)
        except OSError:
            group.remove()
            raise
        return group


@dataclass(frozen=True)
class StepCgroup:
    path: Path
    version: int

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def join(self) -> None:
        """Moves the calling process into the cgroup (a step's preexec_fn: before it runs
        anything, so that all it starts is inside)."""
        self.procs.write_text("0")

    def members(self) -> list[int]:
        try:
            return [int(line) for line in self.procs.read_text().split()]
        except (OSError, ValueError):
            return []

    def end(self, grace_s: float = 2.0) -> list[int]:
        """Kills every process left in the cgroup (what left the step's process group too);
        returns the pids it found there."""
        left = self.members()
        if not left:
            return []
        kill = self.path / "cgroup.kill"
        if self.version == 2 and kill.exists():
            with contextlib.suppress(OSError):
                kill.write_text("1")
        deadline = time.monotonic() + grace_s
        while (pids := self.members()) and time.monotonic() < deadline:
            for pid in pids:  # a process forking meanwhile is caught on the next round
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        return left

    def out_of_memory(self) -> int:
        """How many of the step's processes the kernel killed at the cgroup's memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in (self.path / name).read_text().splitlines():
                word, _, count = line.partition(" ")
                if word == "oom_kill":
                    return int(count)
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()


def find_root(base: Path = CGROUP_FS, self_cgroup: Path = Path("/proc/self/cgroup")) -> CgroupRoot:
    """The runner's own cgroup of the memory controller, if it may make cgroups under it;
    OSError (saying why) otherwise."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError as err:
        raise OSError(f"cannot read {self_cgroup}: {err.strerror}") from None
    own: dict[str, str] = {}
    for line in lines:
        _, controllers, where = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = where.lstrip("/")
    if "memory" in own and (base / "memory").is_dir():  # cgroup v1's memory hierarchy
        root = CgroupRoot(base / "memory" / own["memory"], 1)
    elif "" in own and (base / "cgroup.controllers").exists():  # cgroup v2 mounted at base
        root = CgroupRoot(base / own[""], 2)
        enabled = (root.path / "cgroup.subtree_control").read_text().split()
        if "memory" not in enabled:
            raise OSError(
                f"{root.path} does not give its children the memory controller (cgroup v2: "
                "run the runner in a delegated cgroup, e.g. systemd's Delegate=yes)"
            )
    else:
        raise OSError(f"no memory cgroup controller under {base}")
    probe = root.path / f"{PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as err:
        raise OSError(f"cannot make cgroups under {root.path}: {err.strerror}") from None
    return root
