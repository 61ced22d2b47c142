"""The in-memory path gives the same answers as the all-git path.

Seeded random upstream histories and series (a small vocabulary, so context repeats and hunks
have several candidate places) are checked twice: by an engine that applies plain edits in
memory, and by one that sends every patch through `git apply`. Statuses, decisions, reasons,
evidence and the result tree must agree; only a moved patch's refreshed bytes may differ (the
in-memory path renumbers the original, git regenerates it), and both must build the same tree.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from bot.core.report import PatchReport
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror
from harness.gitrepo import RepoBuilder

WORDS = ["alpha()", "beta = 1", "gamma(x)", "return x", "pass", "", "# note", "delta[0]"]
SCENARIOS = 40


def _lines(rng: random.Random, count: int) -> list[str]:
    return [rng.choice(WORDS) + f"  # {rng.randrange(6)}" for _ in range(count)]


def _edit(rng: random.Random, lines: list[str], tag: str) -> list[str]:
    out = list(lines)
    at = rng.randrange(len(out))
    kind = rng.randrange(3)
    if kind == 0:
        out[at] = f"{tag} = changed({at})"
    elif kind == 1:
        out.insert(at, f"{tag} = added({at})")
    else:
        del out[at]
    return out


def _text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _scenario(make_repo, tmp_path: Path, seed: int) -> tuple[RepoBuilder, list[PatchInput], str]:
    rng = random.Random(seed)
    repo = make_repo(f"upstream-{seed}")
    files = {f"pkg/m{n}.py": _lines(rng, 30) for n in range(2)}
    repo.commit("base", {path: _text(lines) for path, lines in files.items()})
    base = repo.head("main")
    repo.checkout("main", new_branch="carried")
    for n in range(3):
        path = rng.choice(sorted(files))
        files[path] = _edit(rng, files[path], f"fix{n}")
        repo.commit(f"Carried fix number {n}", {path: _text(files[path])})
    out = tmp_path / f"series-{seed}"
    made = repo.format_patch(f"{base}..carried", out)
    patches = [PatchInput(p.name, p.read_bytes()) for p in made]
    carried = {path: list(lines) for path, lines in files.items()}
    repo.checkout("main")
    upstream = {path: (repo.path / path).read_text().splitlines() for path in sorted(files)}
    for n in range(rng.randrange(1, 4)):
        path = rng.choice(sorted(upstream))
        move = rng.randrange(4)
        if move == 0:  # context moves: lines added at the top
            upstream[path] = [f"header_{n} = {seed}"] * rng.randrange(1, 4) + upstream[path]
        elif move == 1:  # upstream takes the carried version of a file
            upstream[path] = list(carried[path])
        else:  # an unrelated or conflicting edit
            upstream[path] = _edit(rng, upstream[path], f"up{n}")
        repo.commit(f"upstream change {n}", {path: _text(upstream[path])})
    return repo, patches, base


def _comparable(report: PatchReport) -> tuple:
    evidence = [
        {key: value for key, value in entry.items() if key != "detail"} for entry in report.evidence
    ]
    return (report.status, report.decision, report.reason, evidence, report.changed)


def test_in_memory_and_git_paths_agree(make_repo, tmp_path: Path) -> None:
    statuses: Counter[str] = Counter()
    renumbered = 0
    for seed in range(SCENARIOS):
        repo, patches, base = _scenario(make_repo, tmp_path, seed)
        memory = Engine(Mirror(str(repo.path), tmp_path / f"cache-mem-{seed}"))
        plain = Engine(Mirror(str(repo.path), tmp_path / f"cache-git-{seed}"), in_process=False)
        fast = memory.check("main", patches, base=base)
        slow = plain.check("main", patches, base=base)
        memory.close()
        plain.close()
        for a, b in zip(fast.patches, slow.patches, strict=True):
            assert _comparable(a) == _comparable(b), f"seed {seed}, {a.patch}"
            if a.refreshed != b.refreshed:
                assert a.status.value == "applies-moved", f"seed {seed}, {a.patch}"
                renumbered += 1
            statuses[a.status.value] += 1
        assert fast.result_tree == slow.result_tree, f"seed {seed}"
    # The scenarios must exercise both paths: clean applies, moves, and git-only outcomes.
    assert statuses["applies"] and statuses["applies-moved"] and renumbered
    assert statuses["conflict"] + statuses["contained"] + statuses["upstream-version"]
