"""`carry init` on a real branch shape: a downstream branch that follows an upstream release
line with cherry-picked fixes on top, as vllm-gaudi's release branches carry them (subjects
ending in `(#1234)`, `(cherry picked from commit ...)` trailers). It writes series, fix pages
and config entries that carry's loaders, `carry check` and `carry run` accept as they are;
bad input is refused with one line and nothing written."""

from __future__ import annotations

import difflib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from bot.cli import main
from bot.config import load_config
from bot.core.fixpage import parse_fix_page
from bot.core.seriesfile import parse_series
from bot.importer import patch_name
from bot.local_redis import free_port
from bot.series_loader import load_all, load_series
from harness.gitrepo import RepoBuilder, git
from tests.support.paths import REPO_ROOT

UPSTREAM_REPO = "acme/engine"
CORE = "".join(f"value_{i} = compute({i})\n" for i in range(1, 31))
SCHED = "".join(f"step_{i} = schedule({i})\n" for i in range(1, 21))
CACHE = "".join(f"slot_{i} = allocate({i})\n" for i in range(1, 21))
STALL = "Fix scheduler stall on empty batch (#1234)"
LEAK = "[Bugfix] Fix cache slot leak (#1250)"
FP8 = "Enable fp8 kv cache for gaudi3 (#12)"
TUNE = "Tune graph warmup for our cluster"


@dataclass
class Shape:
    upstream: RepoBuilder
    downstream: RepoBuilder
    stall: str  # upstream main's commit of #1234
    leak: str  # upstream main's commit of #1250
    release_fork: str  # where releases/v0.1 left main


@pytest.fixture
def shape(make_repo, tmp_path) -> Shape:
    """upstream: main, releases/v0.1 (tag v0.1.0), later fixes on main, #1250 also picked onto
    the release branch; downstream: a clone whose gaudi/v0.1 follows releases/v0.1 with two
    cherry-picks from main and two fixes of its own, and gaudi/main one fix on main."""
    up = make_repo("upstream")
    up.commit("Initial engine", {"engine/core.py": CORE, "engine/sched.py": SCHED})
    up.commit("Add the cache (#1200)", {"engine/cache.py": CACHE})
    fork = up.head()
    up.checkout("main", new_branch="releases/v0.1")
    up.commit("Release v0.1.0", {"VERSION": "0.1.0\n"})
    up.git("tag", "v0.1.0")
    up.checkout("main")
    up.commit("Add chunked prefill (#1220)", {"engine/core.py": CORE + "chunked = True\n"})
    stall = up.commit(STALL, {"engine/sched.py": SCHED.replace("schedule(3)", "schedule(3, 0)")})
    leak = up.commit(LEAK, {"engine/cache.py": CACHE.replace("allocate(5)", "allocate(5, 1)")})
    up.commit("Speed up sampling (#1260)", {"engine/core.py": CORE + "chunked = True\nfast = 1\n"})
    # Upstream backports #1250 to its own release line later.
    up.checkout("releases/v0.1")
    up.git("cherry-pick", "-x", leak)
    up.checkout("main")

    down = RepoBuilder(tmp_path / "downstream", clock=up.clock + 600)
    down.git("fetch", "-q", str(up.path), "+refs/heads/*:refs/remotes/up/*")
    down.checkout(up.git("rev-parse", "releases/v0.1~1"), new_branch="gaudi/v0.1")
    down.git("cherry-pick", "-x", stall)
    down.git("cherry-pick", "-x", leak)
    down.commit(FP8, {"engine/cache.py": down.read("engine/cache.py").decode() + "fp8 = 1\n"})
    down.commit(TUNE, {"engine/core.py": CORE.replace("compute(9)", "compute(9, warm=2)")})
    down.checkout("up/main", new_branch="gaudi/main")
    down.commit(TUNE, {"engine/core.py": CORE.replace("compute(9)", "compute(9, warm=2)")})
    down.checkout("gaudi/v0.1")
    return Shape(up, down, stall, leak, fork)


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    """The downstream checkout carry runs in (it holds config/ and patches/)."""
    root = tmp_path / "carry-checkout"
    root.mkdir()
    monkeypatch.chdir(root)
    return root


