"""Measure drop decisions on a distro's quilt patch series, labelled by the distro's own history.

Usage:
  python bench/quilt.py UPSTREAM DISTRO --layout debian [--branch master] [--steps N]
  python bench/quilt.py UPSTREAM DISTRO --layout openwrt --package utils/lxc [--steps N]
  (or --patches DIR --version-file FILE --version-regex RE for any other layout)

UPSTREAM is a git repository with the upstream's release tags; DISTRO is the distro's packaging
repository, holding a quilt series (a `series` file listing the patches, or, without one, every
patch file of the directory in name order, as OpenWrt applies them). The distro's first-parent
history on --branch is cut into release steps: the runs of commits whose packaged upstream
version (read from --version-file) stays the same; a step's series is the one of its last
commit. The step's version names an upstream tag (the tag whose numbers are the version's
numbers: 9.8p1 -> V_9_8_P1, 6.0.5 -> v6.0.5 or lxc-6.0.5).

For two consecutive steps, made for upstream releases T1 and T2, every patch of the first step's
series is a sample, checked (the whole series, in order) on T2, once without a base and once
with `--base T1`. Its label comes from the distro's next step:
- "contained": the distro dropped the patch (no patch of that name or of that content, by patch
  id) when it moved to T2;
- "not contained": the distro kept it;
- "kept, upstream has it": the distro kept it although T2 holds it already (`git apply --check
  -R` succeeds on T2). Its own category: a drop there is not a wrong drop.
A wrong drop is a drop of a "not contained" sample. `--hotspots` also times the engine's
`_conflict_details` and `history.recent_file_history` (wrapped in this process, not changed).

The corpora measured in docs/performance.md (fetched as bare repositories, nothing of them is
copied into this repository):
  openssh: fetch github:openssh/openssh-portable (snapshot at 0ef0f5a)
           fetch github:0mp/openssh-debian (snapshot at b0577ef, branch master, debian/patches)
    python bench/quilt.py /work/.mirror/openssh+openssh-portable/repo \\
        /work/.mirror/0mp+openssh-debian/repo --layout debian --name openssh
  lxc:     fetch github:lxc/lxc (snapshot at e7b855a; v7.0.0 is the tag object 24f2a63)
           fetch github:openwrt/packages (snapshot at 0521bb5, branch master, utils/lxc/patches)
    python bench/quilt.py /work/.mirror/lxc+lxc/repo /work/.mirror/openwrt+packages/repo \\
        --layout openwrt --package utils/lxc --name lxc
"""

from __future__ import annotations

import argparse
import itertools
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.realhistory import _env, git, share_objects
from bot.core.classify import Decision
from bot.core.patchid import patch_id
from bot.git import engine as engine_module
from bot.git import history
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror

CONTAINED = "contained"
NOT_CONTAINED = "not-contained"
KEPT_UPSTREAM_HAS_IT = "kept-upstream-has-it"
LABELS = (CONTAINED, NOT_CONTAINED, KEPT_UPSTREAM_HAS_IT)
MODES = ("no base", "--base T1")

DEBIAN_VERSION = r"\A\S+ \((?:\d+:)?([^)\s-]+)"  # "openssh (1:9.8p1-3) ..." -> 9.8p1
OPENWRT_VERSION = r"^PKG_VERSION:=(\S+)"
PATCH_SUFFIXES = (".patch", ".diff")


@dataclass(frozen=True)
class Corpus:
    name: str
    upstream: Path
    distro: Path
    branch: str
    patches_dir: str  # inside the distro repository
    version_file: str  # inside the distro repository
    version_regex: str  # group 1 is the upstream version


@dataclass(frozen=True)
class QuiltPatch:
    name: str  # as the series lists it
    data: bytes


@dataclass(frozen=True)
class Step:
    version: str
    tag: str  # the upstream tag the version names
    commit: str  # the distro commit whose series this is
    series: tuple[QuiltPatch, ...]


@dataclass(frozen=True)
class Sample:
    t1: str  # tag the series was made for
    t2: str  # tag it is checked on
    patch: QuiltPatch
    label: str
    reverse_applies: bool  # plain git's safe catch: `git apply --check -R` succeeds on T2


