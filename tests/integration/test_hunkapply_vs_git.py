"""apply_hunks against real `git apply --cached`: seeded random files, random edits, diffs made
by git with several context sizes, and targets that drifted from the diff's preimage.

Whenever git applies a patch, apply_hunks must give git's bytes and git's "moved" verdict, or
fail (the caller then runs git); whenever git refuses, apply_hunks must refuse too.
"""

from __future__ import annotations

import os
import random
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bot.core.hunkapply import apply_hunks
from bot.core.patchfile import parse_patch
from harness.gitrepo import EPOCH, PINNED_ENV

SEEDS = (20260101, 5)
CASES = 150
CONTEXT_SIZES = (0, 1, 3, 5)
DIRECTIONS = ("fwd", "rev")
LINE_TEXTS = ("a", "ab", "b", "c", "d", "a ", "b\t", "", "x y")
MAX_FALLBACK_RATE = 0.02

ENV = {
    **os.environ,
    **PINNED_ENV,
    "GIT_AUTHOR_DATE": f"@{EPOCH} +0000",
    "GIT_COMMITTER_DATE": f"@{EPOCH} +0000",
}


def run_git(
    cwd: Path, *args: str, stdin: bytes = b"", ok_codes: tuple[int, ...] = (0,)
) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, input=stdin, capture_output=True, env=ENV, check=False
    )
    assert proc.returncode in ok_codes, f"git {args}: {proc.stderr.decode(errors='replace')}"
    return proc


# --- random content ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Style:
    """How one file's lines look: few distinct texts, so that hunks fit in several places."""

    texts: tuple[str, ...]
    eol: str  # "\n", "\r\n" or "mixed"

    def lines(self, rng: random.Random, count: int) -> list[bytes]:
        return [(rng.choice(self.texts) + self.ending(rng)).encode() for _ in range(count)]

    def ending(self, rng: random.Random) -> str:
        return rng.choice(("\n", "\r\n")) if self.eol == "mixed" else self.eol


def random_file(rng: random.Random) -> tuple[list[bytes], Style]:
    style = Style(
        tuple(rng.sample(LINE_TEXTS, rng.randint(2, 6))),
        rng.choices(("\n", "\r\n", "mixed"), weights=(8, 1, 1))[0],
    )
    count = rng.choice((0, 1, 2, rng.randint(3, 12), rng.randint(10, 40), rng.randint(10, 40)))
    lines = style.lines(rng, count)
    if lines and rng.random() < 0.3:
        lines[-1] = lines[-1].rstrip(b"\r\n")
    return lines, style


def toggle_final_newline(rng: random.Random, lines: list[bytes], style: Style) -> None:
    if not lines:
        return
    if lines[-1].endswith(b"\n"):
        lines[-1] = lines[-1].rstrip(b"\r\n")
    else:
        lines[-1] += style.ending(rng).encode()


def seal(rng: random.Random, lines: list[bytes], style: Style) -> list[bytes]:
    """Only the last line may lack its newline: close any line an edit moved off the end."""
    return [
        line if line.endswith(b"\n") or i == len(lines) - 1 else line + style.ending(rng).encode()
        for i, line in enumerate(lines)
    ]


def edit(rng: random.Random, lines: list[bytes], style: Style) -> list[bytes]:
    """The downstream change the patch records: a few replaced, inserted and deleted lines."""
    lines = list(lines)
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(("replace", "insert", "insert", "delete", "eof"))
        at = rng.randint(0, len(lines))
        if kind == "replace" and at < len(lines):
            lines[at : at + 1] = style.lines(rng, 1)
        elif kind == "insert":
            lines[at:at] = style.lines(rng, rng.randint(1, 3))
        elif kind == "delete":
            del lines[at : at + rng.randint(1, 2)]
        elif kind == "eof" and rng.random() < 0.4:
            toggle_final_newline(rng, lines, style)
    return seal(rng, lines, style)


DRIFTS = {
    "insert": 4,
    "duplicate": 3,
    "straddle": 3,
    "append": 2,
    "grow_last": 3,
    "delete": 1,
    "change": 1,
    "eof": 1,
}
Span = tuple[int, int]  # a hunk's preimage in the drifted file's base: first line index, length