def init(capsys, shape: Shape, tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    argv = [
        "init",
        "--repo",
        str(shape.downstream.path),
        "--upstream",
        str(shape.upstream.path),
        "--upstream-repo",
        UPSTREAM_REPO,
        "--cache-dir",
        str(tmp_path / "cache"),
        *extra,
    ]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


NEW_CONFIG = ("--downstream-repo", "acme/engine-builds")


def test_init_writes_series_pages_and_config_that_load(capsys, shape, checkout, tmp_path):
    code, out, err = init(capsys, shape, tmp_path, "--branch", "gaudi/v0.1", *NEW_CONFIG)
    assert code == 0, err
    series_dir = checkout / "patches" / "engine-v0.1"

    # The line: releases/v0.1 (4 commits on top), not main, not the tag.
    assert "series engine-v0.1: branch gaudi/v0.1 follows upstream branch releases/v0.1" in out
    assert "(4 commits on top of" in out

    # The series: one patch per commit, in order, with the base where the branch left the line.
    loaded = load_series(series_dir)
    names = [patch_name(n, s) for n, s in enumerate([STALL, LEAK, FP8, TUNE], start=1)]
    assert loaded.patch_names == tuple(names)
    release_base = shape.upstream.head("v0.1.0")
    assert loaded.base == release_base
    assert "0001-Fix-scheduler-stall-on-empty-batch-1234.patch" in names
    stall_patch = (series_dir / names[0]).read_text()
    assert f"(cherry picked from commit {shape.stall})" in stall_patch
    assert "+step_3 = schedule(3, 0)" in stall_patch

    # Fix pages: one per fix; the cherry-picks name their upstream PR as merged.
    pages = {page.name: page for page in loaded.pages}
    assert sorted(pages) == [
        "enable-fp8-kv-cache-for-gaudi3",
        "fix-cache-slot-leak",
        "fix-scheduler-stall-on-empty-batch",
        "tune-graph-warmup-for-our-cluster",
    ]
    stall_page = pages["fix-scheduler-stall-on-empty-batch"]
    assert [e.render() for e in stall_page.upstream] == [f"{UPSTREAM_REPO}#1234 (merged)"]
    assert stall_page.releases == ("v0.1",)
    assert [(p.patch, p.files) for p in stall_page.patches] == [(names[0], ("engine/sched.py",))]
    assert f"cherry-picked from upstream commit {shape.stall[:12]}" in (
        stall_page.section("The fix") or ""
    )
    # #12 is the downstream's own PR: no upstream commit has it, so it is not claimed.
    assert [e.render() for e in pages["enable-fp8-kv-cache-for-gaudi3"].upstream] == ["not-filed"]
    assert [e.render() for e in pages["tune-graph-warmup-for-our-cluster"].upstream] == [
        "not-filed"
    ]

    # The config: loads with its directories checked, as `carry run` loads it.
    config = load_config(checkout / "config" / "carry.yaml", downstream_dir=checkout)
    assert config.downstream.repo == "acme/engine-builds"
    assert config.upstreams["engine"].repo == UPSTREAM_REPO
    assert config.upstreams["engine"].url == str(shape.upstream.path)
    (entry,) = config.series
    assert (entry.id, entry.upstream, entry.base.ref, entry.patches) == (
        "engine-v0.1",
        "engine",
        "refs/heads/releases/v0.1",
        "engine-v0.1",
    )
    assert {name: entry.linked_prs(name) for name in entry.links} == {
        names[0]: [(UPSTREAM_REPO, 1234)],
        names[1]: [(UPSTREAM_REPO, 1250)],
    }

    # What to review: the drop upstream already made possible, the downstream PR, the TODOs.
    assert f"engine-v0.1/{names[1]}: upstream releases/v0.1 already has an equal change" in out
    assert f"engine-v0.1/{names[2]}: #12 in its subject matches no upstream commit" in out
    assert "fill in the TODOs" in out and "4 fix pages" in out
    assert "carry check --series patches/engine-v0.1" in out


def test_init_patches_are_those_carry_import_writes(capsys, shape, checkout, tmp_path):
    """init is `carry new` + `carry import --range` per series: the same bytes."""
    assert init(capsys, shape, tmp_path, "--branch", "gaudi/v0.1", *NEW_CONFIG)[0] == 0
    series_dir = checkout / "patches" / "engine-v0.1"
    base = parse_series((series_dir / "series").read_text())[0].base
    assert base is not None
    by_hand = checkout / "by-hand"
    assert (
        main(
            ["new", "by-hand", "--fix", "all", "--release", "v0.1", "--patches-dir", str(checkout)]
        )
        == 0
    )
    code = main(
        [
            "import",
            "--series",
            str(by_hand),
            "--repo",
            str(shape.downstream.path),
            "--range",
            f"{base}..gaudi/v0.1",
            "--page",
            "all",
            "--cache-dir",
            str(tmp_path / "c2"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    for name in load_series(series_dir).patch_names:
        assert (series_dir / name).read_bytes() == (by_hand / name).read_bytes()


def test_dry_run_writes_nothing_and_says_what_it_would(capsys, shape, checkout, tmp_path):
    code, out, err = init(
        capsys, shape, tmp_path, "--branch", "gaudi/v0.1", *NEW_CONFIG, "--dry-run"
    )
    assert code == 0, err
    assert "would write:" in out and "patches/engine-v0.1/series" in out
    assert "dry run: nothing was written" in out
    assert snapshot(checkout) == {}


def test_two_branches_two_lines_into_an_existing_config(capsys, shape, checkout, tmp_path):
    """One series per release line; the entries go into the config as it is, its comments
    and other series kept; a fix carried on both lines lists both releases."""
    config_path = checkout / "config" / "carry.yaml"
    config_path.parent.mkdir()
    original = (REPO_ROOT / "config" / "carry.yaml").read_text()
    config_path.write_text(original)
    (checkout / "patches").mkdir()
    for series in ("async-inputs-v0.26.0", "async-inputs-v0.30.0", "async-inputs-main"):
        target = checkout / "patches" / series
        target.mkdir()
        for source in (REPO_ROOT / "patches" / series).iterdir():
            (target / source.name).write_bytes(source.read_bytes())
    ple = checkout / "patches" / "ple-offload-pr53899"
    ple.mkdir()
    for source in (REPO_ROOT / "patches" / "ple-offload-pr53899").iterdir():
        (ple / source.name).write_bytes(source.read_bytes())

    code, out, err = init(
        capsys, shape, tmp_path, "--branch", "gaudi/v0.1", "--branch", "gaudi/main"
    )
    assert code == 0, err
    assert "branch gaudi/main follows upstream branch main (1 commit on top of" in out

    text = config_path.read_text()
    # Only additions: every line of the original config stays, in order, comments included.
    diff = difflib.SequenceMatcher(None, original.splitlines(), text.splitlines(), autojunk=False)
    assert {op for op, *_ in diff.get_opcodes()} == {"equal", "insert"}
    assert "  engine:\n" in text  # the new upstream
    config = load_config(config_path, downstream_dir=checkout)
    ids = [s.id for s in config.series]
    assert ids[:4] == [
        "async-inputs-v0.26.0",
        "async-inputs-v0.30.0",
        "async-inputs-main",
        "ple-offload-pr53899",
    ]
    assert ids[4:] == ["engine-v0.1", "engine-main"]
    assert config.series_by_id("engine-main").base.ref == "refs/heads/main"
    assert "# ... and on main, which upstream PR vllm-gaudi#1919 targets." in text
    loaded = {s.series_id: s for s in load_all(checkout / "patches")}
    tune = next(
        p for p in loaded["engine-main"].pages if p.name == "tune-graph-warmup-for-our-cluster"
    )
    assert tune.releases == ("v0.1", "main")
    assert "carry init never overwrites" not in err

    # Run again: the series exist, and nothing is touched without --force.
    before = snapshot(checkout)
    code, _, err = init(capsys, shape, tmp_path, "--branch", "gaudi/main")
    assert code == 2
    assert err.strip() == (
        "carry: error: patches/engine-main already exists: carry init never overwrites a "
        "series; pass --force to replace it, or name the series with --series"
    )
    assert snapshot(checkout) == before

    # --force replaces the directory and the config entry (not a second one).
    (checkout / "patches" / "engine-main" / "stale.md").write_text("left over\n")
    code, out, err = init(capsys, shape, tmp_path, "--branch", "gaudi/main", "--force")
    assert code == 0, err
    assert "[replaces the existing one]" in out
    assert not (checkout / "patches" / "engine-main" / "stale.md").exists()
    config = load_config(config_path, downstream_dir=checkout)
    assert [s.id for s in config.series].count("engine-main") == 1


def test_the_user_names_the_line_and_the_series(capsys, shape, checkout, tmp_path):
    code, out, err = init(
        capsys,
        shape,
        tmp_path,
        "--branch",
        "gaudi/v0.1:v0.1.0",
        "--series",
        "gaudi-010",
        *NEW_CONFIG,
    )
    assert code == 0, err
    assert "follows upstream tag v0.1.0" in out
    config = load_config(checkout / "config" / "carry.yaml", downstream_dir=checkout)
    assert config.series_by_id("gaudi-010").base.ref == "refs/tags/v0.1.0"
    assert load_series(checkout / "patches" / "gaudi-010").base == shape.upstream.head("v0.1.0")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--branch", "gaudi/v0.2"],
            "no branch 'gaudi/v0.2' in {down} (its branches: gaudi/main, gaudi/v0.1, merged, orphan, upstream-copy)",
        ),
        (
            ["--branch", "gaudi/v0.1:releases/v9"],
            "--branch gaudi/v0.1:releases/v9: the upstream has no branch or tag 'releases/v9'",
        ),
        (
            ["--branch", "upstream-copy"],
            "branch upstream-copy has no commits on top of upstream branch releases/v0.1",
        ),
        (
            ["--branch", "orphan"],
            "branch orphan of {down} shares no history with any of its branches or tags",
        ),
        (["--branch", "merged"], "branch merged has merge commit"),
        (
            ["--branch", "gaudi/v0.1"],
            "config/carry.yaml does not exist: give --downstream-repo OWNER/NAME",
        ),
        (
            ["--branch", "gaudi/v0.1", "--branch", "gaudi/v0.1", *NEW_CONFIG],
            "branches gaudi/v0.1 and gaudi/v0.1 would both be series engine-v0.1",
        ),
        (
            ["--branch", "gaudi/v0.1", "--series", "Bad Id", *NEW_CONFIG],
            "bad series id 'Bad Id'",
        ),
    ],
)
def test_bad_input_is_refused_with_one_line(capsys, shape, checkout, tmp_path, extra, message):
    down = shape.downstream
    down.checkout("refs/remotes/up/releases/v0.1", new_branch="upstream-copy")
    down.git("checkout", "-q", "--orphan", "orphan")
    down.commit("Unrelated history", {"other.txt": "x\n"})
    down.checkout("gaudi/v0.1", new_branch="merged")
    down.git("merge", "-q", "--no-ff", "-m", "Merge upstream main", "refs/remotes/up/main")
    code, out, err = init(capsys, shape, tmp_path, *extra)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert message.format(down=down.path) in err
    assert snapshot(checkout) == {}


def test_no_upstream_repo_for_a_local_upstream_is_refused(capsys, shape, checkout, tmp_path):
    code = main(
        [
            "init",
            "--repo",
            str(shape.downstream.path),
            "--upstream",
            str(shape.upstream.path),
            "--branch",
            "gaudi/v0.1",
            *NEW_CONFIG,
            "--cache-dir",
            str(tmp_path / "cache"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert (
        f"cannot tell the GitHub repository of {shape.upstream.path}: give --upstream-repo" in err
    )


def test_carry_run_accepts_the_config_as_written(capsys, shape, checkout, tmp_path, redis_url):
    """`carry run` as a real process on what init wrote: it starts, its poller checks the new
    series on the upstream line's head, and the API shows the series' patches."""
    assert init(capsys, shape, tmp_path, "--branch", "gaudi/v0.1", *NEW_CONFIG)[0] == 0
    port = free_port()
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("GITHUB_", "CARRY_"))
    }
    env.update(
        PYTHONPATH=str(REPO_ROOT),
        REDIS_URL=redis_url,
        CARRY_CONFIG=str(checkout / "config" / "carry.yaml"),
        CARRY_CACHE_DIR=str(tmp_path / "run-cache"),
        CARRY_DASHBOARD_TOKEN="t0ken-for-the-test",
        CARRY_ALLOW_OPEN_REDIS="1",  # the suite's redis-server has no password
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "run", "--port", str(port)],
        cwd=checkout,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    headers = {"Authorization": "Bearer t0ken-for-the-test"}
    state: dict[str, object] = {}
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/api/v1/series/engine-v0.1", headers=headers
                )
                if answer.status_code == 200:
                    state = answer.json()
                    if state.get("patches"):
                        break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
    assert state.get("patches"), stderr.decode(errors="replace")[-3000:]
    assert "configuration error" not in stderr.decode(errors="replace")
    assert proc.returncode == 0
    assert state["checked_head"] == shape.upstream.head("releases/v0.1")
    patches = {p["name"]: p for p in state["patches"]}  # type: ignore[index]
    assert len(patches) == 4
    leak = next(name for name in patches if "leak" in name)
    # The release line picked #1250 itself: the engine sees it there.
    assert patches[leak]["status"] == "contained"


def test_yaml_written_reads_back(capsys, shape, checkout, tmp_path):
    assert init(capsys, shape, tmp_path, "--branch", "gaudi/v0.1", *NEW_CONFIG)[0] == 0
    data = yaml.safe_load((checkout / "config" / "carry.yaml").read_text())
    assert data["series"][0]["base"] == {"branch": "releases/v0.1"}
    for page in (checkout / "patches" / "engine-v0.1").glob("*.md"):
        parsed, problems = parse_fix_page(page.read_text(), page.name, expected_name=page.stem)
        assert problems == () or not problems
        assert "TODO" in parsed.affects


def test_git_shape_is_what_the_test_means(shape):
    """The fixture itself: the release line carries #1250 as the downstream does."""
    log = git(shape.upstream.path, "log", "--format=%s", "releases/v0.1")
    assert log.splitlines()[0] == LEAK
