"""Engine speed on a vLLM-sized repository: re-apply and classify a 10-patch series on a new head.

Builds (once, cached under --workdir) a synthetic upstream with about 3k files and 40k commits
through `git fast-import`, a 10-patch series, and successive new heads (300 commits apart; the
first moves the context of half the patches). Every method starts warm on the old head and then
takes each new head once, in order, as the service does. In the same run it times, per head:
  carry check            Engine.check as the worker calls it: apply, classify, evidence, result tree
  carry check + commits  the same, also writing a commit per patch (`commit_result=True`)
  carry check (process)  the whole `carry check` command, one process per head, warm mirror
                         (and the same without --base: each patch anchored at its own From
                         commit, which the mirror holds, and with From commits it lacks)
  carry check (resident) the same command with a resident engine (`carry check --serve`) on
                         the cache dir: the process sends its command line to it; CPU counts
                         the client's and the server's (with its git children)
  (a)                    git clone + git am -3 of the series
  (b)                    an existing work tree: checkout of the new head + git am -3
and prints a ratio table against (b). A last table times one large, distant patch (--distant-files
files, made --distant-behind commits before the head, half its hunks conflicting) with its
history evidence, against a fresh clone + am -3 and a work tree + am -3 of the same patch. Fetching a head is timed apart (carry's fetch includes
extending its touch index), then added up: what the service pays per head is fetch + index +
check, against (b)'s fetch + checkout + am. Both fetch from a local path, so both find the
head's objects on the same file system: (b)'s clone hard-linked the upstream's packs, and
carry's mirror links them as it fetches.
Usage: python bench/engine.py [--files 3000] [--commits 40000] [--layout nested|flat]
       python bench/engine.py --processes 3 [--baseline-tree DIR]   (the whole-process rows
       alone, interleaved with (b); DIR: another revision's `bot`, measured in the same rounds)
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

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
PATCHED_INDEXES = range(0, 1000, 100)
LAYOUT = ["nested"]  # set from --layout


def path_of(index: int) -> str:
    """nested: vllm/p<k>/m<j>/mod_<i>.py, 30 files per directory, 10 directories per level,
    like vLLM's package tree; flat: all files in one directory (a worst case for tree sizes)."""
    if LAYOUT[0] == "flat":
        return f"vllm/mod_{index:04d}.py"
    return f"vllm/p{index // 300}/m{(index // 30) % 10}/mod_{index:04d}.py"


def patched() -> list[str]:
    return [path_of(i) for i in PATCHED_INDEXES]


def run(
    *args: str, cwd: Path | None = None, input: bytes | None = None, env: dict[str, str] = ENV
) -> str:
    proc = subprocess.run(args, cwd=cwd, input=input, env=env, capture_output=True, check=False)
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

    commit("initial import", [(path_of(i), file_text(i, 0)) for i in range(files)], False)
    for n in range(1, commits):
        index = (n * 7919) % files
        if index in PATCHED_INDEXES:
            index = (index + 1) % files
        commit(f"change {n}", [(path_of(index), file_text(index, n))], True)
    return b"".join(chunks)


def build_upstream(workdir: Path, files: int, commits: int) -> Path:
    upstream = workdir / f"upstream-{files}-{commits}-{LAYOUT[0]}"
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


def make_series(
    upstream: Path, workdir: Path, ahead: int, heads: int
) -> tuple[list[Path], str, list[str]]:
    """10 patches on the imported history, then `heads` successive new heads, each `ahead`
    commits after the one before (one file each, like a few days of upstream work). The first
    also moves the context of half the patches. Each head gets a branch, `head-<n>`."""
    old_head = run("git", "rev-parse", "imported", cwd=upstream).strip()
    series_dir = workdir / "series"
    shutil.rmtree(series_dir, ignore_errors=True)
    run("git", "checkout", "-q", "-B", "carry-series", old_head, cwd=upstream)
    for n, path in enumerate(patched()):
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
    for n, path in enumerate(patched()[::2]):
        target = upstream / path
        target.write_text("# upstream header\n" + target.read_text())
        run("git", "commit", "-q", "-am", f"upstream moves context {n}", cwd=upstream)
    new_heads = []
    for round_ in range(heads):
        run(
            "git",
            "fast-import",
            "--quiet",
            cwd=upstream,
            input=upstream_work(upstream, ahead, round_),
        )
        new_heads.append(run("git", "rev-parse", "main", cwd=upstream).strip())
    # Upstream starts at the old head; each new head is published (as branch head-<n>) only
    # when its turn comes, so nothing is fetched ahead of time.
    run("git", "checkout", "-q", "-f", "--detach", old_head, cwd=upstream)
    run("git", "branch", "-f", "main", old_head, cwd=upstream)
    run("git", "branch", "-D", "carry-series", cwd=upstream)
    publish_heads(upstream, [])
    return sorted(series_dir.glob("*.patch")), old_head, new_heads