def drift(rng: random.Random, lines: list[bytes], style: Style, spans: list[Span]) -> list[bytes]:
    """The tree the patch is applied to: the patch's preimage after unrelated upstream changes."""
    lines = list(lines)
    for _ in range(rng.choice((0, 1, 1, 2, 3))):
        kind = rng.choices(list(DRIFTS), weights=list(DRIFTS.values()))[0]
        at = rng.randint(0, len(lines))
        if kind == "insert":
            lines[at:at] = style.lines(rng, rng.randint(1, 6))
        elif kind == "duplicate":
            block = lines[at : at + rng.randint(1, 8)]
            copy_to = rng.randint(0, len(lines))
            lines[copy_to:copy_to] = block
        elif kind == "straddle" and spans:
            span = rng.choice(spans)
            straddle(lines, span, distance=(span[1] + 1) // 2 + rng.randint(0, 3))
        elif kind == "append":
            lines += style.lines(rng, rng.randint(1, 3))
        elif kind == "grow_last" and lines:
            grown = lines[-1].rstrip(b"\r\n") + rng.choice((b" ", b"\t", b"b", b"b"))
            lines[-1:] = [grown + style.ending(rng).encode(), *style.lines(rng, rng.randint(1, 2))]
        elif kind == "delete":
            del lines[at : at + 1]
        elif kind == "change":
            lines[at : at + 1] = style.lines(rng, 1)
        elif kind == "eof":
            toggle_final_newline(rng, lines, style)
    return seal(rng, lines, style)


def straddle(lines: list[bytes], span: Span, distance: int) -> None:
    """Moves a hunk's preimage away and puts copies `distance` lines above and below where it
    was, so that only git's search order (forward first) decides between them."""
    start, length = span
    below = start + distance - length  # where the lower copy goes before the upper one shifts it
    if start - distance < 0 or below < start - distance or start + length > len(lines):
        return
    block = lines[start : start + length]
    del lines[start : start + length]
    if below > len(lines):
        return
    lines[below:below] = block
    lines[start - distance : start - distance] = block


@dataclass
class Case:
    name: str
    original: list[bytes]
    modified: list[bytes]
    style: Style
    targets: dict[str, bytes] = field(default_factory=dict)  # direction -> content to patch


def make_cases(rng: random.Random) -> list[Case]:
    cases: list[Case] = []
    while len(cases) < CASES:
        original, style = random_file(rng)
        modified = edit(rng, original, style)
        if b"".join(modified) != b"".join(original):
            cases.append(Case(f"c{len(cases)}", original, modified, style))
    return cases


def add_targets(rng: random.Random, cases: list[Case], diffs: dict[str, bytes]) -> None:
    """Drifts each side of each case, aiming some drifts at the hunks of the case's diff."""
    for case in cases:
        hunks = parse_patch(diffs[case.name]).files[0].hunks
        old_spans = [(h.old_start - 1, h.old_len) for h in hunks if h.old_len]
        new_spans = [(h.new_start - 1, h.new_len) for h in hunks if h.new_len]
        case.targets = {
            "fwd": b"".join(drift(rng, case.original, case.style, old_spans)),
            "rev": b"".join(drift(rng, case.modified, case.style, new_spans)),
        }


# --- git, in batches --------------------------------------------------------------------------


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    root.mkdir(parents=True)
    for name, data in files.items():
        (root / name).write_bytes(data)


def per_file_diffs(work: Path, context: int) -> dict[str, bytes]:
    """`git diff -U<context>` of old/ against new/, cut into one patch per file name."""
    out = run_git(
        work, "diff", "--no-index", "--no-renames", f"-U{context}", "old", "new", ok_codes=(1,)
    ).stdout
    chunks: dict[str, bytes] = {}
    # Hunk body lines start with ' ', '-' or '+', so this header text only starts a file's diff.
    for piece in out.split(b"diff --git a/old/")[1:]:
        name = piece.split(b" ", 1)[0].decode()
        chunks[name] = b"diff --git a/old/" + piece
    return chunks


def load_index(repo: Path, work: Path, cases: list[Case]) -> None:
    """One index entry per (context size, direction, case), holding that case's target."""
    paths = []
    for case in cases:
        for direction in DIRECTIONS:
            path = work / "targets" / f"{direction}_{case.name}"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(case.targets[direction])
            paths.append(str(path))
    oids = run_git(repo, "hash-object", "-w", "--stdin-paths", stdin="\n".join(paths).encode())
    oid_of = dict(zip(paths, oids.stdout.decode().split(), strict=True))
    entries = [
        f"100644 {oid_of[str(work / 'targets' / f'{d}_{case.name}')]}\tU{u}/{d}/{case.name}\n"
        for case in cases
        for d in DIRECTIONS
        for u in CONTEXT_SIZES
    ]
    run_git(repo, "update-index", "--index-info", stdin="".join(entries).encode())


def index_contents(repo: Path) -> dict[str, bytes]:
    listing = run_git(repo, "ls-files", "-s").stdout.decode().splitlines()
    path_oid = [(line.split("\t", 1)[1], line.split()[1]) for line in listing]
    batch = run_git(
        repo, "cat-file", "--batch", stdin="".join(f"{oid}\n" for _, oid in path_oid).encode()
    ).stdout
    contents: dict[str, bytes] = {}
    at = 0
    for path, _ in path_oid:
        header_end = batch.index(b"\n", at)
        size = int(batch[at:header_end].split()[2])
        contents[path] = batch[header_end + 1 : header_end + 1 + size]
        at = header_end + 1 + size + 1
    return contents


@dataclass
class Outcome:
    label: str  # the index path: U<context>/<direction>/<case>
    patch: bytes
    target: bytes
    reverse: bool
    git_ok: bool
    git_moved: bool  # git --verbose said "Hunk #N succeeded at L (offset K lines)."
    git_result: bytes | None = None


def apply_all_with_git(repo: Path, cases: list[Case], diffs: dict[int, dict[str, bytes]]):
    outcomes: list[Outcome] = []
    for case in cases:
        for u in CONTEXT_SIZES:
            for d in DIRECTIONS:
                patch = diffs[u][case.name]
                args = ["apply", "--cached", "--verbose", "--whitespace=nowarn", "-p2"]
                args += [f"--directory=U{u}/{d}"] + (["--reverse"] if d == "rev" else [])
                proc = run_git(repo, *args, stdin=patch, ok_codes=(0, 1))
                ok, moved = proc.returncode == 0, b"(offset " in proc.stderr
                label = f"U{u}/{d}/{case.name}"
                outcomes.append(Outcome(label, patch, case.targets[d], d == "rev", ok, moved))
    results = index_contents(repo)
    for outcome in outcomes:
        outcome.git_result = results[outcome.label] if outcome.git_ok else None
    return outcomes


def git_outcomes(tmp_path: Path, seed: int) -> list[Outcome]:
    rng = random.Random(seed)
    cases = make_cases(rng)
    repo, work = tmp_path / "repo", tmp_path / "work"
    run_git(tmp_path, "init", "-q", str(repo))
    write_tree(work / "old", {c.name: b"".join(c.original) for c in cases})
    write_tree(work / "new", {c.name: b"".join(c.modified) for c in cases})
    diffs = {u: per_file_diffs(work, u) for u in CONTEXT_SIZES}
    add_targets(rng, cases, diffs[3])
    load_index(repo, work, cases)
    return apply_all_with_git(repo, cases, diffs)


@pytest.mark.parametrize("seed", SEEDS)
def test_apply_hunks_gives_gits_result_or_falls_back(tmp_path: Path, seed: int):
    outcomes = git_outcomes(tmp_path, seed)
    disagreements, fallbacks = [], []
    for outcome in outcomes:
        hunks = parse_patch(outcome.patch).files[0].hunks
        mine = apply_hunks(outcome.target, hunks, reverse=outcome.reverse)
        if not outcome.git_ok and mine.ok:
            disagreements.append((outcome, mine))
        elif outcome.git_ok and not mine.ok:
            fallbacks.append(outcome.label)
        elif mine.ok and (mine.content, mine.moved) != (outcome.git_result, outcome.git_moved):
            disagreements.append((outcome, mine))

    applied = [o for o in outcomes if o.git_ok]
    moved = [o for o in applied if o.git_moved]
    print(
        f"seed {seed}: {len(outcomes)} cases, git applied {len(applied)} ({len(moved)} moved) "
        f"and refused {len(outcomes) - len(applied)}; fail-safe fallbacks: {len(fallbacks)}"
    )
    assert not disagreements, disagreements[:3]
    assert len(fallbacks) < MAX_FALLBACK_RATE * len(applied), fallbacks
    # The cases must cover every kind of outcome, or the agreement above would mean little.
    assert len(outcomes) == CASES * len(CONTEXT_SIZES) * len(DIRECTIONS)
    assert len(applied) > len(outcomes) // 3
    assert len(moved) > len(applied) // 8
    assert len(outcomes) - len(applied) > len(outcomes) // 10
