"""`carry replay` on a synthetic upstream whose history is built so the timeline is known:
patch 0001 applies, its context moves (carry refreshes it), it conflicts, upstream fixes the
conflict, merges the change in its own form (review), then reverts it; patch 0002 is merged
upstream as is in "(#7)" (carry drops it). Real git, real engine, the real command line."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bot import cli
from bot import replay as walker
from bot.git import history
from bot.git.engine import Engine
from bot.git.mirror import Mirror
from bot.git.runner import Git
from harness.gitrepo import RepoBuilder
from tests.support.replay_upstream import CARRIED, TOTAL, Upstream, build_upstream, lib

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


def whole_replay(upstream: Upstream) -> walker.ReplaySpec:
    """The replay of every head of `upstream` for its loose patches."""
    return walker.ReplaySpec(
        repo=str(upstream.path),
        start=upstream.start,
        end=upstream.heads[-1],
        series_id="patches",
        files=walker.loose_patches([(p.name, p.read_bytes()) for p in upstream.patches]),
        order=tuple(p.name for p in upstream.patches),
    )


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
    spec = whole_replay(upstream)
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
    """On a terminal, stderr shows a bar of the heads done and the rate, redrawn in place; in
    a pipe, a replay shorter than PLAIN_EVERY_S shows only the command's last line."""
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
    full = "\rcarry replay: [" + "#" * walker.BAR_WIDTH + "] 8/8 heads, "
    assert full in terminal and "heads/min" in terminal
    assert "\n" not in terminal.split(full)[0]  # redrawn in place until the last head
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


def test_replay_goes_through_the_planner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each head is planned as the service plans it (bot.core.planner.plan): the head's move
    gives a rebase, the finished check a publish, and the replay does what those say. A series
    its policy pauses is never checked or published by the service, so neither by the replay:
    its heads are recorded, and the drop that a direct publish would make is not made."""
    from harness.carry_env import BODY, SERIES, CarryEnv

    env = CarryEnv(tmp_path, redis_url="redis://unused")
    fixed = BODY.replace("value_10 = compute(10)", "value_10 = compute(10, safe=True)")
    env.carry_patches([{"mod.py": fixed}])
    start = env.upstream.commit("Unrelated", {"other.py": "x = 1\n"})
    taken = env.upstream.commit("Make value 10 safe (#5)", {"mod.py": fixed})
    monkeypatch.setenv("CARRY_CONFIG", str(env.config_path))
    monkeypatch.setenv("CARRY_DOWNSTREAM_DIR", str(env.downstream))
    argv = ["replay", "--series", SERIES, "--from", start, "--json"]

    env.write_config()
    monkeypatch.setenv("CARRY_CACHE_DIR", str(tmp_path / "running"))
    assert cli.main(argv) == 0
    running = json.loads(capsys.readouterr().out)
    assert [r["sha"] for r in running["timeline"]] == [start, taken]
    for record in running["timeline"]:
        planned = [(p["kind"], p["done"]) for p in record["planned"]]
        assert planned == [("rebase", True), ("publish", True)], record
        assert record["planned"][0]["reason"] == f"refs/heads/main moved to {record['sha'][:12]}"
    last = running["timeline"][-1]
    assert [a["action"] for a in last["actions"]] == ["open-pr", "merged", "drop"]

    env.write_config(policy={"paused": True})
    monkeypatch.setenv("CARRY_CACHE_DIR", str(tmp_path / "paused"))
    assert cli.main(argv) == 0
    paused = json.loads(capsys.readouterr().out)
    assert [r["sha"] for r in paused["timeline"]] == [start, taken]
    for record in paused["timeline"]:
        ((kind, reason, done),) = [(p["kind"], p["reason"], p["done"]) for p in record["planned"]]
        assert (kind, done) == ("record_head", True), record
        assert reason.endswith("series is paused by its policy"), reason
        assert record["patches"] == [] and record["pr"] is None, record
        assert [a["action"] for a in record["actions"]] == ["nothing"], record
    summary = paused["summary"]
    assert (summary["prs_opened"], summary["automatic_drops"]) == (0, 0)


def test_progress_lines_and_the_rate_of_a_resumed_run(tmp_path: Path, make_repo) -> None:
    """Away from a terminal the progress is plain lines (no carriage return), at most every
    PLAIN_EVERY_S (0 here: every head but the last); the rate counts only the heads walked in
    this run, not those a resumed replay took from saved progress."""
    import io

    upstream = build_upstream(tmp_path, make_repo())
    spec = whole_replay(upstream)
    cache = tmp_path / "cache"
    assert len(walker.run(spec, Engine(Mirror(spec.repo, cache)), cache, stop_after=5).records) == 5
    calls: list[tuple[int, int, int, float]] = []
    out = io.StringIO()
    lines = walker.ProgressDisplay(out, every_s=0)
    assert not lines.tty

    def report(done: int, total: int, walked: int, seconds: float) -> None:
        calls.append((done, total, walked, seconds))
        lines(done, total, walked, seconds)

    again = walker.run(spec, Engine(Mirror(spec.repo, cache)), cache, on_progress=report)
    assert again.resumed_at == 5
    assert [c[:3] for c in calls] == [(6, 8, 1), (7, 8, 2), (8, 8, 3)]
    shown = out.getvalue()
    assert "\r" not in shown
    assert [line.split("]")[1].split(",")[0] for line in shown.splitlines()] == [
        " 6/8 heads",
        " 7/8 heads",
    ]
    # 3 heads in 6 s is 30 a minute, whatever the 5 resumed ones took
    assert walker.progress_line(8, 8, 3, 6.0).endswith("] 8/8 heads, 30 heads/min")
    assert walker.progress_line(2, 8, 2, 0.0) == (
        "carry replay: [#######.......................] 2/8 heads, 0 heads/min"
    )


def test_progress_on_a_terminal_is_redrawn_at_most_twice_a_second() -> None:
    import io

    now = [100.0]
    out = io.StringIO()
    bar = walker.ProgressDisplay(out, tty=True, clock=lambda: now[0])
    bar(1, 4, 1, 0.1)
    bar(2, 4, 2, 0.2)  # 0 s later: not drawn
    now[0] += walker.TTY_EVERY_S
    bar(3, 4, 3, 0.6)
    bar(4, 4, 4, 0.7)  # the last head: always drawn, then a new line
    drawn = out.getvalue()
    assert drawn.count("\r") == 3 and drawn.endswith(" \n")
    assert "1/4" in drawn and "2/4" not in drawn and "3/4" in drawn and "4/4" in drawn


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
