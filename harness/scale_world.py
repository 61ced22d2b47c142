"""A synthetic world for the service-scale benches (bench/scale.py, bench/overview.py) and the
tests that need one: S series of P patches each on synthetic upstreams (a number of series on
each), a downstream repository of patch directories and fix pages, and the GitHub emulator
holding them all. Each patch makes line 10 of one upstream file the series' own, so no two
series have the same result tree."""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.emulator import GitHubEmulator
from harness.carry_env import PAGE
from harness.gitrepo import RepoBuilder, git

UP_OWNER, DOWN_OWNER, DOWN_NAME = "upstream-org", "downstream-org", "carry"
KIND, CHECK = "cheap", "applied"
PUSHER = "upstream-dev"  # a trusted author: heads run on the runner without /carry approve
CHECK_RUN = ["sh", "-c", "test -s mod.py"]
LINES = 40


@dataclass(frozen=True)
class Size:
    series: int
    patches: int

    def __str__(self) -> str:
        return f"S={self.series} P={self.patches}"


def blob_id(content: str) -> str:
    data = content.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def upstream_file(k: int) -> str:
    return "".join(f"value_{k}_{i} = compute({i})\n" for i in range(1, LINES + 1))


def patch_text(series_id: str, k: int) -> str:
    """Patch k of a series as `git format-patch` writes it: line 10 of f<k>.py (mod.py for the
    first) made the series' own, so no two series have the same result tree."""
    name = "mod.py" if k == 0 else f"f{k}.py"
    before = upstream_file(k)
    lines = before.splitlines(keepends=True)
    old, new = lines[9], lines[9].replace("compute(10)", f'compute(10, series="{series_id}")')
    after = "".join([*lines[:9], new, *lines[10:]])
    context_before, context_after = lines[6:9], lines[10:13]
    hunk = "@@ -7,7 +7,7 @@\n"
    hunk += "".join(" " + line for line in context_before) + "-" + old + "+" + new
    hunk += "".join(" " + line for line in context_after)
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: carry bench <bench@carry.invalid>\n"
        "Date: Tue, 1 Sep 2026 00:00:00 +0000\n"
        f"Subject: [PATCH] {series_id}: make value 10 of {name} safe\n\n"
        f"---\n {name} | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n\n"
        f"diff --git a/{name} b/{name}\n"
        f"index {blob_id(before)[:12]}..{blob_id(after)[:12]} 100644\n"
        f"--- a/{name}\n+++ b/{name}\n{hunk}"
        "-- \n2.43.0\n\n"
    )


@dataclass
class World:
    root: Path
    size: Size
    per_upstream: int
    upstreams: list[RepoBuilder] = field(default_factory=list)
    series: dict[str, int] = field(default_factory=dict)  # series id -> its upstream's index

    @property
    def downstream(self) -> Path:
        return self.root / "downstream"

    def build(self) -> None:
        count = math.ceil(self.size.series / self.per_upstream)
        for u in range(count):
            repo = RepoBuilder(self.root / f"up{u}")
            files = {"mod.py": upstream_file(0)}
            files |= {f"f{k}.py": upstream_file(k) for k in range(1, self.size.patches)}
            repo.commit("base", files)
            self.upstreams.append(repo)
        for n in range(self.size.series):
            sid = f"s{n:03d}"
            self.series[sid] = n % count
            directory = self.downstream / "patches" / sid
            directory.mkdir(parents=True)
            names = []
            for k in range(self.size.patches):
                name = f"{k + 1:04d}-make-value-10-safe.patch"
                (directory / name).write_text(patch_text(sid, k))
                names.append(name)
            (directory / "series").write_text("\n".join(names) + "\n")
            touched = "; ".join(
                f"{name}: {'mod.py' if k == 0 else f'f{k}.py'}" for k, name in enumerate(names)
            )
            (directory / "the-fix.md").write_text(PAGE.format(patches=touched))
        git(self.downstream, "init", "-q", "-b", "main")
        git(self.downstream, "add", "-A")
        git(self.downstream, "commit", "-q", "-m", "carry the fixes")

    def config(self, gh: GitHubEmulator, runner_dir: Path) -> dict[str, Any]:
        check = {"run": CHECK_RUN, "timeout_s": 60}
        return {
            "downstream": {"repo": f"{DOWN_OWNER}/{DOWN_NAME}", "branch": "main"},
            "upstreams": {
                f"up{u}": {"url": gh.git_url(UP_OWNER, f"up{u}"), "repo": f"{UP_OWNER}/up{u}"}
                for u in range(len(self.upstreams))
            },
            "series": [
                {
                    "id": sid,
                    "upstream": f"up{u}",
                    "base": {"branch": "main"},
                    "patches": sid,
                    "runners": [KIND],
                    "checks": [CHECK],
                    "trusted_authors": [PUSHER],
                }
                for sid, u in self.series.items()
            ],
            "polling": {"refs_every_s": 3600},
            "runners": {
                KIND: {"queue": f"hw.{KIND}", "workdir": str(runner_dir), "checks": {CHECK: check}}
            },
        }


@contextlib.contextmanager
def github(world: World) -> Iterator[GitHubEmulator]:
    with GitHubEmulator(world.root / "gh") as gh:
        for u, repo in enumerate(world.upstreams):
            gh.create_repo(UP_OWNER, f"up{u}", from_path=repo.path)
        gh.create_repo(DOWN_OWNER, DOWN_NAME, from_path=world.downstream, private=True, plan="team")
        gh.add_user("carry[bot]", type="Bot")
        gh.add_token("carry-token", "carry[bot]")
        gh.set_permission(DOWN_OWNER, DOWN_NAME, "carry[bot]", "write")
        gh.add_user(PUSHER)
        yield gh
