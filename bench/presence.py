"""The presence table across heads (issue 35): `carry check` with three `--head`s in one process
against three `carry check` processes, one per head, on the synthetic upstream of
bench/engine.py (same files, commits and 10-patch series; the three heads are its successive new
heads, `--ahead` commits apart). Both sides run on the same warm mirror with their bytecode
cached, interleaved round by round, with and without `--base` (without it, the series' commits
are ones upstream lacks, as a script checking a downstream series has them). The one-process run
must decide as the three do, head by head; the table prints each side's median over the rounds
and the ratio.

    python bench/presence.py [--files 3000] [--commits 40000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import engine as synthetic  # the same upstream and series

HEADS = 3


def timed_run(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    out = synthetic.run(*command, env=env)
    return time.perf_counter() - started, out


def decisions(report: dict[str, object]) -> list[tuple[str, str]]:
    patches = report["patches"]
    assert isinstance(patches, list)
    return [(p["status"], p["decision"]) for p in patches]


def measure(
    command: list[str], names: list[str], env: dict[str, str], rounds: int
) -> tuple[list[float], list[float]]:
    """(per round: the three processes' total, the one process's time)."""
    separate_runs, together_runs = [], []
    for _ in range(rounds):
        total, single = 0.0, []
        for name in names:
            seconds, out = timed_run([*command, "--head", name], env)
            total += seconds
            single.append(decisions(json.loads(out)))
        separate_runs.append(total)
        heads = [arg for name in names for arg in ("--head", name)]
        seconds, out = timed_run([*command, *heads], env)
        together_runs.append(seconds)
        table = json.loads(out)
        together = [
            [(p["cells"][n]["status"], p["cells"][n]["decision"]) for p in table["patches"]]
            for n in range(len(names))
        ]
        assert together == single, (together, single)
    return separate_runs, together_runs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--commits", type=int, default=40000)
    parser.add_argument("--ahead", type=int, default=300, help="upstream commits between heads")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layout", choices=("nested", "flat"), default="nested")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "carry-bench")
    args = parser.parse_args()
    synthetic.LAYOUT[0] = args.layout
    args.workdir.mkdir(parents=True, exist_ok=True)
    upstream = synthetic.build_upstream(args.workdir, args.files, args.commits)
    patch_files, old_head, heads = synthetic.make_series(upstream, args.workdir, args.ahead, HEADS)
    synthetic.publish_heads(upstream, heads)
    names = [f"head-{n}" for n in range(1, HEADS + 1)]
    cache = args.workdir / "presence-cache"
    env = {k: v for k, v in synthetic.ENV.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(args.workdir / "pycache")
    command = [*synthetic.carry_command(), "check", "--repo", str(upstream), "--json"]
    command += ["--cache-dir", str(cache)]
    for patch in patch_files:
        command += ["--patch", str(patch)]
    rows = {}
    for label, extra in (("no --base", []), ("--base", ["--base", old_head])):
        # Warm: the mirror holds every head, the bytecode is written.
        synthetic.run(*command, *extra, *(a for n in names for a in ("--head", n)), env=env)
        rows[label] = measure([*command, *extra], names, env, args.rounds)
    files = len(
        synthetic.run("git", "ls-tree", "-r", "--name-only", heads[-1], cwd=upstream).split()
    )
    commits = synthetic.run("git", "rev-list", "--count", heads[-1], cwd=upstream).strip()
    print(
        f"\nrepository: {files} files ({args.layout}), {commits} commits; series: "
        f"{len(patch_files)} patches; {HEADS} heads, {args.ahead} commits apart; "
        f"median of {args.rounds} rounds, whole processes (cpus: {os.cpu_count()})"
    )
    print(f"{'presence of 3 heads':28}{'3 processes ms':>16}{'1 process ms':>14}{'ratio':>8}")
    for label, (separate, together) in rows.items():
        apart, once = statistics.median(separate), statistics.median(together)
        print(f"{label:28}{apart * 1000:>16.1f}{once * 1000:>14.1f}{apart / once:>7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