def publish_heads(upstream: Path, heads: list[str]) -> None:
    """Upstream's head-<n> branches are exactly `heads`."""
    for ref in run(
        "git", "for-each-ref", "--format=%(refname)", "refs/heads/head-*", cwd=upstream
    ).split():
        run("git", "update-ref", "-d", ref, cwd=upstream)
    for n, head in enumerate(heads, 1):
        run("git", "branch", "-f", f"head-{n}", head, cwd=upstream)


def upstream_work(upstream: Path, commits: int, round_: int) -> bytes:
    """`commits` more commits on main, each rewriting one file the series does not touch."""
    parent = run("git", "rev-parse", "main", cwd=upstream).strip()
    chunks = [f"reset refs/heads/main\nfrom {parent}\n\n".encode()]
    for n in range(commits):
        index = 1 + (n * 37 + round_ * 11) % 2999
        if index in PATCHED_INDEXES:
            index += 1
        data = file_text(index, 100_000 * (round_ + 1) + n)
        stamp = 1_800_000_000 + round_ * 100_000 + n
        chunks.append(b"commit refs/heads/main\n")
        chunks.append(f"committer Bench <bench@example.com> {stamp} +0000\n".encode())
        chunks.append(b"data 12\nupstream day\n")
        chunks.append(f"M 100644 inline {path_of(index)}\n".encode())
        chunks.append(b"data %d\n%s\n" % (len(data), data))
    return b"".join(chunks)


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def carry_run(
    upstream: Path,
    cache: Path,
    patches: list[PatchInput],
    old: str,
    heads: list[str],
    commit_result: bool = False,
) -> tuple[list[float], list[float], list[str]]:
    """One carry engine, warm on the old head, then each new head in turn: (fetch + index
    times, check times, statuses seen)."""
    shutil.rmtree(cache, ignore_errors=True)
    publish_heads(upstream, [])
    mirror = Mirror(str(upstream), cache)
    mirror.resolve("imported")
    engine = Engine(mirror)
    engine.check(old, patches, base=old, commit_result=commit_result)
    fetches, checks, statuses = [], [], set()
    for n, head in enumerate(heads, 1):
        publish_heads(upstream, heads[:n])
        fetches.append(timed(functools.partial(mirror.resolve, f"head-{n}")))
        started = time.perf_counter()
        report = engine.check(head, patches, base=old, commit_result=commit_result)
        checks.append(time.perf_counter() - started)
        assert all(p.decision.value == "keep" for p in report.patches), report.summary()
        statuses |= {p.status.value for p in report.patches}
    engine.close()
    return fetches, checks, sorted(statuses)


def carry_command() -> list[str]:
    """The installed `carry` script next to this interpreter, else `python -m bot.cli`."""
    script = Path(sys.executable).with_name("carry")
    return [str(script)] if script.exists() else [sys.executable, "-m", "bot.cli"]


