"""`carry replay` on a synthetic upstream whose history is built so the timeline is known:
patch 0001 applies, its context moves (carry refreshes it), it conflicts, upstream fixes the
conflict, merges the change in its own form (review), then reverts it; patch 0002 is merged
upstream as is in "(#7)" (carry drops it). Real git, real engine, the real command line."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from bot import cli
from bot import replay as walker
from bot.git import history
from bot.git.engine import Engine
from bot.git.mirror import Mirror
from bot.git.runner import Git
from harness.gitrepo import RepoBuilder

LINES = [f"setting_{i:02d} = compute_setting({i}, name='option number {i}')\n" for i in range(20)]
TOTAL = "compute_total = a + b  # original sum of both parts\n"
CARRIED = "compute_total = a + b + carry_adjustment  # carried fix for totals\n"
FLAG = "carry_adjustment_enabled = True  # switched on by the carried fix\n"
REWRITE = "compute_total = sum(parts_of_the_total)  # upstream rewrite\n"
UPSTREAM_TAKE = "compute_total = a + b + carry_adjustment  # upstream version of the fix\n"
HEADER = [f"# header line {i} added upstream, moving everything below\n" for i in range(3)]
UTIL = "def helper_for_util(value):\n    return value * 2  # the carried helper\n"


def lib(total: str, *, header: bool = False, flag: bool = False) -> str:
    body = [*(HEADER if header else []), *LINES[:10], total, *([FLAG] if flag else []), *LINES[10:]]
    return "".join(body)


@dataclass
class Upstream:
    path: Path
    patches: list[Path]
    heads: list[str]  # the walked heads, oldest first
    start: str


def build_upstream(tmp_path: Path, builder: RepoBuilder) -> Upstream:
    repo = builder
    base = repo.commit("Initial import", {"lib.py": lib(TOTAL), "util.py": "# utilities\n"})
    # The carried series, made on the initial commit.
    repo.checkout(base, new_branch="carried")
    repo.commit("Add carry adjustment to totals", {"lib.py": lib(CARRIED, flag=True)})
    repo.commit("Add util helper", {"util.py": "# utilities\n" + UTIL})
    patches = repo.format_patch(f"{base}..carried", tmp_path / "patches")
    repo.checkout("main")
    heads = [
        repo.commit("Touch the docs", {"README": "docs\n"}),  # 0: both apply
        repo.commit("Add header lines", {"lib.py": lib(TOTAL, header=True)}),  # 1: 0001 moves
        repo.commit("Add util helper (#7)", {"util.py": "# utilities\n" + UTIL}),  # 2: 0002 taken
        repo.commit("Rewrite totals", {"lib.py": lib(REWRITE, header=True)}),  # 3: conflict
        repo.commit("Touch the docs again", {"README": "docs 2\n"}),  # 4: still a conflict
        repo.commit('Revert "Rewrite totals"', {"lib.py": lib(TOTAL, header=True)}),  # 5: applies
        repo.commit(
            "Add carry adjustment to totals (#42)",
            {"lib.py": lib(UPSTREAM_TAKE, header=True, flag=True)},
        ),  # 6: upstream's own version: review
        repo.commit(
            'Revert "Add carry adjustment to totals (#42)"',
            {"lib.py": lib(TOTAL, header=True)},
        ),  # 7: reverted: applies again
    ]
    return Upstream(repo.path, patches, heads, heads[0])


# Per head: (0001's status and decision, 0002's or None once dropped, what carry does).
EXPECTED = [
    (("applies", "keep"), ("applies", "keep"), ["nothing"]),
    (("applies-moved", "keep"), ("applies", "keep"), ["open-pr", "merged"]),
    (("applies", "keep"), ("contained", "drop"), ["open-pr", "merged", "drop"]),
    (("conflict", "keep"), None, ["wait-human"]),
    (("conflict", "keep"), None, ["wait-human"]),
    (("applies", "keep"), None, ["nothing"]),
    (("upstream-version", "review"), None, ["wait-human"]),
    (("applies", "keep"), None, ["nothing"]),
]


def replay_json(
    capsys: pytest.CaptureFixture[str], upstream: Upstream, cache: Path, *extra: str
) -> dict:
    argv = ["replay", "--repo", str(upstream.path), "--from", upstream.start, "--json"]
    argv += ["--cache-dir", str(cache), "--patch", *map(str, upstream.patches), *extra]
    assert cli.main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_replay_timeline_head_by_head(
    tmp_path: Path, make_repo, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = build_upstream(tmp_path, make_repo())
    out = replay_json(capsys, upstream, tmp_path / "cache")
    timeline = out["timeline"]
    assert [r["sha"] for r in timeline] == upstream.heads
    for record, (first, second, actions) in zip(timeline, EXPECTED, strict=True):
        found = {p["name"][:4]: (p["status"], p["decision"]) for p in record["patches"]}
        assert found["0001"] == first, record
        assert found.get("0002") == second, record
        assert [a["action"] for a in record["actions"]] == actions, record
    # The PRs: the refresh (#1), then the drop of 0002 (#2), each merged at once.
    assert [(r["pr"], r["merged"]) for r in timeline[1:3]] == [(1, True), (2, True)]
    drop = timeline[2]["actions"][2]
    assert drop["patch"].startswith("0002") and "head has every change" in drop["why"]
    summary = out["summary"]
    assert summary["heads_walked"] == 8
    assert (summary["prs_opened"], summary["prs_merged"], summary["automatic_drops"]) == (2, 2, 1)
    assert (summary["conflicts"], summary["reviews"], summary["human_actions"]) == (1, 1, 2)
    assert summary["human_actions_per_month"] == {"2026-01": 2}
    patches = {p["name"][:4]: p for p in out["patches"]}
    first = patches["0001"]
    assert first["first_needed_human"]["sha"] == upstream.heads[3]
    assert [(e["status"], e["heads"]) for e in first["episodes"]] == [
        ("conflict", 2),
        ("upstream-version", 1),
    ]
    assert first["human_heads"] == 3
    assert first["droppable"] is None
    taken = patches["0002"]["droppable"]
    assert (taken["head"], taken["commit"], taken["pr"]) == (
        upstream.heads[2],
        upstream.heads[2],
        7,
    )
    assert taken["from_evidence"] is True
    assert patches["0002"]["dropped_at"] == 2


def test_resumed_replay_equals_an_uninterrupted_one(
    tmp_path: Path, make_repo, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = build_upstream(tmp_path, make_repo())
    whole = replay_json(capsys, upstream, tmp_path / "whole")
    # Interrupted: first up to head 3 (--to an earlier revision), then to the end.
    cache = tmp_path / "interrupted"
    part = replay_json(capsys, upstream, cache, "--to", upstream.heads[3])
    assert part["summary"]["heads_walked"] == 4
    resumed = replay_json(capsys, upstream, cache)
    assert resumed == whole
    # Interrupted as a kill would: the engine stops after 2 heads, its progress saved.
    spec = walker.ReplaySpec(
        repo=str(upstream.path),
        start=upstream.start,
        end=upstream.heads[-1],
        series_id="patches",
        files=walker.loose_patches([(p.name, p.read_bytes()) for p in upstream.patches]),
        order=tuple(p.name for p in upstream.patches),
    )
    killed = tmp_path / "killed"
    engine = Engine(Mirror(spec.repo, killed))
    stopped = walker.run(spec, engine, killed, stop_after=2)
    assert len(stopped.records) == 2
    # The same replay to the repository's HEAD (no end given): it resumes those 2 heads.
    again = walker.run(replace(spec, end=None), Engine(Mirror(spec.repo, killed)), killed)
    assert again.resumed_at == 2
    assert [r.as_dict() for r in again.records] == whole["timeline"]


def test_replay_sampling_and_reports(
    tmp_path: Path, make_repo, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = build_upstream(tmp_path, make_repo())
    every = replay_json(capsys, upstream, tmp_path / "c1", "--every", "3")
    assert [r["sha"] for r in every["timeline"]] == [upstream.heads[i] for i in (0, 3, 6, 7)]
    daily = replay_json(capsys, upstream, tmp_path / "c3", "--daily")  # all on 2026-01-01
    assert [r["sha"] for r in daily["timeline"]] == [upstream.heads[-1]]
    html = tmp_path / "replay.html"
    argv = ["replay", "--repo", str(upstream.path), "--from", upstream.start]
    argv += ["--cache-dir", str(tmp_path / "c2"), "--html", str(html)]
    assert cli.main([*argv, "--patch", *map(str, upstream.patches)]) == 0
    text = capsys.readouterr().out
    assert "heads walked      8" in text and "wait-human 0001" in text
    assert "(1 patch as before)" in text
    page = html.read_text()
    assert "<svg" in page and "<style>" in page
    assert "http" not in page.replace(str(upstream.path), "")  # no external assets
    assert page.count('class="bar"') == 1  # one month, one bar


def test_replay_rate(tmp_path: Path, make_repo, capsys: pytest.CaptureFixture[str]) -> None:
    """Heads per minute for a one-patch series on a few hundred commits (printed; the
    floor here is far below the target, for a shared machine)."""
    repo = make_repo()
    base = repo.commit("Initial import", {"lib.py": lib(TOTAL)})
    repo.checkout(base, new_branch="carried")
    repo.commit("Add carry adjustment to totals", {"lib.py": lib(CARRIED, flag=True)})
    patches = repo.format_patch(f"{base}..carried", tmp_path / "patches")
    repo.checkout("main")
    for i in range(300):
        repo.commit(f"Change {i}", {f"src/file_{i % 40}.py": f"value = {i}\n"})
    spec = walker.ReplaySpec(
        repo=str(repo.path),
        start=base,
        end=repo.head(),
        series_id="patches",
        files=walker.loose_patches([(p.name, p.read_bytes()) for p in patches]),
        order=tuple(p.name for p in patches),
    )
    cache = tmp_path / "cache"
    started = time.perf_counter()
    result = walker.run(spec, Engine(Mirror(spec.repo, cache)), cache)
    rate = len(result.records) / result.walk_s * 60
    print(
        f"replay: {len(result.records)} heads in {time.perf_counter() - started:.2f} s, "
        f"{rate:,.0f} heads/min in the engine"
    )
    assert len(result.records) == 301
    assert rate > 100


def test_replay_of_a_configured_series(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--series ID reads the config's series (its directory, upstream and policy): with
    auto_drop off, the patch upstream took is reviewed, and still reported droppable; its
    fix page and series file are what the team's merged PR would hold."""
    from harness.carry_env import BODY, SERIES, CarryEnv

    env = CarryEnv(tmp_path, redis_url="redis://unused")
    fixed = BODY.replace("value_10 = compute(10)", "value_10 = compute(10, safe=True)")
    env.carry_patches([{"mod.py": fixed}])
    env.write_config(policy={"auto_drop": False})
    start = env.upstream.commit("Unrelated", {"other.py": "x = 1\n"})
    taken = env.upstream.commit("Make value 10 safe (#5)", {"mod.py": fixed})
    monkeypatch.setenv("CARRY_CONFIG", str(env.config_path))
    monkeypatch.setenv("CARRY_DOWNSTREAM_DIR", str(env.downstream))
    monkeypatch.setenv("CARRY_CACHE_DIR", str(tmp_path / "cache"))
    assert cli.main(["replay", "--series", SERIES, "--from", start, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    last = out["timeline"][-1]
    assert last["sha"] == taken
    ((patch,),) = [r["patches"] for r in out["timeline"][-1:]]
    assert (patch["status"], patch["decision"], patch["engine_decision"]) == (
        "contained",
        "review",
        "drop",
    )
    assert "auto-drop is off" in patch["reason"]
    (summary,) = out["patches"]
    assert (summary["droppable"]["commit"], summary["droppable"]["pr"]) == (taken, 5)
    assert summary["dropped_at"] is None
    assert out["summary"]["automatic_drops"] == 0 and out["summary"]["reviews"] == 1


def test_replay_from_a_date(tmp_path: Path, make_repo, capsys: pytest.CaptureFixture[str]) -> None:
    upstream = build_upstream(tmp_path, make_repo())
    argv = ["replay", "--repo", str(upstream.path), "--from", "2026-01-01T00:07:00Z", "--json"]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--patch", *map(str, upstream.patches)]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["sha"] for r in out["timeline"]] == upstream.heads[3:]


def test_replay_refuses_a_start_off_the_history(
    tmp_path: Path, make_repo, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = build_upstream(tmp_path, make_repo())
    argv = ["replay", "--repo", str(upstream.path), "--from", "carried"]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--patch", *map(str, upstream.patches)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "error: --from carried is not on the first-parent history of" in err


def test_progress_shows_on_a_terminal_only(tmp_path: Path, make_repo) -> None:
    """On a terminal, stderr shows the heads done and the rate; in a pipe, only the last line."""
    import os
    import subprocess
    import sys

    from tests.support.paths import REPO_ROOT

    upstream = build_upstream(tmp_path, make_repo())
    argv = [sys.executable, "-m", "bot.cli", "replay", "--repo", str(upstream.path)]
    argv += ["--from", upstream.start, "--patch", *map(str, upstream.patches)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    master, slave = os.openpty()
    try:
        done = subprocess.run(
            [*argv, "--cache-dir", str(tmp_path / "tty")],
            stdout=subprocess.PIPE,
            stderr=slave,
            env=env,
            check=False,
            timeout=120,
        )
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
    assert done.returncode == 0
    terminal = seen.decode()
    assert "carry replay: 8/8 heads, " in terminal and "heads/min" in terminal
    piped = subprocess.run(
        [*argv, "--cache-dir", str(tmp_path / "pipe")],
        capture_output=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert piped.returncode == 0
    assert "8/8" not in piped.stderr.decode()
    assert "carry: replayed 8 heads in" in piped.stderr.decode()


def test_replay_takes_any_revision_of_a_local_repository(
    tmp_path: Path, make_repo, capsys: pytest.CaptureFixture[str]
) -> None:
    """A remote-tracking branch (which carry's mirror does not fetch) or `main~2`, as `git`
    in that repository reads them."""
    builder = make_repo()
    upstream = build_upstream(tmp_path, builder)
    builder.git("update-ref", "refs/remotes/origin/main", upstream.heads[5])
    argv = ["replay", "--repo", str(upstream.path), "--from", "main~6", "--to", "origin/main"]
    argv += ["--json", "--cache-dir", str(tmp_path / "cache")]
    assert cli.main([*argv, "--patch", *map(str, upstream.patches)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["sha"] for r in out["timeline"]] == upstream.heads[1:6]


def test_reports_hide_a_password_in_the_upstreams_url(tmp_path: Path, make_repo) -> None:
    from bot import replay_report

    upstream = build_upstream(tmp_path, make_repo())
    spec = walker.ReplaySpec(
        repo=str(upstream.path),
        start=upstream.start,
        end=upstream.heads[1],
        series_id="patches",
        files=walker.loose_patches([(p.name, p.read_bytes()) for p in upstream.patches]),
        order=tuple(p.name for p in upstream.patches),
    )
    cache = tmp_path / "cache"
    result = walker.run(spec, Engine(Mirror(spec.repo, cache)), cache)
    result.spec = replace(spec, repo="https://carry:s3cret@git.example/up.git")
    shown = [
        replay_report.render_text(result),
        replay_report.render_html(result),
        json.dumps(result.as_dict()),
    ]
    for report in shown:
        assert "s3cret" not in report and "carry:***@git.example" in report


HOSTS = [
    f"host_{i:02d} = trace_host({i}, level='high', name='profiling step {i}')\n" for i in range(12)
]
TRACED = "traces_enabled = start_host_traces(profiler)  # the carried host traces\n"
BUSY = [f"busy_{i:02d} = configure({i}, kind='engine option number {i}')\n" for i in range(30)]
BUSY_FIX = "busy_fix = configure(99, kind='the carried engine option')\n"
FILLER = 405  # more than the history window (history.MAX_CANDIDATES) of commits to busy.py


def worker(*, traced: bool, renamed: bool = False) -> str:
    hosts = list(HOSTS)
    if renamed:  # upstream rewrites the lines around the landed one (its context)
        hosts[5] = hosts[5].replace("host_05", "host_05_renamed")
        hosts[7] = hosts[7].replace("host_07", "host_07_renamed")
    return "".join([*hosts[:6], *([TRACED] if traced else []), *hosts[6:]])


def busy(tuned: int | None = None, *, fixed: bool = False) -> str:
    """busy.py; `tuned`: upstream's version of the line below the carried one (0002 conflicts)."""
    rest = list(BUSY[3:])
    if tuned is not None:
        rest[0] = f"busy_03 = configure(3, kind='engine option tuned {tuned} times')\n"
    return "".join([*BUSY[:3], *([BUSY_FIX] if fixed else []), *rest])


def import_filler(repo: RepoBuilder, branch: str, count: int) -> None:
    """`count` commits on `branch` (from its tip), each changing the line below 0002's: a busy
    file of another patch of the series, as vLLM's config.py is upstream; 0002 conflicts."""
    stream = []
    for i in range(count):
        repo.clock += 60
        data = busy(i).encode()
        stream.append(
            f"commit refs/heads/{branch}\n"
            f"committer Ada Upstream <ada@upstream.example> {repo.clock} +0000\n"
            f"data {len(f'Tune busy option {i}')}\nTune busy option {i}\n"
            + (f"from refs/heads/{branch}^0\n" if i == 0 else "")
            + f"M 100644 inline busy.py\ndata {len(data)}\n"
        )
        stream.append(data.decode() + "\n")
    repo.git("fast-import", "--quiet", input="".join(stream).encode())
    repo.git("reset", "-q", "--hard")


@pytest.mark.parametrize("merged", [False, True], ids=["linear", "merged-side-branch"])
def test_a_landing_stays_found_when_another_patch_files_get_busy(
    tmp_path: Path, make_repo, capsys: pytest.CaptureFixture[str], merged: bool
) -> None:
    """The vLLM fork's replay (docs/replay.md): upstream took 0001's very diff early (same
    patch id), then hundreds of upstream commits touched the files of the series' other
    patch. The history window (the newest commits touching any of the series' files) filled
    with those, the landing fell out of it, and 0001 went from `contained drop` ("taken by")
    to `upstream-version review` once upstream rewrote the landed lines' context. The
    landing must stay found: each patch gets its own window of its own files' commits."""
    repo = make_repo()
    base = repo.commit("Initial import", {"worker.py": worker(traced=False), "busy.py": busy()})
    repo.checkout(base, new_branch="carried")
    repo.commit("Add host traces to high-level profiling", {"worker.py": worker(traced=True)})
    repo.commit("Add the carried engine option", {"busy.py": busy(fixed=True)})
    patches = repo.format_patch(f"{base}..carried", tmp_path / "patches")
    repo.checkout("main")
    taken = repo.commit(
        "Add host traces to high-level profiling (#577)", {"worker.py": worker(traced=True)}
    )
    if merged:  # the busy commits come in by a merge (as the fork's upstream rebases do)
        repo.git("branch", "rebase", taken)
        import_filler(repo, "rebase", FILLER)
        repo.clock += 60
        repo.git("merge", "-q", "--no-ff", "-m", "Rebase on upstream", "rebase")
    else:
        import_filler(repo, "main", FILLER)
    own_files = (("worker.py",), ("busy.py",))
    start = repo.head()
    end = repo.commit("Rename hosts", {"worker.py": worker(traced=True, renamed=True)})
    argv = ["replay", "--repo", str(repo.path), "--from", start, "--to", end, "--json"]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--patch", *map(str, patches)]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["sha"] for r in out["timeline"]] == [start, end]
    for record in out["timeline"]:
        first = next(p for p in record["patches"] if p["name"].startswith("0001"))
        assert (first["status"], first["decision"]) == ("contained", "drop"), record["sha"]
        if record["sha"] == end:  # no reverse-apply now: only the history evidence finds it
            assert first["taken_by"] == taken, first
    # The window itself: the newest commit of the range comes first, the landing is there.
    git = Git(git_dir=repo.path / ".git")
    found = history.read_range(git, f"{base}..{end}", ("worker.py", "busy.py"), own_files)
    assert [c.sha for c in found][:1] == [end]
    assert taken in {c.sha for c in found}
    assert len(found) == history.MAX_CANDIDATES + 2  # busy.py's newest 400, worker.py's 2
