"""A decompression bomb from an upstream head (issue 33): what one `carry check` costs before
and after the blob-size limit, measured in the same run.

Builds an upstream whose head turns a file the series edits into a ~150 MB file of repeated
lines (its pack holds it in well under a megabyte), next to a file another patch edits. Then
runs the whole `carry check` command on that head, once with the limit out of the way
(CARRY_MAX_BLOB_BYTES of 1 TiB: the engine and git read the file as they did before the limit)
and once with the default (16 MiB), each in a fresh cache, and prints time and peak memory
(ru_maxrss of the command and the git it waited for) with their ratios.
Usage: python bench/blob_bomb.py [--mb 150] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
OFF = 1 << 40  # a limit no file reaches: the engine reads what it is given, as before
ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
    "GIT_AUTHOR_DATE": "@1767225600 +0000",
    "GIT_COMMITTER_DATE": "@1767225600 +0000",
    "PYTHONPATH": str(REPO_ROOT),
}
BODY = "".join(f"value_{i} = compute({i})\n" for i in range(1, 41))
TABLE = "".join(f"row_{i} = {i}\n" for i in range(1, 41))
BOMB_LINE = b"# " + b"x" * 97 + b"\n"  # 100 bytes


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


def commit(repo: Path, message: str, files: dict[str, bytes]) -> str:
    for name, data in files.items():
        (repo / name).write_bytes(data)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@dataclass(frozen=True)
class Upstream:
    path: Path
    head: str
    patches: list[Path]
    bomb_bytes: int
    pack_bytes: int


def build(root: Path, megabytes: int) -> Upstream:
    """main: mod.py and table.py; the series: one patch per file; the head: table.py is the
    bomb, mod.py is as it was."""
    repo = root / "upstream"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "base", {"mod.py": BODY.encode(), "table.py": TABLE.encode()})
    git(repo, "checkout", "-q", "-b", "carried")
    commit(repo, "Grow the table", {"table.py": TABLE.replace("row_5 = 5", "row_5 = 50").encode()})
    fixed = BODY.replace("compute(10)", "compute(10, safe=True)")
    commit(repo, "Fix value 10", {"mod.py": fixed.encode()})
    out = root / "patches"
    names = git(repo, "format-patch", "-q", "-o", str(out), "main..carried")
    patches = [Path(line) for line in names.splitlines()] or sorted(out.glob("*.patch"))
    git(repo, "checkout", "-q", "main")
    # Written a megabyte at a time: this process stays small, and so does the ru_maxrss its
    # children start from.
    lines = megabytes * 1_000_000 // len(BOMB_LINE)
    chunk = BOMB_LINE * 10_000
    with open(repo / "table.py", "wb") as out:
        out.write(TABLE.encode())
        for _ in range(lines // 10_000):
            out.write(chunk)
    size = (repo / "table.py").stat().st_size
    head = commit(repo, "Upstream grows the table", {})
    git(repo, "gc", "-q")
    pack = sum(p.stat().st_size for p in (repo / ".git" / "objects" / "pack").glob("*.pack"))
    (repo / "table.py").write_bytes(b"")  # the work tree's copy is not what carry reads
    return Upstream(repo, head, patches, size, pack)


@dataclass(frozen=True)
class Run:
    label: str
    seconds: float
    peak_mib: float
    statuses: list[str]


def carry_check(up: Upstream, cache: Path, limit: int | None, label: str) -> Run:
    env = {**ENV}
    if limit is not None:
        env["CARRY_MAX_BLOB_BYTES"] = str(limit)
    argv = [sys.executable, "-m", "bot.cli", "check", "--repo", str(up.path), "--head", up.head]
    argv += ["--cache-dir", str(cache), "--patch", *map(str, up.patches)]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    output = proc.stdout.read().decode("utf-8", "replace")
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"carry check ({label}) exited {proc.returncode}:\n{output}")
    statuses = [
        line.split()[1] for line in output.splitlines() if line.split()[0].endswith(".patch")
    ]
    # ru_maxrss (KiB): the largest of the command and the git processes it waited for.
    return Run(label, seconds, usage.ru_maxrss / 1024, statuses)


def render(up: Upstream, before: Run, after: Run) -> str:
    lines = [
        f"upstream head {up.head[:12]}: table.py is {up.bomb_bytes / 1e6:.0f} MB; "
        f"the repository's pack is {up.pack_bytes / 1024:.0f} KiB",
        "",
        "| carry check of 2 patches | time (s) | peak memory (MiB) | patch statuses |",
        "|---|---|---|---|",
    ]
    for run in (before, after):
        lines.append(
            f"| {run.label} | {run.seconds:.2f} | {run.peak_mib:.0f} | {', '.join(run.statuses)} |"
        )
    lines.append(
        f"| ratio (before / after) | {before.seconds / after.seconds:.1f}x | "
        f"{before.peak_mib / after.peak_mib:.1f}x | |"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mb", type=int, default=150, help="size of the bomb (MB)")
    parser.add_argument("--keep", type=Path, help="build here and keep it (default: a temp dir)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="carry-blob-bomb-"))
    try:
        up = build(root, args.mb)
        after = carry_check(up, root / "cache-after", None, "after: CARRY_MAX_BLOB_BYTES default")
        before = carry_check(up, root / "cache-before", OFF, "before: no limit (1 TiB)")
        print(render(up, before, after))
        blocked = after.statuses[:1] == ["invalid"] and after.statuses[1:] == ["applies"]
        return 0 if blocked else 1
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