def process_run(
    upstream: Path,
    cache: Path,
    patch_files: list[Path],
    old: str,
    heads: list[str],
    *,
    anchored: bool = True,
) -> list[float]:
    """`carry check` as a whole process per head, on the mirror carry_run left warm, with its
    bytecode cached (outside the source tree) as an installed carry has it. Not `anchored`:
    without --base, as a script checks a downstream series whose commits upstream lacks (the
    engine then reads the head's history from the touch index)."""
    publish_heads(upstream, heads)
    env = {k: v for k, v in ENV.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache.parent / "pycache")
    env["CARRY_NO_RESIDENT"] = "1"  # in-process, even where a resident engine serves `cache`
    command = [*carry_command(), "check", "--repo", str(upstream), "--json"]
    command += ["--base", old] if anchored else []
    command += ["--cache-dir", str(cache)]
    for patch in patch_files:
        command += ["--patch", str(patch)]
    run(*command, "--head", old, env=env)  # writes the bytecode
    times = []
    for head in heads:
        started = time.perf_counter()
        out = run(*command, "--head", head, env=env)
        times.append(time.perf_counter() - started)
        decisions = [patch["decision"] for patch in json.loads(out)["patches"]]
        assert decisions == ["keep"] * len(patch_files), out
    return times


def start_resident(cache: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`carry check --serve` on `cache`, once its socket is there."""
    with log.open("wb") as out:
        server = subprocess.Popen(
            [*carry_command(), "check", "--serve", "--cache-dir", str(cache)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while not (cache / "check.sock").exists():
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise SystemExit(f"the resident engine did not start: {log.read_text()}")
        time.sleep(0.05)
    return server


def server_cpu(pid: int) -> float:
    """CPU seconds process `pid` used, with its children's: those it waited for and those still
    running (the engine's `git cat-file` reader)."""

    def ticks(process: int, fields: slice) -> int:
        try:
            stat = Path(f"/proc/{process}/stat").read_text()
        except FileNotFoundError:
            return 0  # ended meanwhile: counted in the parent's cutime once waited for
        return sum(int(f) for f in stat.rsplit(")", 1)[1].split()[fields])

    total = ticks(pid, slice(11, 15))  # utime, stime, cutime, cstime
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            total += ticks(int(child), slice(11, 13))
    return total / os.sysconf("SC_CLK_TCK")


def foreign_series(patch_files: list[Path], out: Path) -> list[Path]:
    """The series as a downstream repository of its own would write it: each From line names
    a commit the upstream (and so the mirror) has never had, so no patch has an anchor and
    every check asks the upstream for its branches and tags (the mirror's widening)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    written = []
    for n, patch in enumerate(patch_files):
        first, rest = patch.read_bytes().split(b"\n", 1)
        unknown = hashlib.sha1(b"downstream %d" % n).hexdigest().encode()
        target = out / patch.name
        target.write_bytes(b"From " + unknown + first[45:] + b"\n" + rest)
        written.append(target)
    return written


def process_table(
    upstream: Path,
    workdir: Path,
    patch_files: list[Path],
    old: str,
    heads: list[str],
    rounds: int,
    baseline_tree: Path | None = None,
) -> None:
    """The whole-process rows alone, interleaved with (b) head by head and round by round, so
    that a busy machine slows every row alike: wall time and CPU time (the process and its git
    children, which other work on the machine does not inflate), medians and ratios to (b).
    `baseline_tree`: a directory holding another revision's `bot` package (`git archive REV
    bot | tar -x -C DIR`), whose rows run in the same rounds: before and after in one run."""
    import resource

    cache = workdir / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(workdir / "baseline-cache", ignore_errors=True)
    publish_heads(upstream, heads)
    env = {k: v for k, v in ENV.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    foreign = foreign_series(patch_files, workdir / "foreign")

    def command(files: list[Path], anchored: bool) -> list[str]:
        line = [*carry_command(), "check", "--repo", str(upstream), "--json"]
        line += ["--base", old] if anchored else []
        line += ["--cache-dir", str(cache)]
        for patch in files:
            line += ["--patch", str(patch)]
        return line

    in_process = {**env, "CARRY_NO_RESIDENT": "1"}  # these rows never ask the resident engine
    rows = {
        "carry check (process)": command(patch_files, True),
        "  the same, no --base": command(patch_files, False),
        "  no --base, From unknown": command(foreign, False),
        "carry check (resident, no --base)": command(patch_files, False),
        "  resident, From unknown": command(foreign, False),
    }
    envs = {name: in_process for name in rows}
    resident_rows = [name for name in rows if "resident" in name]
    for name in resident_rows:
        envs[name] = env
    if baseline_tree is not None:
        # Its own mirror: an index or mirror layout of another revision is not shared. Started
        # as the console script of that revision did (`from bot.cli import main`).
        other = {**in_process, "PYTHONPATH": str(baseline_tree.resolve())}
        launcher = [sys.executable, "-c", "import sys; from bot.cli import main; sys.exit(main())"]
        for name, line in list(rows.items()):
            if name in resident_rows:
                continue
            at = line.index("--cache-dir") + 1
            label = f"{name.rstrip()} [{baseline_tree.name}]"
            rows[label] = [
                *launcher,
                *line[len(carry_command()) : at],
                str(workdir / "baseline-cache"),
                *line[at + 1 :],
            ]
            envs[label] = other
    server = start_resident(cache, env, workdir / "resident.log")
    for name, line in rows.items():  # warm: the mirror, its index, the bytecode
        for head in heads:
            run(*line, "--head", head, env=envs[name])
    worktree = workdir / "worktree"
    shutil.rmtree(worktree, ignore_errors=True)
    run("git", "clone", "-q", "--no-checkout", str(upstream), str(worktree))
    names = list(map(str, patch_files))

    def checkout_am(head: str) -> None:
        run("git", "checkout", "-q", "-f", head, cwd=worktree)
        run("git", "am", "-q", "-3", *names, cwd=worktree)

    checkout_am(old)
    baseline = "(b) work tree + am -3"
    wall: dict[str, list[float]] = {name: [] for name in [*rows, baseline]}
    cpu: dict[str, list[float]] = {name: [] for name in wall}

    def measure(name: str, fn: Callable[[], object]) -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        served = server_cpu(server.pid)
        wall[name].append(timed(fn))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        used = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        # A resident row's CPU: the client's and what the server (and its git) spent meanwhile.
        cpu[name].append(used + server_cpu(server.pid) - served)

    try:
        for _ in range(rounds):
            for head in heads:
                for name, line in rows.items():
                    measure(name, functools.partial(run, *line, "--head", head, env=envs[name]))
                measure(baseline, functools.partial(checkout_am, head))
    finally:
        server.terminate()
        server.wait(timeout=30)
    # Every resident row's check went through the server (one line each), none in-process.
    served = (workdir / "resident.log").read_text().count(" served ")
    expected = len(resident_rows) * len(heads) * (rounds + 1)
    if served != expected:
        raise SystemExit(f"the resident engine served {served} checks, not {expected}")
    print(
        f"\nwhole processes, interleaved with (b): {rounds} rounds of {len(heads)} heads "
        f"(medians; CPU: the process and its git children)"
    )
    width = max(len(name) for name in wall) + 2
    print(
        f"{'per new head':{width}}{'wall ms':>9}{'(b) / this':>12}{'CPU ms':>9}{'(b) / this':>12}"
    )
    base_wall = statistics.median(wall[baseline])
    base_cpu = statistics.median(cpu[baseline])
    for name in wall:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(
            f"{name:{width}}{w * 1000:>9.1f}{base_wall / w:>12.2f}"
            f"{c * 1000:>9.1f}{base_cpu / c:>12.2f}"
        )


def distant_patch(upstream: Path, workdir: Path, files: int, behind: int) -> tuple[Path, str]:
    """One patch of `files` files made `behind` commits before `imported`: half its hunks edit
    the line next to the `REVISION` line every upstream commit rewrites (they conflict), half
    edit a line upstream never touches."""
    old = run("git", "rev-parse", f"imported~{behind}", cwd=upstream).strip()
    current = run("git", "rev-parse", "HEAD", cwd=upstream).strip()
    run("git", "checkout", "-q", "-f", "-B", "carry-distant", old, cwd=upstream)
    for n in range(files):
        index = 5 + n * (2990 // files)
        if index in PATCHED_INDEXES:
            index += 1
        target = upstream / path_of(index)
        text = target.read_text()
        if n % 2:  # upstream rewrites this line in every commit touching the file
            start = text.index("REVISION = ")
            text = text[:start] + "REVISION = -1  # pinned" + text[text.index("\n", start) :]
        else:
            text = text.replace("return x * 15 +", f"return x * {n} - 1 + 0 *", 1)
        target.write_text(text)
    run("git", "commit", "-q", "-am", "carried distant fix", cwd=upstream)
    out = workdir / "distant"
    shutil.rmtree(out, ignore_errors=True)
    run("git", "format-patch", "-q", "-o", str(out), f"{old}..carry-distant", cwd=upstream)
    run("git", "checkout", "-q", "-f", "--detach", current, cwd=upstream)
    run("git", "branch", "-D", "carry-distant", cwd=upstream)
    return next(out.glob("*.patch")), old


def distant_rows(upstream: Path, workdir: Path, files: int, behind: int) -> dict[str, float]:
    patch, old = distant_patch(upstream, workdir, files, behind)
    head = run("git", "rev-parse", "imported", cwd=upstream).strip()
    item = [PatchInput(patch.name, patch.read_bytes())]
    cache = workdir / "cache"
    mirror = Mirror(str(upstream), cache)
    mirror.resolve("imported")
    rows: dict[str, float] = {}
    Engine(mirror).check(head, item, base=old)  # warms the mirror's index and the OS cache
    for name, base in (("carry check, history", old), ("carry check, no base", None)):
        engine = Engine(mirror)
        started = time.perf_counter()
        report = engine.check(head, item, base=base)
        rows[name] = time.perf_counter() - started
        engine.close()
        statuses = sorted({p.status.value for p in report.patches})
        print(f"  {name}: {', '.join(statuses)} ({report.patches[0].reason[:70]})")

    def am(target: Path, fresh: bool) -> None:
        if fresh:
            shutil.rmtree(target, ignore_errors=True)
            run("git", "clone", "-q", "--no-checkout", str(upstream), str(target))
        run("git", "checkout", "-q", "-f", head, cwd=target)
        am_args = ["git", "am", "-q", "-3", str(patch)]
        proc = subprocess.run(am_args, cwd=target, env=ENV, capture_output=True)
        if proc.returncode != 0:
            subprocess.run(["git", "am", "--abort"], cwd=target, env=ENV, capture_output=True)

    rows["(a) clone + am -3"] = timed(functools.partial(am, workdir / "distant-clone", True))
    tree = workdir / "distant-clone"
    run("git", "checkout", "-q", "-f", f"{head}~1", cwd=tree)
    rows["(b) work tree + am -3"] = timed(functools.partial(am, tree, False))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--commits", type=int, default=40000)
    parser.add_argument("--heads", type=int, default=5, help="successive new heads to time")
    parser.add_argument("--ahead", type=int, default=300, help="upstream commits per new head")
    parser.add_argument("--layout", choices=("nested", "flat"), default="nested")
    parser.add_argument("--distant-files", type=int, default=40)
    parser.add_argument("--distant-behind", type=int, default=20000)
    parser.add_argument("--only-distant", action="store_true", help="skip the series tables")
    parser.add_argument(
        "--processes",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="only the whole-process rows, interleaved with (b) for ROUNDS rounds of the heads",
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="with --processes: also the rows of the `bot` package in this directory",
    )
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "carry-bench")
    args = parser.parse_args()
    LAYOUT[0] = args.layout
    args.workdir.mkdir(parents=True, exist_ok=True)
    upstream = build_upstream(args.workdir, args.files, args.commits)
    if args.only_distant:
        print_distant(upstream, args)
        return 0
    patch_files, old_head, heads = make_series(upstream, args.workdir, args.ahead, args.heads)
    if args.processes:
        process_table(
            upstream, args.workdir, patch_files, old_head, heads, args.processes, args.baseline_tree
        )
        return 0
    patches = [PatchInput(p.name, p.read_bytes()) for p in patch_files]

    fetch_index, carry_check, statuses = carry_run(
        upstream, args.workdir / "cache", patches, old_head, heads
    )
    _, carry_commits, _ = carry_run(
        upstream, args.workdir / "cache", patches, old_head, heads, commit_result=True
    )
    carry_process = process_run(upstream, args.workdir / "cache", patch_files, old_head, heads)
    unanchored = process_run(
        upstream, args.workdir / "cache", patch_files, old_head, heads, anchored=False
    )
    foreign = process_run(
        upstream,
        args.workdir / "cache",
        foreign_series(patch_files, args.workdir / "foreign"),
        old_head,
        heads,
        anchored=False,
    )
    names = list(map(str, patch_files))

    def clone_am(head: str) -> None:
        target = args.workdir / "clone"
        shutil.rmtree(target, ignore_errors=True)
        run("git", "clone", "-q", "--no-checkout", str(upstream), str(target))
        run("git", "checkout", "-q", head, cwd=target)
        run("git", "am", "-q", "-3", *names, cwd=target)

    publish_heads(upstream, heads)
    worktree = args.workdir / "worktree"
    shutil.rmtree(worktree, ignore_errors=True)
    run(
        "git",
        "clone",
        "-q",
        "--no-checkout",
        "--single-branch",
        "-b",
        "imported",
        str(upstream),
        str(worktree),
    )
    run("git", "checkout", "-q", "-f", old_head, cwd=worktree)
    run("git", "am", "-q", "-3", *names, cwd=worktree)  # warm: the series on the old head
    worktree_fetch, worktree_am = [], []

    def checkout_am(head: str) -> None:
        run("git", "checkout", "-q", "-f", head, cwd=worktree)
        run("git", "am", "-q", "-3", *names, cwd=worktree)

    for n, head in enumerate(heads, 1):
        fetch = functools.partial(run, "git", "fetch", "-q", "origin", f"head-{n}", cwd=worktree)
        worktree_fetch.append(timed(fetch))
        worktree_am.append(timed(functools.partial(checkout_am, head)))
    results = {
        "carry check": carry_check,
        "carry check + commits": carry_commits,
        "carry check (process)": carry_process,
        "  the same, no --base": unanchored,
        "  no --base, From unknown": foreign,
        "(a) clone + am -3": [timed(functools.partial(clone_am, h)) for h in heads],
        "(b) work tree + am -3": worktree_am,
    }
    files = len(run("git", "ls-tree", "-r", "--name-only", heads[-1], cwd=upstream).splitlines())
    commits = run("git", "rev-list", "--count", heads[-1], cwd=upstream).strip()
    print(
        f"\nrepository: {files} files ({args.layout}), {commits} commits; "
        f"series: {len(patches)} patches "
        f"({', '.join(statuses)}); {len(heads)} successive heads, {args.ahead} commits apart"
    )
    base = statistics.median(results["(b) work tree + am -3"])
    print(f"{'per new head':24}{'median ms':>10}{'max ms':>9}{'(b) / this':>12}")
    for name, times in results.items():
        med = statistics.median(times)
        print(f"{name:24}{med * 1000:>10.1f}{max(times) * 1000:>9.1f}{base / med:>12.1f}")
    print("\nfetching each head (not in the rows above; both need it):")
    for name, times in (("carry fetch + index", fetch_index), ("(b) git fetch", worktree_fetch)):
        print(f"{name:24}{statistics.median(times) * 1000:>10.1f}{max(times) * 1000:>9.1f}")
    end_to_end = {
        "carry fetch+index+check": [f + c for f, c in zip(fetch_index, carry_check, strict=True)],
        "(b) fetch+checkout+am": [f + a for f, a in zip(worktree_fetch, worktree_am, strict=True)],
    }
    print("\na new head end to end (what each side pays per head):")
    print(f"{'per new head':24}{'median ms':>10}{'max ms':>9}{'(b) / this':>12}")
    e2e_base = statistics.median(end_to_end["(b) fetch+checkout+am"])
    for name, times in end_to_end.items():
        med = statistics.median(times)
        print(f"{name:24}{med * 1000:>10.1f}{max(times) * 1000:>9.1f}{e2e_base / med:>12.1f}")
    print_distant(upstream, args)
    return 0


def print_distant(upstream: Path, args: argparse.Namespace) -> None:
    print(
        f"\none patch of {args.distant_files} files made {args.distant_behind} commits before "
        "the head, half its hunks conflicting, checked once by a fresh engine:"
    )
    rows = distant_rows(upstream, args.workdir, args.distant_files, args.distant_behind)
    base = rows["(b) work tree + am -3"]
    print(f"{'distant patch':24}{'ms':>10}{'(b) / this':>12}")
    for name, seconds in rows.items():
        print(f"{name:24}{seconds * 1000:>10.1f}{base / seconds:>12.2f}")


if __name__ == "__main__":
    sys.exit(main())