@dataclass
class Measurement:
    corpus: str
    steps: int
    samples: list[Sample] = field(default_factory=list)
    decisions: dict[str, list[Decision]] = field(default_factory=dict)  # mode -> per sample
    reasons: dict[str, list[str]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # mode -> engine time


def read_blob(repo: Path, commit: str, path: str) -> bytes | None:
    proc = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "blob", f"{commit}:{path}"],
        capture_output=True,
        env=_env(),
    )
    return proc.stdout if proc.returncode == 0 else None


def distro_commits(corpus: Corpus) -> list[str]:
    """First-parent commits of the distro branch touching the version file or the patches,
    oldest first."""
    out = git(
        corpus.distro,
        "log",
        "--first-parent",
        "--reverse",
        "--format=%H",
        corpus.branch,
        "--",
        corpus.version_file,
        corpus.patches_dir,
    )
    return out.split()


def version_at(corpus: Corpus, commit: str) -> str | None:
    text = read_blob(corpus.distro, commit, corpus.version_file)
    if text is None:
        return None
    found = re.search(corpus.version_regex, text.decode("utf-8", "replace"), re.M)
    return found.group(1) if found else None


def series_names(corpus: Corpus, commit: str) -> list[str]:
    """The patches in apply order: the `series` file's entries (quilt options and comments
    left out), else the directory's patch files sorted by name."""
    listed = read_blob(corpus.distro, commit, f"{corpus.patches_dir}/series")
    if listed is not None:
        lines = listed.decode("utf-8", "replace").splitlines()
        return [line.split()[0] for line in lines if line.strip() and not line.startswith("#")]
    files = git(corpus.distro, "ls-tree", "--name-only", f"{commit}:{corpus.patches_dir}")
    return sorted(name for name in files.split("\n") if name.endswith(PATCH_SUFFIXES))


def series_at(corpus: Corpus, commit: str) -> tuple[QuiltPatch, ...]:
    patches = []
    for name in series_names(corpus, commit):
        data = read_blob(corpus.distro, commit, f"{corpus.patches_dir}/{name}")
        if data is not None:
            patches.append(QuiltPatch(name, data))
    return tuple(patches)


