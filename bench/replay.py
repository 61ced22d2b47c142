"""`carry replay` speed: heads per minute for a one-patch series on a synthetic upstream.

Builds (through `git fast-import`, in a temporary directory) an upstream of --files files
laid out like vLLM's package tree and --history commits, then --heads more commits to
replay. Every --touch-every-th of those edits the patched file (a line above the patch, so
its context moves and carry proposes a refresh); one stretch rewrites the patched line
(a conflict) and a later commit restores it. The rest edit other files. Then it runs the
replay (bot.replay.run, as `carry replay --patch` does) on a cold cache and prints the heads
walked, heads per minute in the walk, and the summary; with --profile, the functions where
the walk spends its time.

Usage: python bench/replay.py [--files 3000] [--history 2000] [--heads 500] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot import replay as walker
from bot.git.engine import Engine
from bot.git.mirror import Mirror

ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}
PATCHED = 100  # the index of the file the series patches
FUNCTIONS = 20


def path_of(index: int) -> str:
    return f"vllm/p{index // 300}/m{(index // 30) % 10}/mod_{index:04d}.py"


def file_text(index: int, revision: int, header: int = 0, rewritten: bool = False) -> bytes:
    lines = [f"# header {n} of module {index}\n" for n in range(header)]
    lines += [f"# module {index}\n", f"REVISION = {revision}\n"]
    for n in range(FUNCTIONS):
        body = f"    return x * {n} + {index}\n"
        if rewritten and n == 5:
            body = f"    return sum((x, {n}, {index}))  # rewritten upstream\n"
        lines.append(f"def fn_{index}_{n}(x):\n{body}")
    return "".join(lines).encode()


def patched_text(header: int = 0) -> bytes:
    text = file_text(PATCHED, 0, header).decode()
    return text.replace(
        f"    return x * 5 + {PATCHED}\n", f"    return x * 5 + {PATCHED} + carried_offset(x)\n"
    ).encode()


def run(*args: str, cwd: Path, input: bytes | None = None) -> str:
    proc = subprocess.run(args, cwd=cwd, input=input, env=ENV, capture_output=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout.decode()


def build(root: Path, files: int, history: int, heads: int, touch_every: int) -> tuple[Path, Path]:
    """The upstream (its replay start tagged `start`) and the series' one patch file."""
    upstream = root / "upstream"
    run("git", "init", "-q", "-b", "main", str(upstream), cwd=root)
    chunks: list[bytes] = []
    stamp = [1_767_225_600]

    def commit(message: str, changes: list[tuple[str, bytes]]) -> None:
        stamp[0] += 3600  # an hour apart: several months of heads
        chunks.append(b"commit refs/heads/main\n")
        chunks.append(f"committer Bench <bench@example.com> {stamp[0]} +0000\n".encode())
        chunks.append(b"data %d\n%s\n" % (len(message), message.encode()))
        for path, data in changes:
            chunks.append(f"M 100644 inline {path}\n".encode())
            chunks.append(b"data %d\n%s\n" % (len(data), data))

    commit("initial import", [(path_of(i), file_text(i, 0)) for i in range(files)])
    for n in range(1, history):
        index = (n * 7919) % files or 1
        index = index + 1 if index == PATCHED else index
        commit(f"change {n}", [(path_of(index), file_text(index, n))])
    run("git", "fast-import", "--quiet", cwd=upstream, input=b"".join(chunks))
    run("git", "tag", "start", "main", cwd=upstream)
    # The patch, made on the start.
    patch = _patch(upstream, root)
    chunks.clear()
    chunks.append(b"reset refs/heads/main\nfrom refs/tags/start\n\n")
    header = 0
    conflict = range(heads // 2, heads // 2 + 20)
    for n in range(heads):
        if n in conflict:
            rewritten = n != conflict[-1]
            message = "rewrite fn 5" if n == conflict[0] else f"work {n}"
            if n == conflict[-1]:
                message = 'Revert "rewrite fn 5"'
            commit(message, [(path_of(PATCHED), file_text(PATCHED, 0, header, rewritten))])
        elif n % touch_every == touch_every - 1:
            header += 1
            commit(f"header {header}", [(path_of(PATCHED), file_text(PATCHED, 0, header))])
        else:
            index = 1 + (n * 37) % (files - 1)
            index = index + 1 if index == PATCHED else index
            commit(f"work {n}", [(path_of(index), file_text(index, 10_000 + n))])
    run("git", "fast-import", "--quiet", cwd=upstream, input=b"".join(chunks))
    return upstream, patch


def _patch(upstream: Path, root: Path) -> Path:
    run("git", "checkout", "-q", "-f", "-B", "carried", "start", cwd=upstream)
    (upstream / path_of(PATCHED)).write_bytes(patched_text())
    run("git", "commit", "-q", "-am", "Add a carried offset", cwd=upstream)
    out = root / "series"
    names = run("git", "format-patch", "-q", "-o", str(out), "start..carried", cwd=upstream)
    run("git", "checkout", "-q", "-f", "main", cwd=upstream)
    run("git", "branch", "-D", "carried", cwd=upstream)
    return Path(names.split()[0]) if names.strip() else next(out.glob("*.patch"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--history", type=int, default=2000)
    parser.add_argument("--heads", type=int, default=500)
    parser.add_argument("--touch-every", type=int, default=10)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="carry-replay-bench-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        upstream, patch = build(root, args.files, args.history, args.heads, args.touch_every)
        print(
            f"built {args.files} files, {args.history} + {args.heads} commits in "
            f"{time.perf_counter() - started:.1f} s"
        )
        spec = walker.ReplaySpec(
            repo=str(upstream),
            start="start",
            end="main",
            series_id="bench",
            files=walker.loose_patches([(patch.name, patch.read_bytes())]),
            order=(patch.name,),
        )
        cache = root / "cache"
        profile = cProfile.Profile() if args.profile else None
        started = time.perf_counter()
        if profile is not None:
            profile.enable()
        result = walker.run(spec, Engine(Mirror(spec.repo, cache)), cache)
        if profile is not None:
            profile.disable()
        total = time.perf_counter() - started
        heads = len(result.records)
        summary = result.summary
        print(
            f"replayed {heads} heads in {total:.2f} s with the mirror's set-up "
            f"({heads / total * 60:,.0f} heads/min); the walk itself {result.walk_s:.2f} s "
            f"({heads / result.walk_s * 60:,.0f} heads/min)"
        )
        print(
            f"summary: PRs opened {summary.prs_opened}, merged {summary.prs_merged}, "
            f"conflicts {summary.conflicts}, reviews {summary.reviews}, "
            f"human actions {summary.human_actions}"
        )
        if profile is not None:
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(30)
            print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
