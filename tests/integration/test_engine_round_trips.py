"""What a warm engine asks its `git cat-file` process for a new head: the trees on the way to
the series' files a level at a time, their sizes and contents in a batch, and nothing again
for objects it read on an earlier head (an object id always names the same bytes). The
answers are those of a fresh engine."""

from __future__ import annotations

from pathlib import Path

from bot.core.report import PatchReport
from bot.git import engine as engine_module
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror

FILES = [f"pkg/p{n % 3}/m{n % 2}/mod_{n}.py" for n in range(12)]


def _text(n: int, revision: int, extra: str = "") -> str:
    body = "".join(f"def fn_{n}_{k}(x):\n    return x * {k}\n" for k in range(12))
    return f"{extra}# module {n}\nREVISION = {revision}\n{body}"


def _comparable(report: PatchReport) -> tuple:
    return (report.status, report.decision, report.reason, report.evidence, report.refreshed)


def test_a_new_head_costs_a_few_round_trips_whatever_the_series_length(
    make_repo, tmp_path: Path
) -> None:
    repo = make_repo("upstream")
    repo.commit("base", {path: _text(n, 0) for n, path in enumerate(FILES)})
    base = repo.head("main")
    repo.checkout("main", new_branch="carried")
    for n in range(0, 12, 2):  # six patches, each on a file of its own
        text = _text(n, 0).replace("return x * 5\n", f"return x * 5 + {n}\n")
        repo.commit(f"Carried fix {n}", {FILES[n]: text})
    patches = [
        PatchInput(p.name, p.read_bytes())
        for p in repo.format_patch(f"{base}..carried", tmp_path / "series")
    ]
    repo.checkout("main")
    repo.commit("moves one patch's context", {FILES[0]: _text(0, 0, "# header\n")})
    heads = [repo.head("main")]
    for round_ in range(1, 3):  # new heads that touch only files the series does not
        repo.commit(f"day {round_}", {FILES[n]: _text(n, round_) for n in range(1, 12, 2)})
        heads.append(repo.head("main"))

    mirror = Mirror(str(repo.path), tmp_path / "cache")
    engine = Engine(mirror)
    engine.check(heads[0], patches, base=base)
    trips = []
    for head in heads[1:]:
        before = engine.reader.round_trips
        report = engine.check(head, patches, base=base)
        trips.append(engine.reader.round_trips - before)
        fresh = Engine(Mirror(str(repo.path), tmp_path / "cache"))
        expected = fresh.check(head, patches, base=base)
        fresh.close()
        assert [_comparable(p) for p in report.patches] == [
            _comparable(p) for p in expected.patches
        ]
        assert report.result_tree == expected.result_tree
        assert {p.status.value for p in report.patches} == {"applies", "applies-moved"}
    engine.close()
    # The head's commit and tree, the trees on the way (pkg, its p*, their m*), the sizes of
    # the patches' pre-images. Asked one by one, it was more than 6 per patch.
    assert all(n <= 8 for n in trips), trips


def _held(engine: Engine) -> int:
    """The bytes the engine's kept results hold: patches, file contents, results."""
    applied = sum(len(k[0]) + len(k[4]) + len(v.content or b"") for k, v in engine._applied.items())
    counts = sum(len(k[1]) + len(k[4]) for k in engine._counts)
    interdiffs = sum(len(k[0]) + len(k[2]) + len(v) for k, v in engine._interdiffs.items())
    return applied + counts + interdiffs


def test_results_kept_between_checks_stay_within_their_byte_budget(
    make_repo, tmp_path: Path, monkeypatch
) -> None:
    """A series on a large file that changes on every head adds new results each time: what
    the engine keeps is bounded in bytes, not only in entries. Failed before: it grew by the
    file's size several times a head, up to 4,096 entries per table."""
    budget = 200_000
    monkeypatch.setattr(engine_module, "PURE_CACHE_BYTES", budget, raising=False)
    lines = [f"row_{n} = compute({n})\n" for n in range(2000)]  # about 46 kB
    repo = make_repo("upstream")
    repo.commit("base", {"big.py": "".join(lines)})
    base = repo.head("main")
    repo.checkout("main", new_branch="carried")
    carried = [*lines[:1000], "row_1000 = compute(1000, safe=True)\n", *lines[1001:]]
    repo.commit("Carried fix", {"big.py": "".join(carried)})
    patches = [
        PatchInput(p.name, p.read_bytes())
        for p in repo.format_patch(f"{base}..carried", tmp_path / "series")
    ]
    repo.checkout("main")
    engine = Engine(Mirror(str(repo.path), tmp_path / "cache"))
    for day in range(1, 9):  # each head edits the file far from the patch
        upstream = [f"# day {day}\n", *lines[:1999], f"last = {day}\n"]
        repo.commit(f"day {day}", {"big.py": "".join(upstream)})
        report = engine.check(repo.head("main"), patches, base=base)
        assert [p.status.value for p in report.patches] == ["applies-moved"]
        assert _held(engine) <= budget, day
    fresh = Engine(Mirror(str(repo.path), tmp_path / "cache"))
    expected = fresh.check(repo.head("main"), patches, base=base)
    fresh.close()
    engine.close()
    assert [_comparable(p) for p in report.patches] == [_comparable(p) for p in expected.patches]
