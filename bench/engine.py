"""Engine speed on a vLLM-sized repository: re-apply and classify a 10-patch series on a new head.

Builds (once, cached under --workdir) a synthetic upstream with about 3k files and 40k commits
through `git fast-import`, a 10-patch series, and a new head whose commits move the context of
some patches. Then, in the same run, it times:
  carry     Engine.check on the new head with a warm mirror (objects already fetched)
  (a)       git clone + git am -3 of the series
  (b)       an existing work tree: checkout of the new head + git am -3
and prints a ratio table. Usage: python bench/engine.py [--files 3000] [--commits 40000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror

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
}
LINES_PER_FILE = 40
PATCHED = [f"vllm/mod_{i:04d}.py" for i in range(0, 1000, 100)]


def run(*args: str, cwd: Path | None = None, input: bytes | None = None) -> str:
    proc = subprocess.run(args, cwd=cwd, input=input, env=ENV, capture_output=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout.decode()


def file_text(index: int, revision: int) -> bytes:
    lines = [f"# module {index}\n", f"REVISION = {revision}\n"]
    lines += [
        f"def fn_{index}_{n}(x):\n    return x * {n} + {index}\n"
        for n in range(LINES_PER_FILE // 2)
    ]
    return "".join(lines).encode()


def fast_import_stream(files: int, commits: int) -> bytes:
    chunks: list[bytes] = []
    stamp = 1_700_000_000

    def commit(message: str, changes: list[tuple[str, bytes]], parent: bool) -> None:
        nonlocal stamp
        stamp += 60
        chunks.append(b"commit refs/heads/main\n")
        chunks.append(f"committer Bench <bench@example.com> {stamp} +0000\n".encode())
        msg = message.encode()
        chunks.append(b"data %d\n%s\n" % (len(msg), msg))
        if not parent:
            pass
        for path, data in changes:
            chunks.append(f"M 100644 inline {path}\n".encode())
            chunks.append(b"data %d\n%s\n" % (len(data), data))

    commit(
        "initial import", [(f"vllm/mod_{i:04d}.py", file_text(i, 0)) for i in range(files)], False
    )
    for n in range(1, commits):
        index = (n * 7919) % files
        if f"vllm/mod_{index:04d}.py" in PATCHED:
            index = (index + 1) % files
        commit(f"change {n}", [(f"vllm/mod_{index:04d}.py", file_text(index, n))], True)
    return b"".join(chunks)


def build_upstream(workdir: Path, files: int, commits: int) -> Path:
    upstream = workdir / f"upstream-{files}-{commits}"
    if (upstream / ".git").exists():
        return upstream
    tmp = workdir / "building"
    shutil.rmtree(tmp, ignore_errors=True)
    run("git", "init", "-q", "-b", "main", str(tmp))
    started = time.perf_counter()
    run("git", "fast-import", "--quiet", cwd=tmp, input=fast_import_stream(files, commits))
    run("git", "checkout", "-q", "-f", "main", cwd=tmp)
    run("git", "tag", "imported", cwd=tmp)
    tmp.rename(upstream)
    print(f"built {files} files x {commits} commits in {time.perf_counter() - started:.1f} s")
    return upstream


def make_series(upstream: Path, workdir: Path, ahead: int) -> tuple[list[Path], str, str]:
    """10 patches on the imported history, then a new head `ahead` commits later (one file
    each, like a few days of upstream work) that also moves the context of half the patches."""
    old_head = run("git", "rev-parse", "imported", cwd=upstream).strip()
    series_dir = workdir / "series"
    shutil.rmtree(series_dir, ignore_errors=True)
    run("git", "checkout", "-q", "-B", "carry-series", old_head, cwd=upstream)
    for n, path in enumerate(PATCHED):
        target = upstream / path
        text = target.read_text().replace("return x * 5 +", f"return x * 5 + {n} +")
        target.write_text(text)
        run("git", "commit", "-q", "-am", f"carried fix {n}", cwd=upstream)
    run(
        "git",
        "format-patch",
        "-q",
        "-o",
        str(series_dir),
        f"{old_head}..carry-series",
        cwd=upstream,
    )
    run("git", "checkout", "-q", "-B", "main", old_head, cwd=upstream)
    for n, path in enumerate(PATCHED[::2]):
        target = upstream / path
        target.write_text("# upstream header\n" + target.read_text())
        run("git", "commit", "-q", "-am", f"upstream moves context {n}", cwd=upstream)
    run("git", "fast-import", "--quiet", cwd=upstream, input=upstream_work(upstream, ahead))
    run("git", "reset", "-q", "--hard", "main", cwd=upstream)
    new_head = run("git", "rev-parse", "main", cwd=upstream).strip()
    return sorted(series_dir.glob("*.patch")), old_head, new_head


def upstream_work(upstream: Path, commits: int) -> bytes:
    """`commits` more commits on main, each rewriting one file the series does not touch."""
    parent = run("git", "rev-parse", "main", cwd=upstream).strip()
    chunks = [f"reset refs/heads/main\nfrom {parent}\n\n".encode()]
    for n in range(commits):
        index = 1 + (n * 37) % 2999
        if f"vllm/mod_{index:04d}.py" in PATCHED:
            index += 1
        data = file_text(index, 100_000 + n)
        chunks.append(b"commit refs/heads/main\n")
        chunks.append(f"committer Bench <bench@example.com> {1_800_000_000 + n} +0000\n".encode())
        chunks.append(b"data 12\nupstream day\n")
        chunks.append(f"M 100644 inline vllm/mod_{index:04d}.py\n".encode())
        chunks.append(b"data %d\n%s\n" % (len(data), data))
    return b"".join(chunks)


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--commits", type=int, default=40000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ahead", type=int, default=300, help="upstream commits in the new head")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "carry-bench")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    upstream = build_upstream(args.workdir, args.files, args.commits)
    patch_files, old_head, new_head = make_series(upstream, args.workdir, args.ahead)
    patches = [PatchInput(p.name, p.read_bytes()) for p in patch_files]
    cache = args.workdir / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    mirror = Mirror(str(upstream), cache)
    mirror.resolve("main")  # warm mirror: objects fetched before timing
    engine = Engine(mirror)
    report = engine.check(new_head, patches, base=old_head)
    statuses = sorted({p.status.value for p in report.patches})
    assert all(p.decision.value == "keep" for p in report.patches), statuses

    def carry() -> None:
        engine.check(new_head, patches, base=old_head)

    def clone_am() -> None:
        target = args.workdir / "clone"
        shutil.rmtree(target, ignore_errors=True)
        run("git", "clone", "-q", "--no-checkout", str(upstream), str(target))
        run("git", "checkout", "-q", new_head, cwd=target)
        run("git", "am", "-q", "-3", *map(str, patch_files), cwd=target)

    worktree = args.workdir / "worktree"
    if not worktree.exists():
        run("git", "clone", "-q", str(upstream), str(worktree))
    run("git", "fetch", "-q", "origin", cwd=worktree)

    def worktree_am() -> None:
        run("git", "checkout", "-q", "-f", old_head, cwd=worktree)
        run("git", "checkout", "-q", "-f", new_head, cwd=worktree)
        run("git", "am", "-q", "-3", *map(str, patch_files), cwd=worktree)

    results = {
        "carry (no checkout)": timed(carry, args.repeat),
        "(a) clone + am -3": timed(clone_am, max(2, args.repeat // 2)),
        "(b) work tree + am -3": timed(worktree_am, args.repeat),
    }
    files = len(run("git", "ls-tree", "-r", "--name-only", new_head, cwd=upstream).splitlines())
    commits = run("git", "rev-list", "--count", new_head, cwd=upstream).strip()
    print(
        f"\nrepository: {files} files, {commits} commits; series: {len(patches)} patches ({', '.join(statuses)})"
    )
    base = statistics.median(results["carry (no checkout)"])
    print(f"{'method':24}{'median s':>10}{'min s':>9}{'x carry':>9}")
    for name, times in results.items():
        med = statistics.median(times)
        print(f"{name:24}{med:>10.3f}{min(times):>9.3f}{med / base:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