def version_numbers(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", text))


def tags_by_numbers(upstream: Path) -> dict[tuple[int, ...], str]:
    """Upstream tags keyed by the numbers in their names; the first name wins a tie."""
    found: dict[tuple[int, ...], str] = {}
    for tag in git(upstream, "tag", "--list").split():
        if version_numbers(tag):
            found.setdefault(version_numbers(tag), tag)
    return found


def last_commit_per_version(corpus: Corpus) -> list[tuple[str, str]]:
    """(version, last distro commit packaging it), in the order the versions last appear."""
    last: dict[str, str] = {}
    for commit in distro_commits(corpus):
        version = version_at(corpus, commit)
        if version is not None:
            last.pop(version, None)  # a version packaged again moves to where it last appears
            last[version] = commit
    return list(last.items())


def release_steps(corpus: Corpus) -> list[Step]:
    """The distro's release steps whose version names an upstream tag, oldest first."""
    tags = tags_by_numbers(corpus.upstream)
    steps = []
    for version, commit in last_commit_per_version(corpus):
        tag = tags.get(version_numbers(version))
        series = series_at(corpus, commit)
        if tag is not None and series:
            steps.append(Step(version, tag, commit, series))
    return steps


def content_id(patch: QuiltPatch) -> str | None:
    return patch_id(patch.data)


def reverse_applies(upstream: Path, rev: str, patch: bytes) -> bool:
    """`git apply --check -R` of the patch on rev's tree (a private index, no work tree)."""
    with tempfile.TemporaryDirectory(prefix="carry-quilt-") as scratch:
        env = {**_env(), "GIT_INDEX_FILE": str(Path(scratch) / "index")}
        base = ["git", "-C", str(upstream)]
        subprocess.run([*base, "read-tree", rev], env=env, capture_output=True, check=True)
        check = [*base, "apply", "--cached", "-R", "--check", "-"]
        return subprocess.run(check, input=patch, env=env, capture_output=True).returncode == 0


def label_samples(upstream: Path, step: Step, following: Step) -> list[Sample]:
    """Every patch of `step`'s series, labelled by what the distro did at `following`."""
    kept_names = {p.name for p in following.series}
    kept_ids = {i for p in following.series if (i := content_id(p)) is not None}
    samples = []
    for patch in step.series:
        kept = patch.name in kept_names or content_id(patch) in kept_ids
        upstream_has_it = reverse_applies(upstream, following.tag, patch.data)
        if not kept:
            label = CONTAINED
        elif upstream_has_it:
            label = KEPT_UPSTREAM_HAS_IT
        else:
            label = NOT_CONTAINED
        samples.append(Sample(step.tag, following.tag, patch, label, upstream_has_it))
    return samples


def commit_of(upstream: Path, tag: str) -> str:
    return git(upstream, "rev-parse", f"{tag}^{{commit}}").strip()


def check_step(engine: Engine, upstream: Path, samples: list[Sample], with_base: bool) -> list[Any]:
    """The engine's reports for one step's series (the samples, in series order) on T2."""
    head = commit_of(upstream, samples[0].t2)
    base = commit_of(upstream, samples[0].t1) if with_base else None
    patches = [PatchInput(s.patch.name, s.patch.data) for s in samples]
    return engine.check(head, patches, base=base).patches


def make_engine(upstream: Path, cache: Path) -> Engine:
    mirror = Mirror(str(upstream), cache)
    share_objects(mirror, upstream)
    return Engine(mirror)


def step_pairs(corpus: Corpus, limit: int | None) -> list[tuple[Step, Step]]:
    """Consecutive release steps, the newest `limit` of them when a limit is given."""
    pairs = list(itertools.pairwise(release_steps(corpus)))
    return pairs[-limit:] if limit else pairs


def measure(
    corpus: Corpus, steps: int | None = None, *, cache: Path | None = None, verbose: bool = False
) -> Measurement:
    """Labels and checks the corpus' step pairs (the newest `steps` of them), each mode with an
    engine and mirror of its own under `cache` (a fresh temporary directory by default)."""
    pairs = step_pairs(corpus, steps)
    result = Measurement(corpus.name, len(pairs))
    cache = cache or Path(tempfile.mkdtemp(prefix="carry-quilt-"))
    engines = {
        mode: make_engine(corpus.upstream, cache / f"mirror-{i}") for i, mode in enumerate(MODES)
    }
    for step, following in pairs:
        samples = label_samples(corpus.upstream, step, following)
        result.samples += samples
        step_seconds = {}
        for mode in MODES:
            started = time.perf_counter()
            reports = check_step(engines[mode], corpus.upstream, samples, mode != "no base")
            step_seconds[mode] = time.perf_counter() - started
            result.seconds[mode] = result.seconds.get(mode, 0.0) + step_seconds[mode]
            result.decisions.setdefault(mode, []).extend(r.decision for r in reports)
            result.reasons.setdefault(mode, []).extend(r.reason for r in reports)
        if verbose:
            print_step(result, len(samples), step_seconds)
    return result


def print_step(result: Measurement, count: int, seconds: dict[str, float]) -> None:
    start = len(result.samples) - count
    timing = ", ".join(f"{mode} {spent:.1f} s" for mode, spent in seconds.items())
    print(f"step {result.samples[start].t1} -> {result.samples[start].t2}: {timing}")
    for index in range(start, len(result.samples)):
        sample = result.samples[index]
        got = " ".join(f"{result.decisions[m][index].value:6}" for m in MODES)
        print(f"{sample.t1}->{sample.t2} {sample.label:20} {got} {sample.patch.name}", flush=True)


def tally(result: Measurement, mode: str) -> Counter[tuple[str, str]]:
    """(label, decision) -> samples, for one mode."""
    return Counter(
        (sample.label, decision.value)
        for sample, decision in zip(result.samples, result.decisions.get(mode, []), strict=True)
    )


def caught(result: Measurement, mode: str) -> int:
    counts = tally(result, mode)
    return counts[(CONTAINED, "drop")] + counts[(CONTAINED, "review")]


def wrong_drops(result: Measurement, mode: str) -> list[str]:
    decisions, reasons = result.decisions.get(mode, []), result.reasons.get(mode, [])
    pairs = zip(result.samples, decisions, reasons, strict=True)
    return [
        f"{mode}: {s.patch.name} ({s.t1} -> {s.t2}): {reason}"
        for s, decision, reason in pairs
        if s.label == NOT_CONTAINED and decision == Decision.DROP
    ]


def label_count(result: Measurement, label: str) -> int:
    return sum(1 for s in result.samples if s.label == label)


def table(result: Measurement) -> str:
    """A markdown table: one row per mode."""
    contained = label_count(result, CONTAINED)
    negatives = label_count(result, NOT_CONTAINED)
    has_it = label_count(result, KEPT_UPSTREAM_HAS_IT)
    plain = sum(1 for s in result.samples if s.label == CONTAINED and s.reverse_applies)
    lines = [
        f"{result.corpus}: {result.steps} release steps, {len(result.samples)} samples "
        f"({contained} contained, {negatives} not contained, {has_it} kept, upstream has it); "
        f"plain `git apply --check -R` on T2 catches {plain}/{contained} contained",
        "",
        "| mode | caught of contained (drop + review) | reviews on not-contained | wrong drops "
        "| kept, upstream has it: drop/review/keep | engine s |",
        "|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        counts = tally(result, mode)
        kept_row = "/".join(
            str(counts[(KEPT_UPSTREAM_HAS_IT, d)]) for d in ("drop", "review", "keep")
        )
        lines.append(
            f"| {mode} | {caught(result, mode)}/{contained} ({counts[(CONTAINED, 'drop')]} drops) "
            f"| {counts[(NOT_CONTAINED, 'review')]}/{negatives} "
            f"| {len(wrong_drops(result, mode))} | {kept_row} "
            f"| {result.seconds.get(mode, 0.0):.0f} |"
        )
    return "\n".join(lines)


@contextmanager
def hotspot_timer() -> Iterator[dict[str, float]]:
    """Seconds spent in the engine's conflict details and their recent-commit look-ups, timed
    by wrapping the two functions for the duration (the engine's code is not changed)."""
    spent: dict[str, float] = defaultdict(float)
    patch_check = engine_module._PatchCheck
    originals = (patch_check._conflict_details, history.recent_file_history)

    def timed(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - started
                spent[f"{name} calls"] += 1

        return wrapper

    patch_check._conflict_details = timed("_conflict_details", originals[0])  # type: ignore[method-assign]
    history.recent_file_history = timed("history.recent_file_history", originals[1])
    try:
        yield spent
    finally:
        patch_check._conflict_details, history.recent_file_history = originals  # type: ignore[method-assign]


def corpus_from(args: argparse.Namespace) -> Corpus:
    if args.layout == "debian":
        patches, version_file, regex = "debian/patches", "debian/changelog", DEBIAN_VERSION
    elif args.layout == "openwrt":
        if not args.package:
            raise SystemExit("--layout openwrt needs --package DIR (e.g. utils/lxc)")
        patches, version_file = f"{args.package}/patches", f"{args.package}/Makefile"
        regex = OPENWRT_VERSION
    else:
        patches, version_file, regex = args.patches, args.version_file, args.version_regex
        if not (patches and version_file and regex):
            raise SystemExit("without --layout give --patches, --version-file and --version-regex")
    name = args.name or args.distro.name
    return Corpus(name, args.upstream, args.distro, args.branch, patches, version_file, regex)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("upstream", type=Path)
    parser.add_argument("distro", type=Path)
    parser.add_argument("--layout", choices=("debian", "openwrt"))
    parser.add_argument("--package", help="openwrt: the package's directory (utils/lxc)")
    parser.add_argument("--patches", help="the series directory inside the distro repository")
    parser.add_argument("--version-file", help="the file naming the packaged upstream version")
    parser.add_argument("--version-regex", help="its group 1 is the upstream version")
    parser.add_argument("--branch", default="master")
    parser.add_argument("--name", help="the corpus' name in the table")
    parser.add_argument("--steps", type=int, help="only the newest N release steps")
    parser.add_argument("--hotspots", action="store_true", help="time the known slow spots")
    parser.add_argument("--verbose", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    corpus = corpus_from(args)
    started = time.perf_counter()
    with hotspot_timer() if args.hotspots else _no_timer() as spent:
        result = measure(corpus, args.steps, verbose=args.verbose)
    print(f"\n{table(result)}\n\nrun time {time.perf_counter() - started:.0f} s")
    for name, value in sorted(spent.items()):
        print(f"  {name}: {value:.1f}" if "calls" not in name else f"  {name}: {value:.0f}")
    for mode in MODES:
        for line in wrong_drops(result, mode):
            print("  WRONG DROP:", line)
    return 0


@contextmanager
def _no_timer() -> Iterator[dict[str, float]]:
    yield {}


if __name__ == "__main__":
    sys.exit(main())
